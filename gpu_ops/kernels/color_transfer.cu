// match_shading of gpu_ops/color_transfer.py on the device, in three small launches:
// shading_cells:  per coarse cell, cv2.resize INTER_AREA of patch*w, reference*w and w (OpenCV's area
//                 table: fractional edge pixels weighted by their overlap), 7 floats per cell.
// shading_ratio:  per cell, the 9-tap Gaussian (sigma 1, BORDER_REPLICATE; rows, then columns) of those
//                 7 planes, the mask-normalised low frequencies, ratio = clip((ref+6)/(patch+6), lo, hi).
// apply_shading:  per pixel, cv2.resize INTER_LINEAR of the ratio grid (float coordinates, edge clamp),
//                 out = uint8(clip(patch * ratio + 0.5, 0, 255)).
// Float sums run in another order than OpenCV's vectorised loops: results agree within 1 level.
// Compile with --fmad=false.

#define SHADING_PLANES 7

// OpenCV computeResizeAreaTab weight of source index `s` for destination cell `d` (0 when unused).
__device__ float area_weight(int d, int s, int source_size, double scale)
{
    const double fs1 = d * scale, fs2 = fs1 + scale;
    const double cell = scale < source_size - fs1 ? scale : source_size - fs1;
    int s1 = (int)ceil(fs1), s2 = (int)floor(fs2);
    s2 = s2 < source_size - 1 ? s2 : source_size - 1;
    s1 = s1 < s2 ? s1 : s2;
    if (s == s1 - 1 && s1 - fs1 > 1e-3) return (float)((s1 - fs1) / cell);
    if (s >= s1 && s < s2) return (float)(1.0 / cell);
    if (s == s2 && fs2 - s2 > 1e-3) {
        double part = fs2 - s2 < 1.0 ? fs2 - s2 : 1.0;
        part = part < cell ? part : cell;
        return (float)(part / cell);
    }
    return 0.0f;
}

