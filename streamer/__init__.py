"""The real-time engine and the face pipeline, in rooms: realtime, transport, pipeline, outputs."""
