// Multi-band (Laplacian pyramid) blend of gpu_ops/multiband_blend.py on the device, in place.
//
// blend_base:     level 0, per pixel: (patch - region) * w (3 channels), then the L level masks (w is
//                 mask 0), as float32 [h, w, 3 + L].
// pyramid_down:   cv2.pyrDown of a C-channel float image: 5x5 binomial, BORDER_REFLECT_101, (w+1)/2 wide;
//                 rows first, then columns, in OpenCV's order of additions, times 1/256.
// blend_top:      the coarsest level: difference = weighted difference / weight (0 where the weight is
//                 below WEIGHT_EPSILON), correction = its mask * difference; 6 floats per pixel.
// blend_collapse: one level finer: cv2.pyrUp of those 6 floats (OpenCV's borders: reflect at the top and
//                 left, the last row and column repeated at the bottom and right), then
//                 correction = mask * (difference - expanded difference) + expanded correction.
// blend_finish:   the same at level 0, writing region = uint8(clip(region + correction + 0.5)); pixels
//                 whose mask 0 is 0 keep their value.
// Compile with --fmad=false.

#define BLEND_CARRIED 6
#define BLEND_WEIGHT_EPSILON 1e-3f
#define BLEND_MAX_CHANNELS 8

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
    const float* masks, int mask_channels, int levels, int width, int height,
    float* base)  // [height, width, 3 + levels]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const float* mask = masks + ((size_t)y * width + x) * mask_channels;
    const uchar* source = patch + (size_t)y * patch_pitch + 3 * x;
    const uchar* target = region + (size_t)y * region_pitch + 3 * x;
    float* out = base + ((size_t)y * width + x) * (3 + levels);
    const float weight = mask[0];
    for (int c = 0; c < 3; ++c) out[c] = ((float)source[c] - (float)target[c]) * weight;
    for (int k = 0; k < levels; ++k) out[3 + k] = mask[k];
}

extern "C" __global__ void pyramid_down(
    const float* source, int source_width, int source_height, int channels,
    float* out, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height || channels > BLEND_MAX_CHANNELS) return;
    int columns[5];
    for (int i = 0; i < 5; ++i) columns[i] = reflect_101(2 * x + i - 2, source_width) * channels;
    float rows[5][BLEND_MAX_CHANNELS];
    for (int j = 0; j < 5; ++j) {
        const float* row = source + (size_t)reflect_101(2 * y + j - 2, source_height) * source_width * channels;
        for (int c = 0; c < channels; ++c) {
            rows[j][c] = row[columns[2] + c] * 6.0f + (row[columns[1] + c] + row[columns[3] + c]) * 4.0f
                + row[columns[0] + c] + row[columns[4] + c];
        }
    }
    float* target = out + ((size_t)y * width + x) * channels;
    for (int c = 0; c < channels; ++c) {
        const float sum = rows[2][c] * 6.0f + (rows[1][c] + rows[3][c]) * 4.0f + rows[0][c] + rows[4][c];
        target[c] = sum * (1.0f / 256.0f);
    }
}

// One row of cv2.pyrUp's horizontal pass at output column `column`, channel c (times 8 in total).
__device__ __forceinline__ float expand_row(const float* row, int width, int column, int c)
{
    const int x = column >> 1;
    if (width == 1) return row[c] * 8.0f;
    const float* here = row + x * BLEND_CARRIED + c;
    if (column & 1) {
        if (x == width - 1) return here[0] * 8.0f;
        return (here[0] + here[BLEND_CARRIED]) * 4.0f;
    }
    if (x == 0) return here[0] * 6.0f + here[BLEND_CARRIED] * 2.0f;
    if (x == width - 1) return here[-BLEND_CARRIED] + here[0] * 7.0f;
    return here[-BLEND_CARRIED] + here[0] * 6.0f + here[BLEND_CARRIED];
}

// cv2.pyrUp of the 6 carried floats at output pixel (column, line) of a (2w-ish, 2h-ish) image.
__device__ void expand_carried(const float* coarse, int width, int height, int column, int line, float* out)
{
    const int y = line >> 1;
    const int above = y - 1 < 0 ? (height > 1 ? 1 : 0) : y - 1;
    const int below = y + 1 >= height ? height - 1 : y + 1;
    const float* row_above = coarse + (size_t)above * width * BLEND_CARRIED;
    const float* row_here = coarse + (size_t)y * width * BLEND_CARRIED;
    const float* row_below = coarse + (size_t)below * width * BLEND_CARRIED;
    for (int c = 0; c < BLEND_CARRIED; ++c) {
        float value;
        if (line & 1) {
            value = (expand_row(row_here, width, column, c) + expand_row(row_below, width, column, c)) * 4.0f;
        } else {
            value = expand_row(row_above, width, column, c) + expand_row(row_here, width, column, c) * 6.0f
                + expand_row(row_below, width, column, c);
        }
        out[c] = value * (1.0f / 64.0f);
    }
}

__device__ __forceinline__ float normalised(const float* level, int c)
{
    const float weight = level[3];
    return weight > BLEND_WEIGHT_EPSILON ? level[c] / weight : 0.0f;
}

extern "C" __global__ void blend_top(
    const float* level, int channels, int mask_index, int width, int height, float* carried)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const float* here = level + ((size_t)y * width + x) * channels;
    float* out = carried + ((size_t)y * width + x) * BLEND_CARRIED;
    const float mask = here[3 + mask_index];
    for (int c = 0; c < 3; ++c) {
        const float difference = normalised(here, c);
        out[c] = difference;
        out[3 + c] = mask * difference;
    }
}

extern "C" __global__ void blend_collapse(
    const float* coarse, int coarse_width, int coarse_height,
    const float* level, int channels, int mask_index, int width, int height, float* carried)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    float expanded[BLEND_CARRIED];
    expand_carried(coarse, coarse_width, coarse_height, x, y, expanded);
    const float* here = level + ((size_t)y * width + x) * channels;
    float* out = carried + ((size_t)y * width + x) * BLEND_CARRIED;
    const float mask = here[3 + mask_index];
    for (int c = 0; c < 3; ++c) {
        const float difference = normalised(here, c);
        out[c] = difference;
        out[3 + c] = mask * (difference - expanded[c]) + expanded[3 + c];
    }
}

extern "C" __global__ void blend_finish(
    const float* coarse, int coarse_width, int coarse_height,
    const float* level, int channels, uchar* region, int region_pitch, int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const float* here = level + ((size_t)y * width + x) * channels;
    const float mask = here[3];
    if (mask <= 0.0f) return;
    float expanded[BLEND_CARRIED];
    expand_carried(coarse, coarse_width, coarse_height, x, y, expanded);
    uchar* target = region + (size_t)y * region_pitch + 3 * x;
    for (int c = 0; c < 3; ++c) {
        const float difference = normalised(here, c);
        const float correction = mask * (difference - expanded[c]) + expanded[3 + c];
        float value = (float)target[c] + correction + 0.5f;
        value = value < 0.0f ? 0.0f : (value > 255.0f ? 255.0f : value);
        target[c] = (uchar)value;
    }
}
