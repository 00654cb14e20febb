// Affine crops that equal cv2.warpAffine(INTER_LINEAR, BORDER_REPLICATE) bit for bit (OpenCV 4.x):
// source coordinates in 1/1024 px rounded to 1/32 px, bilinear weights (32-fx)(32-fy)*32 etc. summing
// to 1 << 15, result (sum + (1 << 14)) >> 15. Matrices are passed already inverted (crop -> frame),
// inverted on the host exactly as warpAffine does, as 6 doubles per face. Compile with --fmad=false.

struct FixedPointSample {
    int x;        // integer source column (may be outside the frame)
    int y;
    int x_frac;   // 0..31
    int y_frac;
};

__device__ __forceinline__ int clamp_int(int value, int low, int high) {
    return value < low ? low : (value > high ? high : value);
}

// warpAffine's coordinate maths for output pixel (x, y) and inverse matrix m (crop -> frame).
__device__ __forceinline__ FixedPointSample locate_source(const double* m, int x, int y) {
    const int row_x = __double2int_rn((m[1] * (double)y + m[2]) * 1024.0) + 16;
    const int row_y = __double2int_rn((m[4] * (double)y + m[5]) * 1024.0) + 16;
    const int column_x = __double2int_rn(m[0] * (double)x * 1024.0);
    const int column_y = __double2int_rn(m[3] * (double)x * 1024.0);
    const int fixed_x = (row_x + column_x) >> 5;
    const int fixed_y = (row_y + column_y) >> 5;
    FixedPointSample sample;
    sample.x = clamp_int(fixed_x >> 5, -32768, 32767);  // OpenCV stores coordinates as short
    sample.y = clamp_int(fixed_y >> 5, -32768, 32767);
    sample.x_frac = fixed_x & 31;
    sample.y_frac = fixed_y & 31;
    return sample;
}

// Bilinear RGB sample with replicated borders; writes the 3 uint8 results (OpenCV's rounding).
__device__ __forceinline__ void sample_replicate(
    const uchar* frame, int pitch, int width, int height, FixedPointSample s, int* rgb)
{
    const int x0 = clamp_int(s.x, 0, width - 1), x1 = clamp_int(s.x + 1, 0, width - 1);
    const int y0 = clamp_int(s.y, 0, height - 1), y1 = clamp_int(s.y + 1, 0, height - 1);
    const int w00 = (32 - s.x_frac) * (32 - s.y_frac) * 32, w01 = s.x_frac * (32 - s.y_frac) * 32;
    const int w10 = (32 - s.x_frac) * s.y_frac * 32, w11 = s.x_frac * s.y_frac * 32;
    const uchar* p00 = frame + y0 * pitch + 3 * x0;
    const uchar* p01 = frame + y0 * pitch + 3 * x1;
    const uchar* p10 = frame + y1 * pitch + 3 * x0;
    const uchar* p11 = frame + y1 * pitch + 3 * x1;
    for (int c = 0; c < 3; ++c) {
        const int sum = w00 * p00[c] + w01 * p01[c] + w10 * p10[c] + w11 * p11[c];
        rgb[c] = clamp_int((sum + (1 << 14)) >> 15, 0, 255);
    }
}

// One face crop as uint8 [out_height, out_width, 3]: cv2.warpAffine(frame, M, size) exactly.
extern "C" __global__ void warp_crop(
    const uchar* frame, int pitch, int width, int height,
    const double* inverse_matrix, uchar* out, int out_width, int out_height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= out_width || y >= out_height) return;
    int rgb[3];
    sample_replicate(frame, pitch, width, height, locate_source(inverse_matrix, x, y), rgb);
    uchar* target = out + (y * out_width + x) * 3;
    target[0] = (uchar)rgb[0];
    target[1] = (uchar)rgb[1];
    target[2] = (uchar)rgb[2];
}

// All faces of all frames of a batch in one launch: warp + (v * scale - mean[c]) / std[c] + channel
// order + layout, straight into the model input buffer. blockIdx.z is the face. `frame_table` holds
// 4 int64 per frame: device pointer, row pitch in bytes, width, height (one small upload per batch).
// A face whose frame_index is out of range gets zeros (indices may come from the device unchecked).
extern "C" __global__ void crop_faces(
    const long long* frame_table, int frame_count,
    const int* frame_index, const double* inverse_matrices,
    float* out, int out_width, int out_height, int face_count,
    float scale, float mean0, float mean1, float mean2, float std0, float std1, float std2,
    int swap_rb, int channels_first)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int face = blockIdx.z;
    if (x >= out_width || y >= out_height || face >= face_count) return;
    const int source = frame_index[face];
    const bool valid = source >= 0 && source < frame_count;
    int rgb[3] = {0, 0, 0};
    if (valid) {
        const long long* entry = frame_table + 4 * source;
        sample_replicate((const uchar*)entry[0], (int)entry[1], (int)entry[2], (int)entry[3],
                         locate_source(inverse_matrices + 6 * face, x, y), rgb);
    }
    const float means[3] = {mean0, mean1, mean2};
    const float stds[3] = {std0, std1, std2};
    const long long plane = (long long)out_width * out_height;
    for (int c = 0; c < 3; ++c) {
        const float value = valid ? ((float)rgb[swap_rb ? 2 - c : c] * scale - means[c]) / stds[c] : 0.0f;
        if (channels_first) {
            out[(long long)face * 3 * plane + c * plane + (long long)y * out_width + x] = value;
        } else {
            out[(((long long)face * out_height + y) * out_width + x) * 3 + c] = value;
        }
    }
}
