// The memory-bound kernels' fast paths against the CPU engine, at every precision, on shapes chosen
// to take each branch: channel counts that fill 16-byte packs (16), fill them only at fp32 (12: packs
// of 4 floats, not of 8 halves) and never (5); spatial sizes that are no multiple of anything;
// element counts with a remainder after the packs; tensors larger than one wave of the grid-stride
// loops; channels-last tensors (convolution outputs at tf32/fp16/bf16) and NCHW ones.
#include "gpu_test_util.h"
#include "test_models.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class Kernels : public ::testing::TestWithParam<Precision> {};

// x [n, cin, h, w] -> a 1x1 FusedConv to `c` channels named "c": channels-last except at fp32.
void conv_to(GraphBuilder& b, int64_t n, int64_t cin, int64_t c, int64_t h, int64_t w, uint32_t seed) {
  b.random_f("Wc", {c, cin, 1, 1}, seed, -0.6f, 0.6f).random_f("Bc", {c}, seed + 1);
  b.node("FusedConv", {"x", "Wc", "Bc"}, {f32("c", {n, c, h, w})}, "sluice");
}

TEST_P(Kernels, PoolsOverPackedAndSingleChannelsMatchCpu) {
  for (int64_t c : {16, 12, 5}) {
    for (int include : {0, 1}) {
      SCOPED_TRACE(str(c, " channels, count_include_pad ", include));
      GraphBuilder b({2, 3, 13, 15});
      conv_to(b, 2, 3, c, 13, 15, 90);
      Node& mp = b.node("MaxPool", {"c"}, {f32("max", {2, c, 7, 8})});
      set_ints(mp, "kernel_shape", {3, 3});
      set_ints(mp, "strides", {2, 2});
      set_ints(mp, "pads", {1, 1, 1, 1});
      Node& ap = b.node("AveragePool", {"c"}, {f32("avg", {2, c, 6, 7})});
      set_ints(ap, "kernel_shape", {3, 2});
      set_ints(ap, "strides", {2, 2});
      set_ints(ap, "pads", {1, 0, 0, 0});
      set_int(ap, "count_include_pad", include);
      Node& dp = b.node("MaxPool", {"c"}, {f32("dil", {2, c, 9, 11})});
      set_ints(dp, "kernel_shape", {3, 3});
      set_ints(dp, "dilations", {2, 2});
      b.output("max").output("avg").output("dil");
      expect_matches_cpu(b.g, GetParam());
    }
  }
}

TEST_P(Kernels, GlobalPoolsAndSqueezeExciteScalingMatchCpu) {
  for (int64_t c : {16, 12, 5}) {
    SCOPED_TRACE(str(c, " channels"));
    GraphBuilder b({2, 4, 23, 29});
    conv_to(b, 2, 4, c, 23, 29, 92);
    b.node("GlobalAveragePool", {"c"}, {f32("gap", {2, c, 1, 1})});
    b.node("GlobalMaxPool", {"c"}, {f32("gmp", {2, c, 1, 1})});
    b.node("Sigmoid", {"gap"}, {f32("gate", {2, c, 1, 1})});
    b.node("Mul", {"c", "gate"}, {f32("scaled", {2, c, 23, 29})});
    b.random_f("shift", {c, 1, 1}, 94);
    b.node("Add", {"scaled", "shift"}, {f32("y", {2, c, 23, 29})});
    b.output("y").output("gmp");
    expect_matches_cpu(b.g, GetParam());
  }
}

TEST_P(Kernels, ElementwiseOverManyWavesWithARemainderMatchesCpu) {
  // 15.4 M elements: more packs than one grid of the grid-stride loops covers, and 2 left over.
  const Shape s = {2, 3, 1601, 1603};
  GraphBuilder b(s);
  b.random_f("k", {3, 1, 1}, 95, 0.5f, 1.5f);
  b.node("Relu", {"x"}, {f32("r", s)});
  b.node("Mul", {"r", "k"}, {f32("m", s)});
  b.node("Sub", {"m", "x"}, {f32("d", s)});
  b.node("HardSwish", {"d"}, {f32("y", s)});
  b.output("y");
  CompareOptions co;
  co.lo = -3.f;
  co.hi = 3.f;
  expect_matches_cpu(b.g, GetParam(), co);
}

