"""Benchmarks and their loopback clients: tools that measure the product; nothing in the product imports them."""
