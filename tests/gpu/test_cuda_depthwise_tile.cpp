// The depthwise tile kernel (kernels_depthwise.cu: stride 1, 3/5/7 wide, the input tile staged in
// shared memory) against a float64 reference written from ONNX's Conv definition: every filter
// width, odd heights, widths and channel counts, channel counts that fill no 16-byte pack (which
// take the one-pixel kernel), partial channel blocks (40 = 32 + 8), maps larger than one tile in
// both directions, symmetric, uneven and no padding, with and without bias, a residual and
// activation, at fp32 (the TF32 precision's float32 storage), fp16 and bf16; and the same graphs
// with SLUICE_CUDA_DEPTHWISE_TILE=0 (the row kernel) and a stride-2 layer (the one-pixel kernel).
#include <algorithm>
#include <cmath>

#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

struct TileCase {
  int64_t n, c, h, w, kh, kw;
  std::vector<int64_t> pads;   // top, left, bottom, right
  bool bias;
  bool residual;               // FusedConv with the input as residual and a Relu
  int64_t stride = 1;
};

std::vector<TileCase> tile_cases() {
  return {
      {2, 96, 56, 56, 7, 7, {3, 3, 3, 3}, true, false},     // ConvNeXt-T stage 1 (two tiles across, seven down)
      {3, 40, 29, 61, 7, 7, {3, 3, 3, 3}, false, false},    // odd sizes, 40 channels: a partial channel block
      {2, 24, 13, 9, 5, 5, {2, 1, 2, 3}, true, false},      // uneven pads
      {2, 16, 17, 31, 3, 3, {1, 1, 1, 1}, false, true},     // MobileNet 3x3, residual + Relu
      {1, 8, 7, 7, 7, 7, {3, 3, 3, 3}, true, false},        // ConvNeXt's last stage, one pack of channels
      {2, 48, 15, 23, 3, 7, {1, 3, 1, 3}, true, false},     // a 3x7 filter
      {2, 32, 12, 20, 5, 5, {0, 0, 0, 0}, true, false},     // no padding (valid)
      {2, 13, 11, 9, 7, 7, {3, 3, 3, 3}, true, false},      // 13 channels: the one-pixel kernel
      {2, 36, 10, 15, 3, 3, {1, 1, 1, 1}, true, false},     // 36: packed at fp32 only
      {2, 24, 15, 17, 5, 5, {2, 2, 2, 2}, true, false, 2},  // stride 2: the one-pixel kernel
  };
}

int64_t out_size(int64_t in, int64_t k, int64_t p0, int64_t p1, int64_t s) { return (in + p0 + p1 - k) / s + 1; }

Graph depthwise(const TileCase& t) {
  const int64_t oh = out_size(t.h, t.kh, t.pads[0], t.pads[2], t.stride);
  const int64_t ow = out_size(t.w, t.kw, t.pads[1], t.pads[3], t.stride);
  GraphBuilder b({t.n, t.c, t.h, t.w});
  b.random_f("wd", {t.c, 1, t.kh, t.kw}, 41, -0.4f, 0.4f).random_f("bd", {t.c}, 42);
  std::vector<std::string> ins = {"x", "wd"};
  if (t.bias || t.residual) ins.push_back("bd");
  if (t.residual) ins.push_back("x");
  Node& d = t.residual ? b.node("FusedConv", ins, {f32("y", {t.n, t.c, oh, ow})}, "sluice")
                       : b.node("Conv", ins, {f32("y", {t.n, t.c, oh, ow})});
  set_int(d, "group", t.c);
  set_ints(d, "kernel_shape", {t.kh, t.kw});
  set_ints(d, "pads", t.pads);
  set_ints(d, "strides", {t.stride, t.stride});
  if (t.residual) set_string(d, "activation", "Relu");
  b.output("y");
  return b.g;
}

