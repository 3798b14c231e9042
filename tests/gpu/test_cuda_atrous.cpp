// Dilated convolutions that the CUDA engine runs "atrous by space-to-batch" (ops_conv.cpp): which
// convolutions take that path (checked on the lowered steps, no GPU needed), and their results
// against the CPU engine at every precision, in both activation layouts (channels-last takes the
// path by default, NCHW when SLUICE_CUDA_ATROUS ends in :all): image sizes that are not multiples of
// the dilation, odd channel counts, rectangular kernels, bias + ReLU fused, a residual, ASPP-like
// dilations, a DeepLab-style net, and CUDA-graph replays of two io sets.
#include <tuple>

#include "gpu_test_util.h"
#include "test_models.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

struct DilatedSpec {
  Shape x;                      // [N, C, H, W]
  int64_t k = 7, kh = 3, kw = 3, d = 4;
  int64_t stride = 1, group = 1;
  bool bias = true, residual = false;
  std::string activation = "Relu";   // FusedConv's; "-" for a plain Conv
  std::vector<int64_t> pads;          // default: the "same" padding d*(k-1)/2
};

Graph dilated_graph(const DilatedSpec& s) {
  GraphBuilder b(s.x);
  const int64_t h_out = (s.x[2] - 1) / s.stride + 1, w_out = (s.x[3] - 1) / s.stride + 1;
  const Shape y = {s.x[0], s.k, h_out, w_out};
  b.random_f("W", {s.k, s.x[1] / s.group, s.kh, s.kw}, 31, -0.5f, 0.5f);
  std::vector<std::string> ins = {"x", "W"};
  if (s.bias || s.residual) {
    b.random_f("B", {s.k}, 32);
    ins.push_back(s.bias ? "B" : "");
  }
  if (s.residual) {
    // The residual is a 1x1 convolution of the same input (the same output shape).
    b.random_f("W1", {s.k, s.x[1], 1, 1}, 33, -0.5f, 0.5f);
    Node& r = b.node("Conv", {"x", "W1"}, {f32("z", y)});
    set_ints(r, "strides", {s.stride, s.stride});
    ins.push_back("z");
  }
  const bool plain = s.activation == "-";
  Node& n = b.node(plain ? "Conv" : "FusedConv", ins, {f32("y", y)}, plain ? "" : "sluice");
  const int64_t ph = s.d * (s.kh - 1) / 2, pw = s.d * (s.kw - 1) / 2;
  set_ints(n, "pads", s.pads.empty() ? std::vector<int64_t>{ph, pw, ph, pw} : s.pads);
  set_ints(n, "dilations", {s.d, s.d});
  set_ints(n, "strides", {s.stride, s.stride});
  set_ints(n, "kernel_shape", {s.kh, s.kw});
  if (s.group != 1) set_int(n, "group", s.group);
  if (!plain && !s.activation.empty()) set_string(n, "activation", s.activation);
  if (s.activation == "Clip") {
    set_float(n, "clip_min", -0.2f);
    set_float(n, "clip_max", 0.6f);
  }
  b.output("y");
  return b.g;
}

