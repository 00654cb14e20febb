// Piecewise-affine mesh warp on the device, as gpu_ops/mesh_warp.py does it on the host.
//
// rasterize_triangles: one thread per triangle runs OpenCV's fillConvexPoly (LINE_8, 1/16-px vertices:
//   Line2 outline + scanline fill, 64-bit fixed point) and writes its DRAW RANK with atomicMax, so
//   each pixel ends with the highest rank covering it: the triangle the host's sequential drawing
//   (folded first, then front, in index order; last one wins) leaves there. Same pixels, same owner.
// remap_field: per pixel, the rank's triangle affine gives (map_x, map_y), float32 as NumPy evaluates
//   (c0 * x + c1 * y) + c2; -1 where no triangle covers the pixel.
// remap_bilinear: cv2.remap INTER_LINEAR, BORDER_CONSTANT 0, uint8 with 1..4 channels: the float map is
//   rounded to 1/32 px (round half to even), weights (32-fx)(32-fy)*32... and (sum + 2^14) >> 15.
// Compile with --fmad=false.

#define MESH_XY_SHIFT 16
#define MESH_XY_ONE (1LL << MESH_XY_SHIFT)

__device__ __forceinline__ void put_rank(int* ranks, int width, int height, int x, int y, int rank)
{
    if (0 <= x && x < width && 0 <= y && y < height) atomicMax(ranks + y * width + x, rank);
}

// OpenCV Line2: an 8-connected line between two XY_SHIFT fixed-point points.
__device__ void draw_line(int* ranks, int width, int height, int64 x1, int64 y1, int64 x2, int64 y2, int rank)
{
    if (!clip_line((int64)width << MESH_XY_SHIFT, (int64)height << MESH_XY_SHIFT, &x1, &y1, &x2, &y2)) return;
    int64 dx = x2 - x1, dy = y2 - y1;
    const int64 j = dx < 0 ? -1 : 0, i = dy < 0 ? -1 : 0;
    const int64 ax = (dx ^ j) - j, ay = (dy ^ i) - i;
    int64 x_step, y_step;
    int ecount;
    if (ax > ay) {
        dy = (dy ^ j) - j;
        if (j) { int64 t = x1; x1 = x2; x2 = t; t = y1; y1 = y2; y2 = t; }
        x_step = MESH_XY_ONE;
        y_step = (dy * MESH_XY_ONE) / (ax | 1);
        ecount = (int)((x2 - x1) >> MESH_XY_SHIFT);
    } else {
        dx = (dx ^ i) - i;
        if (i) { int64 t = x1; x1 = x2; x2 = t; t = y1; y1 = y2; y2 = t; }
        x_step = (dx * MESH_XY_ONE) / (ay | 1);
        y_step = MESH_XY_ONE;
        ecount = (int)((y2 - y1) >> MESH_XY_SHIFT);
    }
    x1 += MESH_XY_ONE >> 1;
    y1 += MESH_XY_ONE >> 1;
    put_rank(ranks, width, height, (int)((x2 + (MESH_XY_ONE >> 1)) >> MESH_XY_SHIFT),
             (int)((y2 + (MESH_XY_ONE >> 1)) >> MESH_XY_SHIFT), rank);
    if (ax > ay) {
        x1 >>= MESH_XY_SHIFT;
        for (; ecount >= 0; --ecount) {
            put_rank(ranks, width, height, (int)x1, (int)(y1 >> MESH_XY_SHIFT), rank);
            x1++;
            y1 += y_step;
        }
    } else {
        y1 >>= MESH_XY_SHIFT;
        for (; ecount >= 0; --ecount) {
            put_rank(ranks, width, height, (int)(x1 >> MESH_XY_SHIFT), (int)y1, rank);
            x1 += x_step;
            y1++;
        }
    }
}

