// Dilated convolutions by space-to-batch ("atrous"): the rearrangement steps and the lowering that
// chooses the path (the convolution itself is an ordinary ConvStep, ops_conv.cpp).
#include <cstdlib>

#include "core/params.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

// ---- atrous convolution by space-to-batch ------------------------------------------------------
// cuDNN's legacy API has no fast fp32/tf32 channels-last kernel for large dilations (DeepLabV3's
// ASPP convolutions with dilation 12/24/36 took 0.98/0.73/0.50 s at tf32 on the H200, the rest of
// the net 24 ms).  A stride-1 convolution with dilation d and "same" padding d*(k-1)/2 is exactly an
// undilated one with padding (k-1)/2 over the d*d interleaved sub-images of the zero-padded input,
// stacked along the batch: each output pixel sees the same taps, and taps outside the image read
// zeros on both sides.  Cost: one pass over the input and one over the output, plus the ~(1 + d/H)^2
// extra work of the padding.  Measured on the H200 (DeepLabV3, batch 16, 512x512): each ASPP conv
// 1.85 ms + 0.31 ms rearranging at tf32, 0.9 ms + 0.15 ms at bf16 (direct 1.2-1.3 ms); the d=4
// convs of layer4 no slower.  NCHW convolutions keep the direct call: there cuDNN's undilated
// kernels on the small sub-images were slower than its dilated ones (ASPP 28-31 ms vs 24-25 ms).

// Channels-last convolutions with a dilation from this value on take the atrous path.
constexpr int64_t kAtrousMinDilation = 4;

struct AtrousPolicy {
  int64_t min_dilation = kAtrousMinDilation;   // 0: never
  bool nchw = false;                           // NCHW convolutions too
};

// SLUICE_CUDA_ATROUS (for measurements and tests): off (or 0) disables the path, D sets the smallest
// dilation, D:all also sends NCHW convolutions that way.
AtrousPolicy atrous_policy() {
  AtrousPolicy p;
  const std::string s = param_string("SLUICE_CUDA_ATROUS");   // checked there (core/params.cpp)
  if (s.empty()) return p;
  if (s == "off" || s == "0") return AtrousPolicy{0, false};
  char* end = nullptr;
  const long d = std::strtol(s.c_str(), &end, 10);
  return AtrousPolicy{d, std::string(end) == ":all"};
}

// The batched layout's rearrangement steps; prepare() counts the convolutions that take this path.
class AtrousStep final : public Step {
 public:
  AtrousStep(std::string label, std::size_t es, int src, int dst, AtrousShape shape, bool to_batch)
      : Step(std::move(label)), es_(es), src_(src), dst_(dst), shape_(shape), to_batch_(to_batch) {}
  void prepare(Context& ctx, const Bindings&) override {
    if (to_batch_) ctx.stats->atrous_convolutions++;
  }
  void run(Context&, const Bindings& b, cudaStream_t s) override {
    if (to_batch_) space_to_batch(es_, b.at(src_), b.at(dst_), shape_, s);
    else batch_to_space(es_, b.at(src_), b.at(dst_), shape_, s);
  }

 private:
  std::size_t es_;
  int src_, dst_;
  AtrousShape shape_;
  bool to_batch_;
};

// Lowers the convolution the atrous way when it qualifies (channels-last unless SLUICE_CUDA_ATROUS
// says otherwise, 2-D, stride 1, one group, equal dilations at the threshold or above, odd kernel,
// symmetric "same" padding); false otherwise.
}  // namespace

bool lower_atrous(Builder& b, const Node& n, const ConvGeom& g, const Shape& xs, const Shape& ws, const Shape& ys, int x,
                  int w, int bias, int z, int y, const ActParams& act, bool nhwc) {
  const AtrousPolicy policy = atrous_policy();
  if (policy.min_dilation == 0 || (!nhwc && !policy.nchw)) return false;
  if (xs.size() != 4 || g.groups != 1 || !g.symmetric()) return false;
  const int64_t d = g.dilation[0];
  if (d < policy.min_dilation || g.dilation[1] != d || g.stride[0] != 1 || g.stride[1] != 1) return false;
  for (std::size_t i = 0; i < 2; ++i)
    if (g.kernel[i] % 2 == 0 || g.pad_begin[i] != d * (g.kernel[i] - 1) / 2) return false;
  if (g.kernel[0] == 1 && g.kernel[1] == 1) return false;   // a 1x1 kernel ignores the dilation
  const int64_t N = xs[0], H = xs[2], W = xs[3], hs = (H + d - 1) / d, wsub = (W + d - 1) / d;
  // Past 2x the work of the direct convolution (d far above the image size) it is not worth it.
  if (hs * wsub * d * d > 2 * H * W) return false;
  if (ys[2] != H || ys[3] != W) return false;

  const DType t = b.compute;
  const std::size_t es = dtype_size(t);
  const int xb = b.temp(t, {d * d * N, xs[1], hs, wsub}, n.name + " (atrous input)");
  const int yb = b.temp(t, {d * d * N, ys[1], hs, wsub}, n.name + " (atrous output)");
  b.slots[static_cast<std::size_t>(xb)].nhwc = nhwc;
  b.slots[static_cast<std::size_t>(yb)].nhwc = nhwc;
  b.add(std::make_unique<AtrousStep>(n.name + " to batch", es, x, xb, AtrousShape{N, xs[1], H, W, d, nhwc}, true), {x, xb},
        "Atrous");

  ConvGeom sub = g;
  sub.dilation = {1, 1};
  for (std::size_t i = 0; i < 2; ++i) sub.pad_begin[i] = sub.pad_end[i] = (g.kernel[i] - 1) / 2;
  // Bias and activation commute with the rearrangement and stay in the convolution (fused where
  // cuDNN allows); a residual is added after the way back, with bias and activation then.
  const bool late = z >= 0;
  std::vector<int> uses = {xb, w, yb};
  if (bias >= 0 && !late) uses.push_back(bias);
  b.add(make_conv_step(n.name, t, b.precision, b.slot(xb).shape, ws, b.slot(yb).shape, sub, xb, w, late ? -1 : bias, -1, yb,
                       late ? ActParams{} : act, nhwc),
        uses);
  b.add(std::make_unique<AtrousStep>(n.name + " from batch", es, yb, y, AtrousShape{N, ys[1], H, W, d, nhwc}, false), {yb, y},
        "Atrous");
  if (late) {
    const int64_t channels = ys[1], outer = nhwc ? N * H * W : N, inner = nhwc ? 1 : H * W;
    std::vector<int> epi = {y, z};
    if (bias >= 0) epi.push_back(bias);
    b.add(n.name + " epilogue", epi, [=](Context&, const Bindings& bd, cudaStream_t s) {
      bias_act(t, bd.at(y), bias >= 0 ? bd.at(bias) : nullptr, bd.at(z), outer, channels, inner, act, s);
    });
  }
  return true;
}

}  // namespace sluice::cuda
