"""Swap engines behind one contract (base.py), so the pipeline never branches on which one runs."""
