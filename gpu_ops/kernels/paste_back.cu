// Paste a swapped crop back over one face's box of the frame, in place, as gpu_ops/paste_back.py:
// for each box pixel, the classic full-frame warpAffine's fixed-point coordinates in the crop, the crop
// sampled bilinearly with a zero border (OpenCV's integer rounding), the float mask sampled with
// OpenCV's float weights, then frame = rint(mask * crop + (1 - mask) * frame). Compile with --fmad=false.

extern "C" __global__ void paste_back(
    uchar* frame, int frame_pitch,
    const uchar* crop, const float* crop_mask, int crop_width, int crop_height,
    const double* frame_to_crop,  // 6 doubles: warpAffine's own inverse of invertAffineTransform(M)
    int box_x, int box_y, int box_width, int box_height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= box_width || y >= box_height) return;
    const double* m = frame_to_crop;
    const double frame_x = (double)(box_x + x), frame_y = (double)(box_y + y);  // absolute, as the classic warp
    const int fixed_x = (__double2int_rn((m[1] * frame_y + m[2]) * 1024.0) + 16
                         + __double2int_rn(m[0] * frame_x * 1024.0)) >> 5;
    const int fixed_y = (__double2int_rn((m[4] * frame_y + m[5]) * 1024.0) + 16
                         + __double2int_rn(m[3] * frame_x * 1024.0)) >> 5;
    const int column = fixed_x >> 5, row = fixed_y >> 5;
    const int x_frac = fixed_x & 31, y_frac = fixed_y & 31;
    if (column < -1 || column >= crop_width || row < -1 || row >= crop_height) return;  // mask is 0 here

    const int weights[4] = {(32 - x_frac) * (32 - y_frac) * 32, x_frac * (32 - y_frac) * 32,
                            (32 - x_frac) * y_frac * 32, x_frac * y_frac * 32};
    const float fx = (float)x_frac * (1.0f / 32.0f), fy = (float)y_frac * (1.0f / 32.0f);
    const float mask_weights[4] = {(1.0f - fy) * (1.0f - fx), (1.0f - fy) * fx, fy * (1.0f - fx), fy * fx};
    int sums[3] = {0, 0, 0};
    float mask_samples[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < 4; ++k) {
        const int sample_x = column + (k & 1), sample_y = row + (k >> 1);
        if (sample_x < 0 || sample_x >= crop_width || sample_y < 0 || sample_y >= crop_height) continue;
        const uchar* pixel = crop + (sample_y * crop_width + sample_x) * 3;
        for (int c = 0; c < 3; ++c) sums[c] += weights[k] * pixel[c];
        mask_samples[k] = crop_mask[sample_y * crop_width + sample_x];
    }
    const float mask = mask_samples[0] * mask_weights[0] + mask_samples[1] * mask_weights[1]
                     + mask_samples[2] * mask_weights[2] + mask_samples[3] * mask_weights[3];
    if (mask == 0.0f) return;
    uchar* target = frame + (box_y + y) * frame_pitch + 3 * (box_x + x);
    for (int c = 0; c < 3; ++c) {
        int value = (sums[c] + (1 << 14)) >> 15;
        value = value > 255 ? 255 : value;
        const float blended = mask * (float)value + (1.0f - mask) * (float)target[c];
        const float rounded = rintf(blended);
        target[c] = (uchar)(rounded < 0.0f ? 0.0f : (rounded > 255.0f ? 255.0f : rounded));
    }
}
