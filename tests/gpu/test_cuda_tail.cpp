// The fused output tails (ops_resize.cpp, kernels_tail.cu): a model ending in a 2-D Resize, prepared
// with the heads a job stores (logits in each float type, argmax, softmax, top-k, all together),
// lowered into one step that writes every output (checked on the lowered steps, no GPU needed), and
// its results against the CPU engine at every precision on odd shapes: channel counts that fill no
// 16-byte pack, non-integer scales, every coordinate mode DeepLab-style exports use, nearest too.
// Also the broadcast Resize (1x1 -> HxW), which becomes a copy.
#include <algorithm>

#include "gpu_test_util.h"
#include "model/prepare.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

struct TailSpec {
  Shape x = {2, 5, 9, 11};      // the model input
  int64_t classes = 21;
  Shape out = {37, 43};         // the upsampled size
  std::string mode = "linear", coord = "half_pixel", nearest = "round_prefer_floor";
};

// x -> FusedConv 3x3 to `classes` channels (channels-last at fp16/bf16/tf32) -> Resize -> "logits".
Graph tail_model(const TailSpec& s) {
  GraphBuilder b(s.x);
  const Shape low = {s.x[0], s.classes, s.x[2], s.x[3]};
  const Shape high = {s.x[0], s.classes, s.out[0], s.out[1]};
  b.random_f("W", {s.classes, s.x[1], 3, 3}, 81, -0.4f, 0.4f).random_f("B", {s.classes}, 82);
  Node& c = b.node("FusedConv", {"x", "W", "B"}, {f32("low", low)}, "sluice");
  set_ints(c, "pads", {1, 1, 1, 1});
  set_ints(c, "kernel_shape", {3, 3});
  b.constant_i("sizes", {4}, high);
  Node& r = b.node("Resize", {"low", "", "", "sizes"}, {f32("logits", high)});
  set_string(r, "mode", s.mode);
  set_string(r, "coordinate_transformation_mode", s.coord);
  set_string(r, "nearest_mode", s.nearest);
  b.output("logits");
  return b.g;
}

OutputSpec spec(OutputSpec::Kind kind, const std::string& name, DType t, int k = 0) {
  OutputSpec o;
  o.kind = kind;
  o.name = name;
  o.dtype = t;
  o.top_k = k;
  return o;
}

Graph prepared(const TailSpec& s, std::vector<OutputSpec> outputs) {
  PrepareOptions po;
  po.batch_size = s.x[0];
  po.sample_shape.assign(s.x.begin() + 1, s.x.end());
  po.outputs = std::move(outputs);
  return prepare_graph(tail_model(s), po);
}

using K = OutputSpec::Kind;

const std::vector<std::vector<OutputSpec>>& head_sets() {
  static const std::vector<std::vector<OutputSpec>> sets = {
      {spec(K::Logits, "logits", DType::F32)},
      {spec(K::Logits, "logits", DType::BF16)},
      {spec(K::ArgMax, "argmax", DType::Undefined)},
      {spec(K::Softmax, "softmax", DType::F16)},
      {spec(K::TopK, "topk", DType::F32, 3)},
      {spec(K::Logits, "logits", DType::F32), spec(K::ArgMax, "argmax", DType::Undefined),
       spec(K::Softmax, "softmax", DType::F32), spec(K::TopK, "topk", DType::BF16, 5)},
  };
  return sets;
}

// ---- lowering (no GPU needed) -----------------------------------------------------------------------

TEST(TailLowering, TheResizeAndEveryHeadBecomeOneStep) {
  ScopedEnv tails("SLUICE_CUDA_FUSE_TAILS", nullptr);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    for (const auto& heads : head_sets()) {
      const auto kinds = step_kinds(prepared(TailSpec{}, heads), p);
      SCOPED_TRACE(str(precision_name(p), ", ", heads.size(), " heads, first ", heads[0].name));
      EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "OutputTail"), 1);
      // Nothing after the tail: no Resize, no transpose, no conversion, no separate head (the one
      // conversion is the input's, first).
      EXPECT_EQ(kinds.back(), "OutputTail");
      for (const char* k : {"Resize", "Layout", "Cast", "ArgMaxCast", "Softmax", "TopK"})
        EXPECT_EQ(std::count(kinds.begin(), kinds.end(), k), 0) << k;
      EXPECT_EQ(std::count(kinds.begin() + 1, kinds.end(), "Convert"), 0);
    }
  }
}

TEST(TailLowering, AResizeReadByAnythingElseIsNoTail) {
  // The upsampled logits feed a Relu before the heads: no fusion, the Resize kernel runs.
  GraphBuilder b({2, 5, 9, 11});
  b.random_f("W", {7, 5, 1, 1}, 83).constant_i("sizes", {4}, {2, 7, 18, 22});
  b.node("Conv", {"x", "W"}, {f32("low", {2, 7, 9, 11})});
  Node& r = b.node("Resize", {"low", "", "", "sizes"}, {f32("up", {2, 7, 18, 22})});
  set_string(r, "mode", "linear");
  b.node("Relu", {"up"}, {f32("logits", {2, 7, 18, 22})});
  b.output("logits");
  PrepareOptions po;
  po.batch_size = 2;
  po.sample_shape = {5, 9, 11};
  po.outputs = {spec(K::ArgMax, "argmax", DType::Undefined)};
  const auto kinds = step_kinds(prepare_graph(b.g, po), Precision::BF16);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "OutputTail"), 0);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "Resize"), 1);
}

