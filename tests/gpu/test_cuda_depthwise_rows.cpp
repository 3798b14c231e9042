// The depthwise row kernel (kernels_depthwise.cu: stride 1, 3/5/7 wide, four output pixels a
// thread): ConvNeXt's 7x7 and MobileNet's 3x3 and 5x5 shapes on odd widths (a partial last group of
// four), uneven pads, bias, residual and activation, against the CPU engine at every precision, and
// the same graphs with the tile kernel (the default), SLUICE_CUDA_DEPTHWISE_TILE=0 (the row kernel)
// and both switches at 0 (the one-pixel kernel).
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

struct RowCase {
  int64_t c, k, h, w;
  std::vector<int64_t> pads;
  bool residual;
  std::string activation;
};

std::vector<RowCase> row_cases() {
  return {
      {24, 7, 9, 11, {3, 3, 3, 3}, false, ""},        // ConvNeXt's block, 11 = 2 x 4 + 3
      {16, 7, 6, 5, {3, 2, 3, 4}, true, "Relu"},      // uneven pads, a residual, one partial group
      {40, 5, 7, 13, {2, 2, 2, 2}, false, "Clip"},    // MobileNetV3 5x5
      {8, 3, 5, 3, {1, 1, 1, 1}, true, ""},           // narrower than one group of four
      {12, 7, 8, 9, {3, 3, 3, 3}, false, "Relu"},     // 12 channels: packed at fp32, one-channel at fp16/bf16
  };
}

// x [2, c, h, w] -> depthwise FusedConv k x k (bias, residual x, activation) -> y.
Graph depthwise(const RowCase& s) {
  const int64_t oh = s.h + s.pads[0] + s.pads[2] - s.k + 1, ow = s.w + s.pads[1] + s.pads[3] - s.k + 1;
  GraphBuilder b({2, s.c, s.h, s.w});
  b.random_f("wd", {s.c, 1, s.k, s.k}, 31, -0.4f, 0.4f).random_f("bd", {s.c}, 32);
  std::vector<std::string> ins = {"x", "wd", "bd"};
  if (s.residual) ins.push_back("x");
  Node& d = b.node("FusedConv", ins, {f32("y", {2, s.c, oh, ow})}, "sluice");
  set_int(d, "group", s.c);
  set_ints(d, "kernel_shape", {s.k, s.k});
  set_ints(d, "pads", s.pads);
  set_string(d, "activation", s.activation);
  if (s.activation == "Clip") {
    set_float(d, "clip_min", 0.f);
    set_float(d, "clip_max", 6.f);
  }
  b.output("y");
  return b.g;
}

class DepthwiseRows : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST_P(DepthwiseRows, MatchTheCpuEngineWithTheRowKernelAndWithout) {
  for (const RowCase& s : row_cases()) {
    SCOPED_TRACE(str(s.c, " channels, ", s.k, "x", s.k, " on ", s.h, "x", s.w, s.residual ? ", residual" : ""));
    const Graph g = depthwise(s);
    expect_matches_cpu(g, GetParam());   // the tile kernel (test_cuda_depthwise_tile.cpp)
    ScopedEnv no_tile("SLUICE_CUDA_DEPTHWISE_TILE", "0");
    expect_matches_cpu(g, GetParam());   // the row kernel
    ScopedEnv off("SLUICE_CUDA_DEPTHWISE_ROWS", "0");
    expect_matches_cpu(g, GetParam());   // the one-pixel kernel
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, DepthwiseRows,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