// How many convolutions the builder lowers the atrous way (their "to batch" steps), and whether
// some step's label ends with `suffix`.
int atrous_count(const Graph& g, Precision p = Precision::FP32) {
  cuda::Builder b(g, p);
  b.lower_all();
  int n = 0;
  for (const auto& st : b.steps) {
    const std::string& l = st->label();
    n += l.size() > 9 && l.compare(l.size() - 9, 9, " to batch") == 0;
  }
  return n;
}
bool has_step(const Graph& g, const std::string& suffix) {
  cuda::Builder b(g, Precision::FP32);
  b.lower_all();
  for (const auto& st : b.steps) {
    const std::string& l = st->label();
    if (l.size() >= suffix.size() && l.compare(l.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

// ---- which convolutions take the path (lowering only; runs without a GPU) ----------------------

TEST(AtrousLowering, DilationFromFourOnRunsAsSpaceToBatchByDefault) {
  ScopedEnv env("SLUICE_CUDA_ATROUS", nullptr);
  ScopedEnv layout("SLUICE_CUDA_LAYOUT", "nhwc");
  DilatedSpec s{{1, 4, 20, 20}};
  for (int64_t d : {4, 5, 8}) {
    s.d = d;
    EXPECT_EQ(atrous_count(dilated_graph(s)), 1) << "dilation " << d;
  }
  for (int64_t d : {1, 2, 3}) {
    s.d = d;
    EXPECT_EQ(atrous_count(dilated_graph(s)), 0) << "dilation " << d;
  }
}

TEST(AtrousLowering, NchwConvolutionsKeepTheDirectCallUnlessAsked) {
  ScopedEnv layout("SLUICE_CUDA_LAYOUT", "nchw");
  DilatedSpec s{{1, 4, 20, 20}};
  s.d = 6;
  {
    ScopedEnv env("SLUICE_CUDA_ATROUS", nullptr);
    EXPECT_EQ(atrous_count(dilated_graph(s)), 0);
  }
  {
    ScopedEnv env("SLUICE_CUDA_ATROUS", "4:all");
    EXPECT_EQ(atrous_count(dilated_graph(s)), 1);
  }
  {
    ScopedEnv env("SLUICE_CUDA_ATROUS", "8:all");
    EXPECT_EQ(atrous_count(dilated_graph(s)), 0);
  }
}

TEST(AtrousLowering, EnvironmentSetsThresholdOrTurnsThePathOff) {
  ScopedEnv layout("SLUICE_CUDA_LAYOUT", "nhwc");
  DilatedSpec s{{1, 4, 20, 20}};
  s.d = 2;
  {
    ScopedEnv env("SLUICE_CUDA_ATROUS", "2");
    EXPECT_EQ(atrous_count(dilated_graph(s)), 1);
  }
  s.d = 6;
  for (const char* off : {"off", "0"}) {
    ScopedEnv env("SLUICE_CUDA_ATROUS", off);
    EXPECT_EQ(atrous_count(dilated_graph(s)), 0) << off;
  }
  {
    ScopedEnv env("SLUICE_CUDA_ATROUS", "8");
    EXPECT_EQ(atrous_count(dilated_graph(s)), 0);
  }
  for (const char* bad : {"1", "yes", "4x", "4:some", ":all", "1:all"}) {
    ScopedEnv env("SLUICE_CUDA_ATROUS", bad);
    EXPECT_THROW(atrous_count(dilated_graph(s)), UsageError) << bad;
  }
}

TEST(AtrousLowering, OnlySameSizeUngroupedStrideOneConvolutionsQualify) {
  ScopedEnv env("SLUICE_CUDA_ATROUS", "4:all");   // grouped convolutions are never channels-last
  DilatedSpec base{{1, 4, 20, 20}};
  base.d = 4;
  DilatedSpec strided = base;
  strided.stride = 2;
  EXPECT_EQ(atrous_count(dilated_graph(strided)), 0);
  DilatedSpec grouped = base;
  grouped.group = 2;
  EXPECT_EQ(atrous_count(dilated_graph(grouped)), 0);
  DilatedSpec uneven = base;   // same output size, but the padding is not split evenly
  uneven.pads = {2, 4, 6, 4};
  EXPECT_EQ(atrous_count(dilated_graph(uneven)), 0);
  DilatedSpec even = base;
  even.kh = even.kw = 2;
  even.pads = {2, 2, 2, 2};
  EXPECT_EQ(atrous_count(dilated_graph(even)), 0);
  DilatedSpec pointwise = base;
  pointwise.kh = pointwise.kw = 1;
  EXPECT_EQ(atrous_count(dilated_graph(pointwise)), 0);
  DilatedSpec huge = base;     // dilation far above the image: more than twice the work
  huge.d = 32;
  EXPECT_EQ(atrous_count(dilated_graph(huge)), 0);
  DilatedSpec rect = base;     // rectangular odd kernels qualify
  rect.kh = 5;
  EXPECT_EQ(atrous_count(dilated_graph(rect)), 1);
}

TEST(AtrousLowering, ResidualIsAddedAfterTheWayBack) {
  ScopedEnv env("SLUICE_CUDA_ATROUS", nullptr);
  ScopedEnv layout("SLUICE_CUDA_LAYOUT", "nhwc");
  DilatedSpec s{{1, 4, 20, 20}};
  s.residual = true;
  EXPECT_TRUE(has_step(dilated_graph(s), " from batch"));
  EXPECT_TRUE(has_step(dilated_graph(s), " epilogue"));
  s.residual = false;
  EXPECT_FALSE(has_step(dilated_graph(s), " epilogue"));
}

// ---- results against the CPU engine ---------------------------------------------------------------

using Param = std::tuple<Precision, std::string>;
class Atrous : public ::testing::TestWithParam<Param> {
 protected:
  Precision precision() const { return std::get<0>(GetParam()); }
  const char* layout() const { return std::get<1>(GetParam()).c_str(); }
  // SLUICE_CUDA_ATROUS: the default for channels-last; NCHW convolutions take the path only when asked.
  const char* policy() const { return std::get<1>(GetParam()) == "nchw" ? "4:all" : nullptr; }
  // Runs `s` through the atrous path in this parameter's layout and compares it with the CPU.
  void check(const DilatedSpec& s) {
    ScopedEnv layout_env("SLUICE_CUDA_LAYOUT", layout());
    ScopedEnv atrous("SLUICE_CUDA_ATROUS", policy());
    const Graph g = dilated_graph(s);
    ASSERT_EQ(atrous_count(g, precision()), 1) << "the convolution must take the atrous path";
    expect_matches_cpu(g, precision());
  }
};

TEST_P(Atrous, BiasReluOddChannelsSizeNotMultipleOfDilationMatchesCpu) {
  DilatedSpec s{{2, 5, 13, 10}};   // 13 = 3*4 + 1, 10 = 2*4 + 2
  s.k = 7;
  s.d = 4;
  check(s);
}

TEST_P(Atrous, ResidualBiasReluMatchesCpu) {
  DilatedSpec s{{2, 6, 11, 14}};
  s.k = 9;
  s.d = 5;
  s.residual = true;
  check(s);
}

TEST_P(Atrous, ResidualWithoutBiasAndClipMatchesCpu) {
  DilatedSpec s{{1, 8, 12, 9}};
  s.k = 8;
  s.d = 4;
  s.bias = false;
  s.residual = true;
  s.activation = "Clip";
  check(s);
}

TEST_P(Atrous, PlainConvWithoutBiasMatchesCpu) {
  DilatedSpec s{{2, 3, 17, 17}};
  s.k = 5;
  s.d = 6;
  s.bias = false;
  s.activation = "-";
  check(s);
}

TEST_P(Atrous, RectangularKernelMatchesCpu) {
  // 5x3 kernel at dilation 6 on 9 rows: most vertical taps fall outside the image.
  DilatedSpec s{{2, 6, 9, 20}};
  s.k = 4;
  s.kh = 5;
  s.d = 6;
  s.activation = "";
  check(s);
}

TEST_P(Atrous, AsppDilationsMatchCpu) {
  for (int64_t d : {12, 24}) {
    SCOPED_TRACE(str("dilation ", d));
    DilatedSpec s{{2, 16, 40, 37}};
    s.k = 8;
    s.d = d;
    check(s);
  }
}

TEST_P(Atrous, DeepLabStyleNetWithAtrousBranchesMatchesCpu) {
  // The small DeepLab has branches of dilation 2 and 3: a threshold of 2 sends both the atrous way.
  ScopedEnv layout_env("SLUICE_CUDA_LAYOUT", layout());
  ScopedEnv atrous("SLUICE_CUDA_ATROUS", std::get<1>(GetParam()) == "nchw" ? "2:all" : "2");
  const Graph g = deeplab_like(2, 32, false);
  ASSERT_EQ(atrous_count(g, precision()), 2);
  expect_matches_cpu(g, precision());
}

TEST_P(Atrous, CapturedGraphsOfTwoIoSetsMatchCpu) {
  SLUICE_REQUIRE_GPU();
  ScopedEnv layout_env("SLUICE_CUDA_LAYOUT", layout());
  ScopedEnv atrous("SLUICE_CUDA_ATROUS", policy());
  DilatedSpec s{{2, 8, 19, 21}};
  s.k = 8;
  s.d = 4;
  s.residual = true;
  const Graph g = dilated_graph(s);
  EngineOptions o;
  o.precision = precision();
  o.io_sets = 2;
  o.cuda_graphs = true;
  auto e = create_cuda_engine(g, o);
  const auto* st = cuda::engine_stats(*e);
  ASSERT_NE(st, nullptr);
  EXPECT_TRUE(st->graphs_captured);
  EXPECT_EQ(st->atrous_convolutions, 1);
  for (int round = 0; round < 2; ++round)
    for (int set = 0; set < 2; ++set) {
      SCOPED_TRACE(str("round ", round, ", set ", set));
      const Tensor x = random_tensor(g.inputs[0], static_cast<uint32_t>(7 + set));
      const auto got = cuda::run_forward(*e, x, set);
      const auto ref = run_cpu(g, x);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_LE(rel_error(got[0], ref[0]), tolerance(precision()));
    }
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return str(precision_name(std::get<0>(i.param)), "_", std::get<1>(i.param));
}

INSTANTIATE_TEST_SUITE_P(Precisions, Atrous,
                         ::testing::Combine(::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16,
                                                              Precision::BF16),
                                            ::testing::Values(std::string("nchw"), std::string("nhwc"))),
                         param_name);

}  // namespace