// OpenCV FillConvexPoly for one triangle (LINE_8), vertices in 1/2^shift px.
__device__ void fill_convex_triangle(int* ranks, int width, int height, const int* points, int shift, int rank)
{
    int64 vx[3], vy[3];
    for (int k = 0; k < 3; ++k) { vx[k] = points[2 * k]; vy[k] = points[2 * k + 1]; }
    const int npts = 3;
    const int64 delta = (1LL << shift) >> 1;
    int64 xmin = vx[0], xmax = vx[0], ymin = vy[0], ymax = vy[0];
    int imin = 0;
    int64 px0 = vx[npts - 1] << (MESH_XY_SHIFT - shift), py0 = vy[npts - 1] << (MESH_XY_SHIFT - shift);
    for (int k = 0; k < npts; ++k) {
        if (vy[k] < ymin) { ymin = vy[k]; imin = k; }
        ymax = ymax > vy[k] ? ymax : vy[k];
        xmax = xmax > vx[k] ? xmax : vx[k];
        xmin = xmin < vx[k] ? xmin : vx[k];
        const int64 px = vx[k] << (MESH_XY_SHIFT - shift), py = vy[k] << (MESH_XY_SHIFT - shift);
        draw_line(ranks, width, height, px0, py0, px, py, rank);
        px0 = px;
        py0 = py;
    }
    xmin = (xmin + delta) >> shift;
    xmax = (xmax + delta) >> shift;
    ymin = (ymin + delta) >> shift;
    ymax = (ymax + delta) >> shift;
    if ((int)xmax < 0 || (int)ymax < 0 || (int)xmin >= width || (int)ymin >= height) return;
    ymax = ymax < height - 1 ? ymax : height - 1;

    int edge_idx[2] = {imin, imin}, edge_di[2] = {1, npts - 1}, edge_ye[2];
    int64 edge_x[2] = {-MESH_XY_ONE, -MESH_XY_ONE}, edge_dx[2] = {0, 0};
    int y = (int)ymin;
    edge_ye[0] = edge_ye[1] = y;
    int edges = npts;
    const int64 delta1 = MESH_XY_ONE >> 1, delta2 = MESH_XY_ONE >> 1;
    do {
        for (int e = 0; e < 2; ++e) {
            if (y >= edge_ye[e]) {
                int idx0 = edge_idx[e], di = edge_di[e];
                int idx = idx0 + di;
                if (idx >= npts) idx -= npts;
                for (; edges-- > 0;) {
                    const int ty = (int)((vy[idx] + delta) >> shift);
                    if (ty > y) {
                        const int64 xs = vx[idx0] << (MESH_XY_SHIFT - shift);
                        const int64 xe = vx[idx] << (MESH_XY_SHIFT - shift);
                        edge_ye[e] = ty;
                        edge_dx[e] = ((xe - xs) * 2 + ((int64)ty - y)) / (2 * ((int64)ty - y));
                        edge_x[e] = xs;
                        edge_idx[e] = idx;
                        break;
                    }
                    idx0 = idx;
                    idx += di;
                    if (idx >= npts) idx -= npts;
                }
            }
        }
        if (edges < 0) break;
        if (y >= 0) {
            const int left = edge_x[0] > edge_x[1] ? 1 : 0, right = 1 - left;
            int xx1 = (int)((edge_x[left] + delta1) >> MESH_XY_SHIFT);
            int xx2 = (int)((edge_x[right] + delta2) >> MESH_XY_SHIFT);
            if (xx2 >= 0 && xx1 < width) {
                if (xx1 < 0) xx1 = 0;
                if (xx2 >= width) xx2 = width - 1;
                for (int x = xx1; x <= xx2; ++x) atomicMax(ranks + y * width + x, rank);
            }
        }
        edge_x[0] += edge_dx[0];
        edge_x[1] += edge_dx[1];
    } while (++y <= (int)ymax);
}

extern "C" __global__ void rasterize_triangles(
    const int* fixed_points,  // [T,3,2] vertices in 1/16 px (np.round(points * 16))
    const int* draw_order,    // [count] triangle ids in the host's drawing order
    int count, int* ranks, int width, int height)  // ranks [h,w] preset to -1
{
    const int rank = blockIdx.x * blockDim.x + threadIdx.x;
    if (rank >= count) return;
    fill_convex_triangle(ranks, width, height, fixed_points + 6 * draw_order[rank], 4, rank);
}

extern "C" __global__ void remap_field(
    const int* ranks, const int* draw_order, const float* affines,  // affines [T,6] dst -> src
    float* map_x, float* map_y, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int rank = ranks[y * width + x];
    const int index = y * width + x;
    if (rank < 0) {
        map_x[index] = -1.0f;
        map_y[index] = -1.0f;
        return;
    }
    const float* c = affines + 6 * draw_order[rank];
    const float fx = (float)x, fy = (float)y;
    const float ax = c[0] * fx, bx = c[1] * fy, ay = c[3] * fx, by = c[4] * fy;
    map_x[index] = (ax + bx) + c[2];
    map_y[index] = (ay + by) + c[5];
}

extern "C" __global__ void remap_bilinear(
    const uchar* texture, int texture_pitch, int texture_width, int texture_height, int channels,
    const float* map_x, const float* map_y, uchar* out, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int index = y * width + x;
    uchar* target = out + (size_t)index * channels;
    int fixed_x = __float2int_rn(map_x[index] * 32.0f), fixed_y = __float2int_rn(map_y[index] * 32.0f);
    int column = fixed_x >> 5, row = fixed_y >> 5;
    column = column < -32768 ? -32768 : (column > 32767 ? 32767 : column);
    row = row < -32768 ? -32768 : (row > 32767 ? 32767 : row);
    const int x_frac = fixed_x & 31, y_frac = fixed_y & 31;
    int sums[4] = {0, 0, 0, 0};
    if (!(column >= texture_width || column + 1 < 0 || row >= texture_height || row + 1 < 0)) {
        const int weights[4] = {(32 - x_frac) * (32 - y_frac) * 32, x_frac * (32 - y_frac) * 32,
                                (32 - x_frac) * y_frac * 32, x_frac * y_frac * 32};
        for (int k = 0; k < 4; ++k) {
            const int sample_x = column + (k & 1), sample_y = row + (k >> 1);
            if (sample_x < 0 || sample_x >= texture_width || sample_y < 0 || sample_y >= texture_height) continue;
            const uchar* pixel = texture + (size_t)sample_y * texture_pitch + (size_t)sample_x * channels;
            for (int c = 0; c < channels; ++c) sums[c] += weights[k] * pixel[c];
        }
    }
    for (int c = 0; c < channels; ++c) {
        const int value = (sums[c] + (1 << 14)) >> 15;
        target[c] = (uchar)(value > 255 ? 255 : value);
    }
}
