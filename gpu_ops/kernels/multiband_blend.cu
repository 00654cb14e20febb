// Multi-band (Laplacian pyramid) blend of gpu_ops/multiband_blend.py on the device, in place.
//
// blend_base:    level 0, per pixel: (patch - region) * w and w (w = mask 0), float32 [h, w, 4].
// pyramid_down:  cv2.pyrDown of those 4 channels: 5x5 binomial, BORDER_REFLECT_101, (w+1)/2 wide; rows
//                first, then columns, in OpenCV's order of additions, times 1/256.
// blend_stack:   one level, from the coarsest up to level 1: [normalised difference of this level (3),
//                cv2.pyrUp of the coarser level's stack], so level 1 ends up holding every coarser level
//                expanded to its size. pyrUp's borders as OpenCV's: reflected at the top and left, the
//                last row and column repeated at the bottom and right; times 1/64.
// blend_finish:  level 0: pyrUp of level 1's stack gives P_1 .. P_L-1 at full resolution, and
//                correction = m0 * D + sum over k of (m_k - m_k-1) * P_k; region = uint8(clip(region +
//                correction + 0.5)). All masks 0 leave a pixel as it was.
// "Normalised difference": weighted difference / max(weight, WEIGHT_EPSILON).
// Compile with --fmad=false.

#define BLEND_WEIGHT_EPSILON 1e-3f
#define BLEND_MAX_STACK 12  // 3 x (MAX_LEVELS - 1)
#define BLEND_MAX_MASKS 5

__device__ __forceinline__ int reflect_101(int index, int size)
{
    if (size == 1) return 0;
    while (index < 0 || index >= size) {
        if (index < 0) index = -index;
        if (index >= size) index = 2 * size - 2 - index;
    }
    return index;
}

extern "C" __global__ void blend_base(
    const uchar* patch, int patch_pitch, const uchar* region, int region_pitch,
    const float* masks, int mask_channels, int width, int height, float* base)  // base [h, w, 4]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const float weight = masks[((size_t)y * width + x) * mask_channels];
    const uchar* source = patch + (size_t)y * patch_pitch + 3 * x;
    const uchar* target = region + (size_t)y * region_pitch + 3 * x;
    float* out = base + ((size_t)y * width + x) * 4;
    for (int c = 0; c < 3; ++c) out[c] = ((float)source[c] - (float)target[c]) * weight;
    out[3] = weight;
}

extern "C" __global__ void pyramid_down(
    const float* source, int source_width, int source_height, float* out, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    int columns[5];
    for (int i = 0; i < 5; ++i) columns[i] = reflect_101(2 * x + i - 2, source_width) * 4;
    float rows[5][4];
    for (int j = 0; j < 5; ++j) {
        const float* row = source + (size_t)reflect_101(2 * y + j - 2, source_height) * source_width * 4;
        for (int c = 0; c < 4; ++c) {
            rows[j][c] = row[columns[2] + c] * 6.0f + (row[columns[1] + c] + row[columns[3] + c]) * 4.0f
                + row[columns[0] + c] + row[columns[4] + c];
        }
    }
    float* target = out + ((size_t)y * width + x) * 4;
    for (int c = 0; c < 4; ++c) {
        const float sum = rows[2][c] * 6.0f + (rows[1][c] + rows[3][c]) * 4.0f + rows[0][c] + rows[4][c];
        target[c] = sum * (1.0f / 256.0f);
    }
}

// cv2.pyrUp's horizontal pass on one row, at output column `column`, channel c (8 x the value).
__device__ __forceinline__ float expand_row(const float* row, int width, int channels, int column, int c)
{
    const int x = column >> 1;
    if (width == 1) return row[c] * 8.0f;
    const float* here = row + x * channels + c;
    if (column & 1) {
        if (x == width - 1) return here[0] * 8.0f;
        return (here[0] + here[channels]) * 4.0f;
    }
    if (x == 0) return here[0] * 6.0f + here[channels] * 2.0f;
    if (x == width - 1) return here[-channels] + here[0] * 7.0f;
    return here[-channels] + here[0] * 6.0f + here[channels];
}

// cv2.pyrUp of a `channels`-channel (width x height) image at output pixel (column, line).
__device__ void expand(const float* coarse, int channels, int width, int height, int column, int line, float* out)
{
    const int y = line >> 1;
    const int above = y - 1 < 0 ? (height > 1 ? 1 : 0) : y - 1;
    const int below = y + 1 >= height ? height - 1 : y + 1;
    const size_t pitch = (size_t)width * channels;
    const float* row_above = coarse + (size_t)above * pitch;
    const float* row_here = coarse + (size_t)y * pitch;
    const float* row_below = coarse + (size_t)below * pitch;
    for (int c = 0; c < channels; ++c) {
        float value;
        if (line & 1) {
            value = (expand_row(row_here, width, channels, column, c)
                     + expand_row(row_below, width, channels, column, c)) * 4.0f;
        } else {
            value = expand_row(row_above, width, channels, column, c)
                + expand_row(row_here, width, channels, column, c) * 6.0f
                + expand_row(row_below, width, channels, column, c);
        }
        out[c] = value * (1.0f / 64.0f);
    }
}

__device__ __forceinline__ float normalised(const float* level, int c)
{
    const float weight = level[3] > BLEND_WEIGHT_EPSILON ? level[3] : BLEND_WEIGHT_EPSILON;
    return level[c] / weight;
}

extern "C" __global__ void blend_stack(
    const float* coarse, int coarse_channels, int coarse_width, int coarse_height,
    const float* level, int width, int height, float* out)  // out [h, w, 3 + coarse_channels]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height || coarse_channels > BLEND_MAX_STACK - 3) return;
    const float* here = level + ((size_t)y * width + x) * 4;
    float* target = out + ((size_t)y * width + x) * (3 + coarse_channels);
    for (int c = 0; c < 3; ++c) target[c] = normalised(here, c);
    if (coarse_channels > 0) expand(coarse, coarse_channels, coarse_width, coarse_height, x, y, target + 3);
}

extern "C" __global__ void blend_finish(
    const float* coarse, int coarse_width, int coarse_height, int levels,
    const float* base, const float* masks, int mask_channels, uchar* region, int region_pitch,
    int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height || levels > BLEND_MAX_MASKS) return;
    float expanded[BLEND_MAX_STACK];
    expand(coarse, 3 * (levels - 1), coarse_width, coarse_height, x, y, expanded);
    const float* here = base + ((size_t)y * width + x) * 4;
    const float* mask = masks + ((size_t)y * width + x) * mask_channels;
    uchar* target = region + (size_t)y * region_pitch + 3 * x;
    for (int c = 0; c < 3; ++c) {
        float correction = here[c];  // m0 * D, from blend_base
        for (int band = 1; band < levels; ++band) {
            const float step = mask[band] - mask[band - 1];
            correction = correction + step * expanded[3 * (band - 1) + c];
        }
        float value = (float)target[c] + correction + 0.5f;
        value = value < 0.0f ? 0.0f : (value > 255.0f ? 255.0f : value);
        target[c] = (uchar)value;
    }
}