extern "C" __global__ void shading_cells(
    const uchar* patch, int patch_pitch, const uchar* reference, int reference_pitch,
    const float* weights, int weights_pitch,  // pitches in bytes (weights: a float32 [h,w] plane)
    int width, int height, int grid_width, int grid_height, double scale_x, double scale_y,
    float* cells)  // [grid_height, grid_width, 7]: patch*w (3), reference*w (3), w
{
    const int gx = blockIdx.x * blockDim.x + threadIdx.x;
    const int gy = blockIdx.y * blockDim.y + threadIdx.y;
    if (gx >= grid_width || gy >= grid_height) return;
    const int x_start = (int)floor(gx * scale_x) - 1, x_end = (int)ceil((gx + 1) * scale_x) + 1;
    const int y_start = (int)floor(gy * scale_y) - 1, y_end = (int)ceil((gy + 1) * scale_y) + 1;
    float totals[SHADING_PLANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int y = y_start < 0 ? 0 : y_start; y <= y_end && y < height; ++y) {
        const float row_weight = area_weight(gy, y, height, scale_y);
        if (row_weight == 0.0f) continue;
        float row[SHADING_PLANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        const uchar* patch_row = patch + (size_t)y * patch_pitch;
        const uchar* reference_row = reference + (size_t)y * reference_pitch;
        const float* weight_row = (const float*)((const uchar*)weights + (size_t)y * weights_pitch);
        for (int x = x_start < 0 ? 0 : x_start; x <= x_end && x < width; ++x) {
            const float column_weight = area_weight(gx, x, width, scale_x);
            if (column_weight == 0.0f) continue;
            const float w = weight_row[x];
            for (int c = 0; c < 3; ++c) {
                const float p = (float)patch_row[3 * x + c] * w;
                const float r = (float)reference_row[3 * x + c] * w;
                row[c] = row[c] + p * column_weight;
                row[3 + c] = row[3 + c] + r * column_weight;
            }
            row[6] = row[6] + w * column_weight;
        }
        for (int k = 0; k < SHADING_PLANES; ++k) totals[k] = totals[k] + row[k] * row_weight;
    }
    float* out = cells + ((size_t)gy * grid_width + gx) * SHADING_PLANES;
    for (int k = 0; k < SHADING_PLANES; ++k) out[k] = totals[k];
}

extern "C" __global__ void shading_ratio(
    const float* cells, int grid_width, int grid_height,
    const float* gaussian, int taps,  // cv2.getGaussianKernel(taps, sigma, CV_32F)
    float ratio_low, float ratio_high, float offset,
    float* ratio)  // [grid_height, grid_width, 3]
{
    const int gx = blockIdx.x * blockDim.x + threadIdx.x;
    const int gy = blockIdx.y * blockDim.y + threadIdx.y;
    if (gx >= grid_width || gy >= grid_height) return;
    const int half = taps / 2;
    float blurred[SHADING_PLANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < taps; ++j) {
        int y = gy + j - half;
        y = y < 0 ? 0 : (y >= grid_height ? grid_height - 1 : y);
        float row[SHADING_PLANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        for (int k = 0; k < taps; ++k) {
            int x = gx + k - half;
            x = x < 0 ? 0 : (x >= grid_width ? grid_width - 1 : x);
            const float* cell = cells + ((size_t)y * grid_width + x) * SHADING_PLANES;
            for (int p = 0; p < SHADING_PLANES; ++p) row[p] = row[p] + gaussian[k] * cell[p];
        }
        for (int p = 0; p < SHADING_PLANES; ++p) blurred[p] = blurred[p] + gaussian[j] * row[p];
    }
    const float total = blurred[6] > 1e-4f ? blurred[6] : 1e-4f;
    float* out = ratio + ((size_t)gy * grid_width + gx) * 3;
    for (int c = 0; c < 3; ++c) {
        const float low_patch = blurred[c] / total, low_reference = blurred[3 + c] / total;
        const float value = (low_reference + offset) / (low_patch + offset);
        out[c] = value < ratio_low ? ratio_low : (value > ratio_high ? ratio_high : value);
    }
}

// cv2.resize INTER_LINEAR source index and weight of the next sample, for one axis.
__device__ void linear_tap(int d, double scale, int source_size, int* s, float* f)
{
    float fs = (float)((d + 0.5) * scale - 0.5);
    int index = (int)floorf(fs);
    fs -= (float)index;
    if (index < 0) { fs = 0.0f; index = 0; }
    if (index >= source_size - 1) { fs = 0.0f; index = source_size - 1; }
    *s = index;
    *f = fs;
}

extern "C" __global__ void apply_shading(
    const uchar* patch, int patch_pitch, const float* ratio, int grid_width, int grid_height,
    double scale_x, double scale_y,  // grid size / patch size, as cv2.resize computes it
    uchar* out, int width, int height)  // out: contiguous [h,w,3]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    int sx, sy;
    float fx, fy;
    linear_tap(x, scale_x, grid_width, &sx, &fx);
    linear_tap(y, scale_y, grid_height, &sy, &fy);
    const int sx1 = sx + 1 < grid_width ? sx + 1 : sx, sy1 = sy + 1 < grid_height ? sy + 1 : sy;
    const float* r00 = ratio + ((size_t)sy * grid_width + sx) * 3;
    const float* r01 = ratio + ((size_t)sy * grid_width + sx1) * 3;
    const float* r10 = ratio + ((size_t)sy1 * grid_width + sx) * 3;
    const float* r11 = ratio + ((size_t)sy1 * grid_width + sx1) * 3;
    const uchar* source = patch + (size_t)y * patch_pitch + 3 * x;
    uchar* target = out + ((size_t)y * width + x) * 3;
    for (int c = 0; c < 3; ++c) {
        const float top = r00[c] * (1.0f - fx) + r01[c] * fx;
        const float bottom = r10[c] * (1.0f - fx) + r11[c] * fx;
        const float r = top * (1.0f - fy) + bottom * fy;
        float value = (float)source[c] * r + 0.5f;
        value = value < 0.0f ? 0.0f : (value > 255.0f ? 255.0f : value);
        target[c] = (uchar)value;
    }
}