// y[n, c, oy, ox] = bias[c] + sum over taps of w[c, ky, kx] * x[n, c, oy*s - pt + ky, ox*s - pl + kx]
// (zero outside), then + x and Relu for the residual cases; in float64 from the values the engine
// stores (x, w and bias rounded to the precision's type).
std::vector<Tensor> reference(const TileCase& t, Precision p, const Tensor& xt) {
  const int64_t oh = out_size(t.h, t.kh, t.pads[0], t.pads[2], t.stride);
  const int64_t ow = out_size(t.w, t.kw, t.pads[1], t.pads[3], t.stride);
  std::vector<float> x = xt.as_float();
  for (auto& v : x) v = round_to(p, v);
  std::vector<float> w = random_values(static_cast<std::size_t>(t.c * t.kh * t.kw), 41, -0.4f, 0.4f);
  for (auto& v : w) v = round_to(p, v);
  std::vector<float> bias = random_values(static_cast<std::size_t>(t.c), 42);
  for (auto& v : bias) v = round_to(p, v);
  std::vector<float> y(static_cast<std::size_t>(t.n * t.c * oh * ow));
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t c = 0; c < t.c; ++c)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = (t.bias || t.residual) ? bias[c] : 0.0;
          for (int64_t ky = 0; ky < t.kh; ++ky)
            for (int64_t kx = 0; kx < t.kw; ++kx) {
              const int64_t iy = oy * t.stride - t.pads[0] + ky, ix = ox * t.stride - t.pads[1] + kx;
              if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.w) continue;
              acc += static_cast<double>(w[(c * t.kh + ky) * t.kw + kx]) * x[((n * t.c + c) * t.h + iy) * t.w + ix];
            }
          if (t.residual) acc = std::max(0.0, acc + x[((n * t.c + c) * t.h + oy) * t.w + ox]);
          y[((n * t.c + c) * oh + oy) * ow + ox] = static_cast<float>(acc);
        }
  return {Tensor::from(DType::F32, {t.n, t.c, oh, ow}, y)};
}

// The output rounding of the stored type (one rounding of an fp32 sum), with room for the order
// of the fp32 accumulation.
double tile_tolerance(Precision p) {
  switch (p) {
    case Precision::BF16: return 8e-3;
    case Precision::FP16: return 2e-3;
    default: return 2e-6;
  }
}

class DepthwiseTile : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST_P(DepthwiseTile, MatchesAFloat64ReferenceWithTheTileKernelAndWithout) {
  const Precision p = GetParam();
  for (const TileCase& t : tile_cases()) {
    SCOPED_TRACE(str(t.n, "x", t.c, "x", t.h, "x", t.w, ", ", t.kh, "x", t.kw, " stride ", t.stride,
                     t.bias ? ", bias" : "", t.residual ? ", residual + Relu" : ""));
    const Graph g = depthwise(t);
    // The engine's own kernel, not cuDNN, at the channels-last precisions.
    const auto kinds = step_kinds(g, p);
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), "Depthwise"), kinds.end());
    CompareOptions o;
    o.tol = tile_tolerance(p);
    const HostReference ref = [&](const Tensor& x) { return reference(t, p, x); };
    expect_matches_reference(g, p, ref, o);
    ScopedEnv off("SLUICE_CUDA_DEPTHWISE_TILE", "0");
    expect_matches_reference(g, p, ref, o);
  }
}

// The switch is read when the step is prepared (lowered), so a bad value is refused there.
TEST(DepthwiseTileSwitch, ABadValueIsRefusedWhenTheStepIsPrepared) {
  const Graph g = depthwise({1, 16, 9, 9, 7, 7, {3, 3, 3, 3}, true, false});
  ScopedEnv bad("SLUICE_CUDA_DEPTHWISE_TILE", "yes");
  EXPECT_THROW(step_kinds(g, Precision::BF16), Error);
}

INSTANTIATE_TEST_SUITE_P(Precisions, DepthwiseTile, ::testing::Values(Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
