"""Model files, their registry and one small class per model role; the face record they all share."""
