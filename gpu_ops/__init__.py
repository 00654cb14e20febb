"""Array kernels with one API and two backends: NumPy/OpenCV mirrors (the CPU path and the oracle) and CuPy."""
