"""Benchmarks and their loopback clients, the top floor: they drive the product (gpu_ops < models <
streamer < web < bench) and nothing in the product imports them."""
