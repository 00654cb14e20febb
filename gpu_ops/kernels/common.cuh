// Prepended to every kernel source at load time (gpu_ops/kernels/__init__.py), so NVRTC, CuPy and the
// host-run tests' g++ shim all compile one copy: the scalar types and the line clipping that both the
// polygon masks (masks.cu) and the triangle rasteriser (mesh_warp.cu) port from OpenCV.
#ifndef LIVEFUSE_KERNELS_COMMON
#define LIVEFUSE_KERNELS_COMMON

typedef unsigned char uchar;
typedef long long int64;

// OpenCV clipLine on a (width, height) box of 64-bit coordinates; false when the line misses it.
__device__ bool clip_line(int64 width, int64 height, int64* x1, int64* y1, int64* x2, int64* y2)
{
    const int64 right = width - 1, bottom = height - 1;
    int c1 = (*x1 < 0) + (*x1 > right) * 2 + (*y1 < 0) * 4 + (*y1 > bottom) * 8;
    int c2 = (*x2 < 0) + (*x2 > right) * 2 + (*y2 < 0) * 4 + (*y2 > bottom) * 8;
    if ((c1 & c2) == 0 && (c1 | c2) != 0) {
        int64 a;
        if (c1 & 12) {
            a = c1 < 8 ? 0 : bottom;
            *x1 += (a - *y1) * (*x2 - *x1) / (*y2 - *y1);
            *y1 = a;
            c1 = (*x1 < 0) + (*x1 > right) * 2;
        }
        if (c2 & 12) {
            a = c2 < 8 ? 0 : bottom;
            *x2 += (a - *y2) * (*x2 - *x1) / (*y2 - *y1);
            *y2 = a;
            c2 = (*x2 < 0) + (*x2 > right) * 2;
        }
        if ((c1 & c2) == 0 && (c1 | c2) != 0) {
            if (c1) {
                a = c1 == 1 ? 0 : right;
                *y1 += (a - *x1) * (*y2 - *y1) / (*x2 - *x1);
                *x1 = a;
                c1 = 0;
            }
            if (c2) {
                a = c2 == 1 ? 0 : right;
                *y2 += (a - *x2) * (*y2 - *y1) / (*x2 - *x1);
                *x2 = a;
                c2 = 0;
            }
        }
    }
    return (c1 | c2) == 0;
}

#endif  // LIVEFUSE_KERNELS_COMMON
