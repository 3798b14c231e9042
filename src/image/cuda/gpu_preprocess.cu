// The preprocessing kernel: every row of the batch in one launch.  One thread per output pixel
// writes its three planes (coalesced along x); the arithmetic is gpu_preprocess.h's, shared with
// the host.  Decoded rows read the arena, zero rows write zeros, host rows are left alone (their
// bytes came from the CPU path through an H2D copy earlier on the same stream).
#include "core/cuda/cuda_check.h"
#include "image/cuda/gpu_preprocess.h"

namespace sluice {
namespace {

constexpr int kThreads = 256;

__global__ void image_preprocess_kernel(PreprocessLaunch p) {
  const int row = blockIdx.y;
  const int64_t plane = static_cast<int64_t>(p.out_h) * p.out_w;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= plane) return;
  const GpuRowPlan r = p.rows[row];
  if (r.kind == kGpuRowHost) return;
  uint8_t* out = p.out + static_cast<int64_t>(row) * 3 * plane + i;
  if (r.kind != kGpuRowDecoded) {
    out[0] = 0;
    out[plane] = 0;
    out[2 * plane] = 0;
    return;
  }
  const int y = static_cast<int>(i / p.out_w);
  const int x = static_cast<int>(i - static_cast<int64_t>(y) * p.out_w);
  uint8_t rgb[3];
  preprocess_pixel(r, p.spans, p.weights, p.arena + r.arena_offset, y, x, p.pad, rgb);
  out[0] = rgb[0];
  out[plane] = rgb[1];
  out[2 * plane] = rgb[2];
}

}  // namespace

void launch_image_preprocess(const PreprocessLaunch& p, cudaStream_t stream) {
  if (p.batch <= 0 || p.out_h <= 0 || p.out_w <= 0) return;
  SLUICE_CHECK(p.batch <= 65535, "image batch ", p.batch, " exceeds the kernel's grid (65535 rows)");
  const int64_t plane = static_cast<int64_t>(p.out_h) * p.out_w;
  const dim3 grid(static_cast<unsigned>((plane + kThreads - 1) / kThreads), static_cast<unsigned>(p.batch));
  image_preprocess_kernel<<<grid, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sluice