TEST_P(Kernels, SlicesExpandsAndTransposesMatchCpu) {
  GraphBuilder b({2, 3, 4, 16});
  b.constant_i("st", {1}, {1}).constant_i("en", {1}, {3}).constant_i("ax", {1}, {1});
  b.node("Slice", {"x", "st", "en", "ax"}, {f32("sl", {2, 2, 4, 16})});   // whole rows of 16: packs
  b.constant_i("st2", {1}, {-1}).constant_i("en2", {1}, {-100}).constant_i("ax2", {1}, {3}).constant_i("sp2", {1}, {-2});
  b.node("Slice", {"x", "st2", "en2", "ax2", "sp2"}, {f32("rev", {2, 3, 4, 8})});   // reversed, strided
  b.random_f("row", {1, 1, 1, 16}, 96).constant_i("shape", {4}, {2, 3, 4, 16});
  b.node("Expand", {"row", "shape"}, {f32("ex", {2, 3, 4, 16})});
  b.node("Add", {"x", "ex"}, {f32("sum", {2, 3, 4, 16})});
  Node& t = b.node("Transpose", {"sum"}, {f32("tr", {2, 4, 3, 16})});
  set_ints(t, "perm", {0, 2, 1, 3});
  Node& t2 = b.node("Transpose", {"x"}, {f32("tr2", {16, 4, 3, 2})});
  set_ints(t2, "perm", {3, 2, 1, 0});
  b.output("sl").output("rev").output("tr").output("tr2");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Kernels, LayoutChangesOfOddShapesMatchCpu) {
  // A channels-last convolution output read in NCHW order (Reshape views NCHW bytes): the tiled
  // transpose with neither extent a multiple of the tile.
  GraphBuilder b({2, 3, 37, 41});
  conv_to(b, 2, 3, 19, 37, 41, 97);
  b.constant_i("flat", {3}, {2, 19, 37 * 41});
  b.node("Reshape", {"c", "flat"}, {f32("y", {2, 19, 37 * 41})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Kernels, Uint8NormalizeInEitherLayoutMatchesCpu) {
  for (const Shape& s : {Shape{3, 3, 13, 17}, Shape{2, 3, 16, 16}}) {
    SCOPED_TRACE(shape_str(s));
    GraphBuilder b(s, DType::U8);
    Node& nz = b.node("Normalize", {"x"}, {f32("n", s)}, "sluice");
    set_float(nz, "scale", 1.f / 255.f);
    set_floats(nz, "mean", {0.485f, 0.456f, 0.406f});
    set_floats(nz, "std", {0.229f, 0.224f, 0.225f});
    b.random_f("W", {8, 3, 3, 3}, 98, -0.3f, 0.3f);
    Node& c = b.node("Conv", {"n", "W"}, {f32("y", {s[0], 8, s[2], s[3]})});
    set_ints(c, "pads", {1, 1, 1, 1});
    b.output("y");
    expect_matches_cpu(b.g, GetParam());   // channels-last normalize (only convolutions read it)
    b.output("n");
    expect_matches_cpu(b.g, GetParam());   // NCHW normalize (a graph output reads it too)
  }
}

TEST_P(Kernels, ChannelsLastResizesMatchCpu) {
  for (int64_t c : {16, 5}) {
    for (const char* mode : {"linear", "nearest"}) {
      SCOPED_TRACE(str(c, " channels, ", mode));
      GraphBuilder b({2, 3, 7, 9});
      conv_to(b, 2, 3, c, 7, 9, 99);
      b.constant_i("sizes", {4}, {2, c, 15, 20});
      Node& r = b.node("Resize", {"c", "", "", "sizes"}, {f32("up", {2, c, 15, 20})});
      set_string(r, "mode", mode);
      b.node("Relu", {"up"}, {f32("y", {2, c, 15, 20})});   // not a tail: the resize kernel runs
      b.output("y");
      expect_matches_cpu(b.g, GetParam());
    }
  }
}

TEST_P(Kernels, AlignedConcatInOneLaunchMatchesCpu) {
  // Channels-last pieces of 16, 8 and 24 channels: whole 16-byte units at every precision (at fp32,
  // NCHW: pieces of 16 * 5 * 7 floats and more, also whole units).
  GraphBuilder b({2, 6, 5, 7});
  std::vector<std::string> parts;
  uint32_t seed = 120;
  for (int64_t c : {16, 8, 24}) {
    const std::string w = "W" + std::to_string(c), name = "p" + std::to_string(c);
    b.random_f(w, {c, 6, 1, 1}, seed++, -0.5f, 0.5f);
    b.node("Conv", {"x", w}, {f32(name, {2, c, 5, 7})});
    parts.push_back(name);
  }
  Node& cat = b.node("Concat", parts, {f32("cat", {2, 48, 5, 7})});
  set_int(cat, "axis", 1);
  b.node("Relu", {"cat"}, {f32("y", {2, 48, 5, 7})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- depthwise convolutions (ops_depthwise.cpp) ------------------------------------------------------

struct DwSpec {
  int64_t c = 16, k = 3, stride = 1, dilation = 1;
  std::vector<int64_t> pads = {1, 1, 1, 1};
  std::string activation = "Relu";   // "" for none
  bool residual = false;
};

// x [2, 6, 11, 13] -> 1x1 conv to c channels -> depthwise k x k (FusedConv) -> "y".
Graph depthwise_graph(const DwSpec& s) {
  const int64_t h = 11, w = 13;
  const int64_t span = s.dilation * (s.k - 1) + 1;
  const int64_t oh = (h + s.pads[0] + s.pads[2] - span) / s.stride + 1, ow = (w + s.pads[1] + s.pads[3] - span) / s.stride + 1;
  GraphBuilder b({2, 6, h, w});
  conv_to(b, 2, 6, s.c, h, w, 110);
  b.random_f("Wd", {s.c, 1, s.k, s.k}, 112, -0.5f, 0.5f).random_f("Bd", {s.c}, 113);
  std::vector<std::string> ins = {"c", "Wd", "Bd"};
  if (s.residual) ins.push_back("c");
  Node& d = b.node("FusedConv", ins, {f32("y", {2, s.c, oh, ow})}, "sluice");
  set_int(d, "group", s.c);
  set_ints(d, "kernel_shape", {s.k, s.k});
  set_ints(d, "strides", {s.stride, s.stride});
  set_ints(d, "dilations", {s.dilation, s.dilation});
  set_ints(d, "pads", s.pads);
  set_string(d, "activation", s.activation);
  if (s.activation == "Clip") {   // ReLU6
    set_float(d, "clip_min", 0.f);
    set_float(d, "clip_max", 6.f);
  }
  b.output("y");
  return b.g;
}

std::vector<DwSpec> depthwise_cases() {
  std::vector<DwSpec> v;
  for (int64_t c : {16, 12, 5}) {
    DwSpec s;
    s.c = c;
    v.push_back(s);                                   // 3x3 stride 1, bias + ReLU
    s.k = 5;
    s.stride = 2;
    s.pads = {2, 2, 2, 2};
    s.activation = "";
    v.push_back(s);                                   // 5x5 stride 2 (MobileNetV3, EfficientNet)
    s.k = 3;
    s.stride = 1;
    s.dilation = 2;
    s.pads = {2, 1, 2, 3};                            // dilated, uneven pads
    s.activation = "Clip";
    v.push_back(s);
  }
  DwSpec r;
  r.residual = true;                                  // the same shape in and out: a residual
  v.push_back(r);
  return v;
}

TEST(DepthwiseLowering, ChannelsLastDepthwiseConvolutionsNeedNoTranspose) {
  for (const DwSpec& s : depthwise_cases()) {
    const Graph g = depthwise_graph(s);
    cuda::Builder b(g, Precision::BF16);
    b.lower_all();
    int depthwise = 0, layout = 0;
    for (const auto& st : b.steps) {
      depthwise += st->kind == "Depthwise";
      layout += st->kind == "Layout";
    }
    EXPECT_EQ(depthwise, cuda::fast_kernels() ? 1 : 0) << s.c << " channels, " << s.k << "x" << s.k;
    // The only layout change is the NCHW graph output's.
    EXPECT_LE(layout, 1);
  }
}

TEST_P(Kernels, DepthwiseConvolutionsMatchCpu) {
  for (const DwSpec& s : depthwise_cases()) {
    SCOPED_TRACE(str(s.c, " channels, ", s.k, "x", s.k, " stride ", s.stride, " dilation ", s.dilation, " act '",
                     s.activation, "'", s.residual ? ", residual" : ""));
    expect_matches_cpu(depthwise_graph(s), GetParam());
  }
}

// ---- the padded stem ---------------------------------------------------------------------------------

TEST(StemLowering, ThreeChannelImagesReachTheStemConvolutionAsFour) {
  // uint8 image -> Normalize -> 7x7 stem convolution (resnet_like); float image -> 3x3 (deeplab_like).
  for (const Graph& g : {resnet_like(2, 32), deeplab_like(2, 32, false)}) {
    cuda::Builder b(g, Precision::BF16);
    b.lower_all();
    bool stem_input = false, padded_weights = false;
    for (const auto& s : b.slots) {
      if (s.nhwc && s.shape.size() == 4 && s.shape[2] == 32 && s.shape[3] == 32) stem_input |= s.shape[1] == 4;
      if (s.where == cuda::Where::Constant && s.name.find("(krsc, padded)") != std::string::npos)
        padded_weights |= s.shape.size() == 4 && s.shape[1] == 4;
    }
    EXPECT_TRUE(stem_input && padded_weights);
  }
}

std::string precision_param(const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); }

INSTANTIATE_TEST_SUITE_P(Precisions, Kernels,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         precision_param);

}  // namespace
