"""The face pipeline: tracking, smoothing, selection and the swap engines, shared by every front end."""
