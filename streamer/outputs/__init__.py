"""What leaves the pipeline besides a WebRTC track: files, the local camera, the virtual camera, labels."""