// ---- results against the CPU engine ----------------------------------------------------------------

class Tails : public ::testing::TestWithParam<Precision> {};

void expect_tail_matches(const TailSpec& s, Precision p) {
  for (const auto& heads : head_sets()) {
    SCOPED_TRACE(str(heads.size(), " heads, first ", heads[0].name, " ", dtype_name(heads[0].dtype)));
    CompareOptions c;
    c.exact_ints = p == Precision::FP32;   // rounded logits may flip near-ties
    // bf16 keeps 8 significant bits: logits drawn uniformly over a few classes come within its
    // rounding step (2^-8 of their range) of the runner-up at about 1 position in 100 per class,
    // and those pick either class; in a top-k every one of the k - 1 neighbouring pairs may swap,
    // moving two indices each (measured on the H200: argmax 98.7-99.5 %, top-k indices 97.3 % and
    // up).  An engine that read the wrong pixels would agree far less.
    if (p == Precision::BF16) c.int_agreement = 0.95;
    bool half_output = false;
    for (const auto& h : heads) half_output |= h.dtype == DType::BF16 || h.dtype == DType::F16;
    if (half_output && p != Precision::BF16) c.tol = 2e-2;   // bf16 outputs round to 3 significant digits
    expect_matches_cpu(prepared(s, heads), p, c);
  }
}

TEST_P(Tails, BilinearHalfPixelOddChannelsMatchesCpu) { expect_tail_matches(TailSpec{}, GetParam()); }

TEST_P(Tails, PytorchHalfPixelAndAlignCornersMatchCpu) {
  TailSpec s;
  s.x = {1, 3, 8, 8};
  s.classes = 16;   // fills packs of 8 and 4
  s.out = {64, 64};
  s.coord = "pytorch_half_pixel";
  expect_tail_matches(s, GetParam());
  s.coord = "align_corners";
  s.out = {29, 15};
  expect_tail_matches(s, GetParam());
}

TEST_P(Tails, NearestAsymmetricFloorMatchesCpu) {
  TailSpec s;
  s.mode = "nearest";
  s.coord = "asymmetric";
  s.nearest = "floor";
  s.out = {27, 33};
  expect_tail_matches(s, GetParam());
}

TEST_P(Tails, OneByOneInputBroadcastsEveryPixel) {
  TailSpec s;
  s.x = {3, 4, 1, 1};
  s.classes = 6;
  s.out = {5, 7};
  expect_tail_matches(s, GetParam());
}

// A 1x1 -> HxW Resize inside the network (DeepLabV3's ASPP pooling branch) is a broadcast copy.
Graph broadcast_graph(const std::string& mode) {
  GraphBuilder b({2, 12, 9, 10});
  b.random_f("W", {24, 12, 1, 1}, 84);
  b.node("GlobalAveragePool", {"x"}, {f32("g", {2, 12, 1, 1})});
  b.node("Conv", {"g", "W"}, {f32("c", {2, 24, 1, 1})});
  b.constant_i("sizes", {4}, {2, 24, 9, 10});
  Node& r = b.node("Resize", {"c", "", "", "sizes"}, {f32("up", {2, 24, 9, 10})});
  set_string(r, "mode", mode);
  b.random_f("W2", {24, 12, 1, 1}, 85);
  b.node("Conv", {"x", "W2"}, {f32("d", {2, 24, 9, 10})});
  Node& cat = b.node("Concat", {"up", "d"}, {f32("y", {2, 48, 9, 10})});
  set_int(cat, "axis", 1);
  b.output("y");
  return b.g;
}

TEST(TailLowering, OneByOneResizeInsideTheNetIsACopy) {
  const Graph g = broadcast_graph("linear");   // the builder keeps a reference
  cuda::Builder b(g, Precision::BF16);
  b.lower_all();
  int resizes = 0;
  for (const auto& s : b.steps)
    if (s->kind == "Resize") {
      ++resizes;
      EXPECT_EQ(s->flops, 2.0 * 2 * 24 * 9 * 10 * 4);   // the node's count, whatever the kernel
    }
  EXPECT_EQ(resizes, 1);
}

TEST_P(Tails, BroadcastResizeMatchesCpu) {
  for (const char* mode : {"linear", "nearest"}) {
    SCOPED_TRACE(mode);
    expect_matches_cpu(broadcast_graph(mode), GetParam());
  }
}

std::string precision_param(const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); }

INSTANTIATE_TEST_SUITE_P(Precisions, Tails,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         precision_param);

}  // namespace
