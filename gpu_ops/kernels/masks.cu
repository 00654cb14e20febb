// fill_polygons of gpu_ops/masks.py on the device: cv2.fillPoly (LINE_8, 1/16-px vertices, one polygon
// per call, value 255) in two launches that together write the pixels OpenCV writes:
// polygon_rows:    one thread per image row: the x of every edge crossing the row (OpenCV's edge table:
//                  x in 1/65536 px at the edge's top row, plus dx per row), sorted, filled pairwise
//                  from ceil(left) to floor(right), as FillEdgeCollection's active-edge walk does.
// polygon_outline: one thread per edge: the integer 8-connected Bresenham line (cv::LineIterator)
//                  between the rounded vertices, as CollectPolyEdges draws it.
// Rows and outline only ever write 255, so the order between threads does not matter.

#define MASK_XY_SHIFT 16
#define MASK_XY_ONE (1LL << MASK_XY_SHIFT)
#define MASK_SHIFT 4
#define MAX_ROW_CROSSINGS 64

extern "C" __global__ void polygon_rows(
    const int* points, int count,  // [count,2] (x, y) in 1/16 px
    uchar* mask, int pitch, int width, int height)
{
    const int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= height) return;
    const int64 delta = (1 << MASK_SHIFT) >> 1;
    int64 crossings[MAX_ROW_CROSSINGS];
    int n = 0;
    for (int i = 0; i < count; ++i) {
        const int previous = i == 0 ? count - 1 : i - 1;
        const int64 x0 = (int64)points[2 * previous] << (MASK_XY_SHIFT - MASK_SHIFT);
        const int64 y0 = ((int64)points[2 * previous + 1] + delta) >> MASK_SHIFT;
        const int64 x1 = (int64)points[2 * i] << (MASK_XY_SHIFT - MASK_SHIFT);
        const int64 y1 = ((int64)points[2 * i + 1] + delta) >> MASK_SHIFT;
        if (y0 == y1) continue;
        const int64 top = y0 < y1 ? y0 : y1, bottom = y0 < y1 ? y1 : y0;
        if (y < top || y >= bottom || n >= MAX_ROW_CROSSINGS) continue;
        const int64 top_x = y0 < y1 ? x0 : x1;
        const int64 dx = (x1 - x0) / (y1 - y0);
        crossings[n++] = top_x + (y - top) * dx;
    }
    for (int i = 1; i < n; ++i) {  // insertion sort: a handful of crossings per row
        const int64 value = crossings[i];
        int j = i - 1;
        for (; j >= 0 && crossings[j] > value; --j) crossings[j + 1] = crossings[j];
        crossings[j + 1] = value;
    }
    uchar* row = mask + (size_t)y * pitch;
    for (int k = 0; k + 1 < n; k += 2) {
        int left = (int)((crossings[k] + MASK_XY_ONE - 1) >> MASK_XY_SHIFT);
        int right = (int)(crossings[k + 1] >> MASK_XY_SHIFT);
        if (left >= width || right < 0) continue;
        left = left < 0 ? 0 : left;
        right = right >= width ? width - 1 : right;
        for (int x = left; x <= right; ++x) row[x] = 255;
    }
}

extern "C" __global__ void polygon_outline(
    const int* points, int count, uchar* mask, int pitch, int width, int height)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const int previous = i == 0 ? count - 1 : i - 1;
    const int64 half = 1 << (MASK_SHIFT - 1);
    int64 x1 = ((int64)points[2 * previous] + half) >> MASK_SHIFT;
    int64 y1 = ((int64)points[2 * previous + 1] + half) >> MASK_SHIFT;
    int64 x2 = ((int64)points[2 * i] + half) >> MASK_SHIFT;
    int64 y2 = ((int64)points[2 * i + 1] + half) >> MASK_SHIFT;
    if (x1 < 0 || x1 >= width || x2 < 0 || x2 >= width || y1 < 0 || y1 >= height || y2 < 0 || y2 >= height) {
        if (!clip_line(width, height, &x1, &y1, &x2, &y2)) return;
    }
    // cv::LineIterator(connectivity 8, left_to_right): start at the left end, step along the major axis
    int64 dx = x2 - x1, dy = y2 - y1;
    if (dx < 0) { dx = -dx; dy = -dy; x1 = x2; y1 = y2; }
    int x_major = 1, y_major = 0, x_minor = 0, y_minor = dy < 0 ? -1 : 1;
    dy = dy < 0 ? -dy : dy;
    if (dy > dx) {
        const int64 t = dx; dx = dy; dy = t;
        x_major = 0; y_major = y_minor; x_minor = 1; y_minor = 0;
    }
    int64 err = dx - (dy + dy);
    const int64 plus_delta = dx + dx, minus_delta = -(dy + dy);
    int64 x = x1, y = y1;
    for (int64 k = 0; k <= dx; ++k) {
        mask[(size_t)y * pitch + x] = 255;
        const bool minor = err < 0;
        err += minus_delta + (minor ? plus_delta : 0);
        x += x_major + (minor ? x_minor : 0);
        y += y_major + (minor ? y_minor : 0);
    }
}
