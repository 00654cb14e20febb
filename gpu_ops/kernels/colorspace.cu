// YUV 4:2:0 <-> RGB, the integer maths of gpu_ops/colorspace.py (Q20 fixed point, OpenCV's rounding).
// Planes are pitched: each row starts `pitch` bytes after the previous one. One source serves I420
// (chroma_step 1, separate U and V planes) and NV12 (chroma_step 2, v = u + 1 in the same plane).

__device__ __forceinline__ uchar clamp_to_byte(int value) {
    return (uchar)(value < 0 ? 0 : (value > 255 ? 255 : value));
}

extern "C" __global__ void yuv420_to_rgb(
    const uchar* y_plane, int y_pitch,
    const uchar* u_plane, int u_pitch,
    const uchar* v_plane, int v_pitch,
    int chroma_step,
    uchar* rgb, int rgb_pitch,
    int width, int height,
    int luma_gain, int v_to_red, int v_to_green, int u_to_green, int u_to_blue, int luma_offset)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int half = 1 << 19;
    const int chroma_x = (x >> 1) * chroma_step;
    const int u_centred = (int)u_plane[(y >> 1) * u_pitch + chroma_x] - 128;
    const int v_centred = (int)v_plane[(y >> 1) * v_pitch + chroma_x] - 128;
    const int luma_raw = (int)y_plane[y * y_pitch + x] - luma_offset;
    const int luma = (luma_raw > 0 ? luma_raw : 0) * luma_gain;
    uchar* out = rgb + y * rgb_pitch + 3 * x;
    out[0] = clamp_to_byte((luma + half + v_to_red * v_centred) >> 20);
    out[1] = clamp_to_byte((luma + half + v_to_green * v_centred + u_to_green * u_centred) >> 20);
    out[2] = clamp_to_byte((luma + half + u_to_blue * u_centred) >> 20);
}

// One thread per 2x2 block: four Y samples and one U, V from the block's summed RGB.
extern "C" __global__ void rgb_to_yuv420(
    const uchar* rgb, int rgb_pitch,
    uchar* y_plane, int y_pitch,
    uchar* u_plane, int u_pitch,
    uchar* v_plane, int v_pitch,
    int half_width, int half_height,
    int red_to_luma, int green_to_luma, int blue_to_luma,
    int red_to_u, int green_to_u, int blue_to_u,
    int red_to_v, int green_to_v, int blue_to_v,
    int luma_offset)
{
    const int block_x = blockIdx.x * blockDim.x + threadIdx.x;
    const int block_y = blockIdx.y * blockDim.y + threadIdx.y;
    if (block_x >= half_width || block_y >= half_height) return;
    const int luma_rounding = (luma_offset << 20) + (1 << 19);
    int red_sum = 0, green_sum = 0, blue_sum = 0;
    for (int dy = 0; dy < 2; ++dy) {
        const int row = 2 * block_y + dy;
        for (int dx = 0; dx < 2; ++dx) {
            const int column = 2 * block_x + dx;
            const uchar* pixel = rgb + row * rgb_pitch + 3 * column;
            const int red = pixel[0], green = pixel[1], blue = pixel[2];
            red_sum += red;
            green_sum += green;
            blue_sum += blue;
            const int luma = red_to_luma * red + green_to_luma * green + blue_to_luma * blue + luma_rounding;
            y_plane[row * y_pitch + column] = clamp_to_byte(luma >> 20);
        }
    }
    const int chroma_rounding = (128 << 22) + (1 << 21);
    const int u = red_to_u * red_sum + green_to_u * green_sum + blue_to_u * blue_sum + chroma_rounding;
    const int v = red_to_v * red_sum + green_to_v * green_sum + blue_to_v * blue_sum + chroma_rounding;
    u_plane[block_y * u_pitch + block_x] = clamp_to_byte(u >> 22);
    v_plane[block_y * v_pitch + block_x] = clamp_to_byte(v >> 22);
}
