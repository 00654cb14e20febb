"""The daemon as a participant of an SFU room (Janus VideoRoom): the Janus API client, the VideoRoom
requests, and the room worker that swaps one feed and publishes the result into the same room."""
