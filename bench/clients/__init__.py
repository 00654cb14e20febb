"""The daemon's loopback clients: a WebRTC peer, WHIP and WHEP endpoints, the daemon as a child process and
the frames they send. Tests and benchmarks both drive the daemon through these; nothing in the product
imports them."""
