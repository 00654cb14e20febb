"""aiortc latency fixes and the ICE address rule, installed process-wide by the daemon and the clients."""
