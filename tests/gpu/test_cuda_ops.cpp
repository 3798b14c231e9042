// The CUDA engine's own kernels and cuBLAS products against the CPU engine: pooling, Gemm/MatMul,
// activations, broadcasting arithmetic, BatchNormalization, Resize (every mode and coordinate
// transformation), data movement, reductions, softmax, argmax, top-k, casts and the input
// normalization.  Float outputs at fp32/tf32/bf16 (and fp16), integer outputs exactly at fp32.
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class Ops : public ::testing::TestWithParam<Precision> {};

// ---- pooling -------------------------------------------------------------------------------------

TEST_P(Ops, MaxPoolResNetStemMatchesCpu) {
  GraphBuilder b({2, 4, 11, 11});
  Node& n = b.node("MaxPool", {"x"}, {f32("y", {2, 4, 6, 6})});
  set_ints(n, "kernel_shape", {3, 3});
  set_ints(n, "strides", {2, 2});
  set_ints(n, "pads", {1, 1, 1, 1});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, MaxPoolCeilModeMatchesCpu) {
  GraphBuilder b({1, 3, 11, 11});
  Node& n = b.node("MaxPool", {"x"}, {f32("y", {1, 3, 6, 6})});
  set_ints(n, "kernel_shape", {2, 2});
  set_ints(n, "strides", {2, 2});
  set_int(n, "ceil_mode", 1);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, AveragePoolCountsPaddingAsAsked) {
  for (int include : {0, 1}) {
    SCOPED_TRACE(str("count_include_pad ", include));
    GraphBuilder b({2, 3, 9, 10});
    Node& n = b.node("AveragePool", {"x"}, {f32("y", {2, 3, 5, 5})});
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "strides", {2, 2});
    set_ints(n, "pads", {1, 1, 1, 1});
    set_int(n, "count_include_pad", include);
    b.output("y");
    expect_matches_cpu(b.g, GetParam());
  }
}

TEST_P(Ops, GlobalAveragePoolMatchesCpu) {
  GraphBuilder b({3, 64, 7, 9});
  b.node("GlobalAveragePool", {"x"}, {f32("y", {3, 64, 1, 1})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- products ------------------------------------------------------------------------------------

TEST_P(Ops, GemmTransBWithBiasMatchesCpu) {
  GraphBuilder b({4, 96});
  b.random_f("W", {10, 96}, 31).random_f("C", {10}, 32);
  Node& n = b.node("Gemm", {"x", "W", "C"}, {f32("y", {4, 10})});
  set_int(n, "transB", 1);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, GemmTransAAlphaBetaMatchesCpu) {
  GraphBuilder b({40, 6});
  b.random_f("W", {40, 12}, 33).random_f("C", {6, 1}, 34);
  Node& n = b.node("Gemm", {"x", "W", "C"}, {f32("y", {6, 12})});
  set_int(n, "transA", 1);
  set_float(n, "alpha", 0.5f);
  set_float(n, "beta", 2.f);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, MatMulWithSharedWeightsMatchesCpu) {
  GraphBuilder b({2, 3, 5, 64});
  b.random_f("W", {64, 6}, 35);
  b.node("MatMul", {"x", "W"}, {f32("y", {2, 3, 5, 6})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, BatchedMatMulMatchesCpu) {
  GraphBuilder b({3, 4, 32});
  b.random_f("W", {3, 32, 5}, 36);
  b.node("MatMul", {"x", "W"}, {f32("y", {3, 4, 5})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, BroadcastMatMulMatchesCpu) {
  GraphBuilder b({2, 1, 4, 16});
  b.random_f("W", {3, 16, 5}, 37);
  b.node("MatMul", {"x", "W"}, {f32("y", {2, 3, 4, 5})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- elementwise ---------------------------------------------------------------------------------

TEST_P(Ops, ActivationsMatchCpu) {
  struct A { const char* op; float a, b; };
  for (const A& a : {A{"Relu", 0, 0}, A{"LeakyRelu", 0.2f, 0}, A{"Sigmoid", 0, 0}, A{"Tanh", 0, 0},
                     A{"HardSigmoid", 0.25f, 0.4f}, A{"HardSwish", 0, 0}}) {
    SCOPED_TRACE(a.op);
    GraphBuilder b({2, 5, 7, 3});
    Node& n = b.node(a.op, {"x"}, {f32("y", {2, 5, 7, 3})});
    if (std::string(a.op) == "LeakyRelu") set_float(n, "alpha", a.a);
    if (std::string(a.op) == "HardSigmoid") {
      set_float(n, "alpha", a.a);
      set_float(n, "beta", a.b);
    }
    b.output("y");
    CompareOptions c;
    c.lo = -4.f;
    c.hi = 4.f;
    expect_matches_cpu(b.g, GetParam(), c);
  }
}

TEST_P(Ops, ClipWithConstantBoundsMatchesCpu) {
  GraphBuilder b({3, 40});
  b.constant_f("lo", {}, {-0.25f}).constant_f("hi", {}, {0.5f});
  b.node("Clip", {"x", "lo", "hi"}, {f32("y", {3, 40})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, BroadcastingArithmeticMatchesCpu) {
  GraphBuilder b({2, 3, 4, 5});
  b.random_f("c", {3, 1, 1}, 41).random_f("r", {5}, 42).random_f("m", {1, 4, 1}, 43).random_f("d", {3, 4, 1}, 44, 0.5f, 1.5f);
  b.node("Add", {"x", "c"}, {f32("a", {2, 3, 4, 5})});
  b.node("Mul", {"a", "r"}, {f32("m1", {2, 3, 4, 5})});
  b.node("Sub", {"m", "m1"}, {f32("s", {2, 3, 4, 5})});
  b.node("Div", {"s", "d"}, {f32("q", {2, 3, 4, 5})});
  b.node("Add", {"q", "x"}, {f32("y", {2, 3, 4, 5})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, BroadcastOfTwoComputedTensorsMatchesCpu) {
  GraphBuilder b({2, 6, 5, 5});
  b.constant_i("axes", {2}, {2, 3});
  Node& r = b.node("ReduceMean", {"x", "axes"}, {f32("mean", {2, 6, 1, 1})});
  set_int(r, "keepdims", 1);
  b.node("Relu", {"x"}, {f32("relu", {2, 6, 5, 5})});
  b.node("Mul", {"relu", "mean"}, {f32("y", {2, 6, 5, 5})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, UnfusedBatchNormalizationMatchesCpu) {
  GraphBuilder b({2, 6, 5, 5});
  b.random_f("scale", {6}, 51).random_f("bias", {6}, 52).random_f("mean", {6}, 53).random_f("var", {6}, 54, 0.5f, 2.f);
  Node& n = b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {f32("y", {2, 6, 5, 5})});
  set_float(n, "epsilon", 1e-3f);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- Resize ----------------------------------------------------------------------------------------

struct ResizeCase {
  std::string mode, coord, nearest;
  Shape out;
  std::vector<float> scales;   // empty: use sizes = out
};

Graph resize_graph(const Shape& in, const ResizeCase& r) {
  GraphBuilder b(in);
  std::vector<std::string> ins = {"x", ""};
  if (!r.scales.empty()) {
    b.constant_f("scales", {static_cast<int64_t>(r.scales.size())}, r.scales);
    ins.push_back("scales");
  } else {
    b.constant_i("sizes", {static_cast<int64_t>(r.out.size())}, r.out);
    ins.push_back("");
    ins.push_back("sizes");
  }
  Node& n = b.node("Resize", ins, {f32("y", r.out)});
  set_string(n, "mode", r.mode);
  set_string(n, "coordinate_transformation_mode", r.coord);
  if (!r.nearest.empty()) set_string(n, "nearest_mode", r.nearest);
  b.output("y");
  return b.g;
}

TEST_P(Ops, ResizeModesAndCoordinatesMatchCpu) {
  const Shape in = {2, 3, 6, 7};
  const std::vector<ResizeCase> cases = {
      {"nearest", "asymmetric", "floor", {2, 3, 12, 14}, {1, 1, 2, 2}},            // torch nearest export
      {"nearest", "half_pixel", "round_prefer_floor", {2, 3, 9, 11}, {}},
      {"nearest", "align_corners", "round_prefer_ceil", {2, 3, 13, 4}, {}},
      {"nearest", "tf_half_pixel_for_nn", "ceil", {2, 3, 9, 10}, {}},
      {"nearest", "pytorch_half_pixel", "round_prefer_floor", {2, 3, 3, 3}, {}},
      {"linear", "half_pixel", "", {2, 3, 12, 14}, {1, 1, 2, 2}},
      {"linear", "pytorch_half_pixel", "", {2, 3, 48, 1}, {}},                      // DeepLab-style x8 and a size-1 axis
      {"linear", "align_corners", "", {2, 3, 11, 15}, {}},
      {"linear", "asymmetric", "", {2, 3, 9, 9}, {}},
      {"linear", "half_pixel", "", {2, 3, 4, 3}, {}},                                // downscale
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(str(c.mode, " ", c.coord, " ", c.nearest, " -> ", shape_str(c.out)));
    expect_matches_cpu(resize_graph(in, c), GetParam());
  }
}

// ---- data movement -------------------------------------------------------------------------------

TEST_P(Ops, ConcatAlongChannelsAndBatchMatchesCpu) {
  GraphBuilder b({2, 3, 4, 5});
  b.node("Relu", {"x"}, {f32("r", {2, 3, 4, 5})});
  b.node("Sigmoid", {"x"}, {f32("s", {2, 3, 4, 5})});
  Node& c1 = b.node("Concat", {"x", "r", "s"}, {f32("c", {2, 9, 4, 5})});
  set_int(c1, "axis", 1);
  Node& c0 = b.node("Concat", {"c", "c"}, {f32("y", {4, 9, 4, 5})});
  set_int(c0, "axis", 0);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, TransposeReshapeFlattenSqueezeMatchCpu) {
  GraphBuilder b({2, 3, 4, 5});
  Node& t = b.node("Transpose", {"x"}, {f32("t", {2, 4, 5, 3})});
  set_ints(t, "perm", {0, 2, 3, 1});
  b.constant_i("shape", {2}, {2, -1});
  b.node("Reshape", {"t", "shape"}, {f32("r", {2, 60})});
  b.node("Relu", {"r"}, {f32("rr", {2, 60})});
  b.constant_i("ax", {1}, {0});
  b.node("Unsqueeze", {"rr", "ax"}, {f32("u", {1, 2, 60})});
  b.node("Squeeze", {"u", "ax"}, {f32("q", {2, 60})});
  Node& f = b.node("Flatten", {"x"}, {f32("f", {2, 60})});
  set_int(f, "axis", 1);
  b.node("Add", {"q", "f"}, {f32("y", {2, 60})});
  b.output("y").output("r");   // "r" is a view of "t" and a graph output: it must be copied out
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, SliceWithStepsAndReversalMatchesCpu) {
  GraphBuilder b({3, 4, 6, 9});
  b.constant_i("st", {2}, {0, 1}).constant_i("en", {2}, {2, 8}).constant_i("ax", {2}, {0, 3}).constant_i("sp", {2}, {1, 2});
  b.node("Slice", {"x", "st", "en", "ax", "sp"}, {f32("a", {2, 4, 6, 4})});
  b.constant_i("st2", {1}, {-1}).constant_i("en2", {1}, {-1000000}).constant_i("ax2", {1}, {2}).constant_i("sp2", {1}, {-1});
  b.node("Slice", {"a", "st2", "en2", "ax2", "sp2"}, {f32("y", {2, 4, 6, 4})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, PadModesMatchCpu) {
  for (const char* mode : {"constant", "reflect", "edge"}) {
    SCOPED_TRACE(mode);
    GraphBuilder b({2, 3, 5, 6});
    b.constant_i("pads", {8}, {0, 0, 1, 2, 0, 0, 2, 1}).constant_f("v", {}, {0.5f});
    Node& n = b.node("Pad", {"x", "pads", "v"}, {f32("y", {2, 3, 8, 9})});
    set_string(n, "mode", mode);
    b.output("y");
    expect_matches_cpu(b.g, GetParam());
  }
}

TEST_P(Ops, GatherWithConstantIndicesMatchesCpu) {
  GraphBuilder b({2, 5, 3});
  b.constant_i("idx", {2}, {4, -5});
  Node& n = b.node("Gather", {"x", "idx"}, {f32("y", {2, 2, 3})});
  set_int(n, "axis", 1);
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- reductions and heads ------------------------------------------------------------------------

TEST_P(Ops, SoftmaxOverChannelsAndLastAxisMatchesCpu) {
  for (int64_t axis : {1, -1}) {
    SCOPED_TRACE(str("axis ", axis));
    GraphBuilder b({2, 21, 6, 7});
    Node& n = b.node("Softmax", {"x"}, {f32("y", {2, 21, 6, 7})});
    set_int(n, "axis", axis);
    b.output("y");
    CompareOptions c;
    c.lo = -5.f;
    c.hi = 5.f;
    expect_matches_cpu(b.g, GetParam(), c);
  }
}

TEST_P(Ops, ReduceMeanOverBlocksAndSplitAxesMatchesCpu) {
  struct R { std::vector<int64_t> axes; int64_t keep; Shape out; };
  for (const R& r : {R{{2, 3}, 1, {2, 6, 1, 1}}, R{{1}, 0, {2, 5, 7}}, R{{0, 2}, 0, {6, 7}}}) {
    SCOPED_TRACE(str("axes ", shape_str(r.axes)));
    GraphBuilder b({2, 6, 5, 7});
    b.constant_i("axes", {static_cast<int64_t>(r.axes.size())}, r.axes);
    Node& n = b.node("ReduceMean", {"x", "axes"}, {f32("y", r.out)});
    set_int(n, "keepdims", r.keep);
    b.output("y");
    expect_matches_cpu(b.g, GetParam());
  }
}

TEST_P(Ops, CastHeadsToHalfTypesMatchCpu) {
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    GraphBuilder b({2, 3, 8});
    b.node("Sigmoid", {"x"}, {f32("s", {2, 3, 8})});
    Node& n = b.node("Cast", {"s"}, {typed("y", t, {2, 3, 8})});
    set_int(n, "to", dtype_to_onnx(t));
    b.output("y");
    CompareOptions c;
    c.tol = t == DType::BF16 ? 2e-2 : (GetParam() == Precision::BF16 ? 2e-2 : 1e-3);
    expect_matches_cpu(b.g, GetParam(), c);
  }
}

TEST_P(Ops, NormalizeUint8InputMatchesCpu) {
  GraphBuilder b({2, 3, 6, 6}, DType::U8);
  Node& n = b.node("Normalize", {"x"}, {f32("n", {2, 3, 6, 6})}, "sluice");
  set_float(n, "scale", 1.f / 255.f);
  set_floats(n, "mean", {0.485f, 0.456f, 0.406f});
  set_floats(n, "std", {0.229f, 0.224f, 0.225f});
  b.node("Relu", {"n"}, {f32("y", {2, 3, 6, 6})});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

TEST_P(Ops, NormalizeFloatInputWithOneMeanMatchesCpu) {
  GraphBuilder b({2, 4, 5});
  Node& n = b.node("Normalize", {"x"}, {f32("y", {2, 4, 5})}, "sluice");
  set_float(n, "scale", 2.f);
  set_floats(n, "mean", {0.5f});
  set_floats(n, "std", {0.25f});
  b.output("y");
  expect_matches_cpu(b.g, GetParam());
}

// ---- consumers of channels-last tensors ----------------------------------------------------------

// At fp16/bf16 convolution outputs are channels-last; every op reading them either handles that
// layout or gets a transposed copy.  One convolution feeds each kind of consumer here.
TEST_P(Ops, ChannelsLastConsumersMatchCpu) {
  GraphBuilder b({2, 4, 6, 7});
  b.random_f("W", {8, 4, 1, 1}, 61).random_f("B", {8}, 62).random_f("c8", {8, 1, 1}, 63);
  b.node("FusedConv", {"x", "W", "B"}, {f32("c", {2, 8, 6, 7})}, "sluice");
  b.constant_i("sizes", {4}, {2, 8, 12, 14});
  Node& rs = b.node("Resize", {"c", "", "", "sizes"}, {f32("resized", {2, 8, 12, 14})});
  set_string(rs, "mode", "linear");
  Node& mp = b.node("MaxPool", {"c"}, {f32("maxpool", {2, 8, 3, 4})});
  set_ints(mp, "kernel_shape", {3, 3});
  set_ints(mp, "strides", {2, 2});
  set_ints(mp, "pads", {1, 1, 1, 1});
  Node& ap = b.node("AveragePool", {"c"}, {f32("avgpool", {2, 8, 3, 3})});
  set_ints(ap, "kernel_shape", {2, 2});
  set_ints(ap, "strides", {2, 2});
  b.node("GlobalAveragePool", {"c"}, {f32("gap", {2, 8, 1, 1})});
  b.node("Mul", {"c", "gap"}, {f32("scaled", {2, 8, 6, 7})});
  b.node("Add", {"c", "c8"}, {f32("shifted", {2, 8, 6, 7})});
  Node& cat = b.node("Concat", {"c", "shifted"}, {f32("concat", {2, 16, 6, 7})});
  set_int(cat, "axis", 1);
  Node& sm = b.node("Softmax", {"c"}, {f32("softmax", {2, 8, 6, 7})});
  set_int(sm, "axis", 1);
  b.constant_i("hw", {2}, {2, 3});
  b.node("ReduceMean", {"c", "hw"}, {f32("mean", {2, 8, 1, 1})});
  b.constant_i("flat", {3}, {2, 8, 42}).constant_i("back", {4}, {2, 8, 6, 7});
  b.node("Reshape", {"c", "flat"}, {f32("flat_c", {2, 8, 42})});
  b.node("Reshape", {"flat_c", "back"}, {f32("nchw_c", {2, 8, 6, 7})});
  b.node("Sigmoid", {"c"}, {f32("sig", {2, 8, 6, 7})});
  b.node("Sub", {"sig", "nchw_c"}, {f32("mixed", {2, 8, 6, 7})});
  for (const char* o : {"resized", "maxpool", "avgpool", "scaled", "concat", "softmax", "mean", "mixed"}) b.output(o);
  expect_matches_cpu(b.g, GetParam());
}

std::string precision_param(const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); }

INSTANTIATE_TEST_SUITE_P(Precisions, Ops,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         precision_param);

// ---- integer outputs: fp32 only (rounding to half types creates ties the CPU does not see) -------

TEST(OpsIndices, ArgMaxAndArgMaxCastMatchCpuExactly) {
  GraphBuilder b({2, 21, 5, 6});
  Node& a = b.node("ArgMax", {"x"}, {typed("i64", DType::I64, {2, 5, 6})});
  set_int(a, "axis", 1);
  set_int(a, "keepdims", 0);
  Node& u = b.node("ArgMaxCast", {"x"}, {typed("u8", DType::U8, {2, 5, 6})}, "sluice");
  set_int(u, "axis", 1);
  set_int(u, "to", dtype_to_onnx(DType::U8));
  Node& i = b.node("ArgMaxCast", {"x"}, {typed("i32", DType::I32, {2, 5, 6})}, "sluice");
  set_int(i, "axis", 1);
  set_int(i, "to", dtype_to_onnx(DType::I32));
  Node& l = b.node("ArgMax", {"x"}, {typed("last", DType::I64, {2, 21, 5, 1})});
  set_int(l, "axis", -1);
  set_int(l, "keepdims", 1);
  b.output("i64").output("u8").output("i32").output("last");
  expect_matches_cpu(b.g, Precision::FP32);
}

TEST(OpsIndices, ArgMaxOfChannelsLastLogitsAgreesWithCpu) {
  // At bf16 the logits are channels-last; argmax reads them so.  Near-ties may flip after rounding.
  GraphBuilder b({2, 6, 9, 10});
  b.random_f("W", {21, 6, 3, 3}, 71).random_f("B", {21}, 72);
  Node& c = b.node("FusedConv", {"x", "W", "B"}, {f32("logits", {2, 21, 9, 10})}, "sluice");
  set_ints(c, "pads", {1, 1, 1, 1});
  Node& u = b.node("ArgMaxCast", {"logits"}, {typed("u8", DType::U8, {2, 9, 10})}, "sluice");
  set_int(u, "axis", 1);
  set_int(u, "to", dtype_to_onnx(DType::U8));
  b.output("u8");
  CompareOptions co;
  co.exact_ints = false;
  expect_matches_cpu(b.g, Precision::BF16, co);
  expect_matches_cpu(b.g, Precision::FP32);
}

TEST(OpsIndices, TopKMatchesCpuExactly) {
  GraphBuilder b({4, 100});
  b.constant_i("k", {1}, {5});
  Node& n = b.node("TopK", {"x", "k"}, {f32("v", {4, 5}), typed("i", DType::I64, {4, 5})});
  set_int(n, "axis", -1);
  b.output("v").output("i");
  expect_matches_cpu(b.g, Precision::FP32);
}

TEST(OpsIndices, TopKAlongChannelsSmallestMatchesCpu) {
  GraphBuilder b({2, 10, 3});
  b.constant_i("k", {1}, {3});
  Node& n = b.node("TopK", {"x", "k"}, {f32("v", {2, 3, 3}), typed("i", DType::I64, {2, 3, 3})});
  set_int(n, "axis", 1);
  set_int(n, "largest", 0);
  b.output("v").output("i");
  expect_matches_cpu(b.g, Precision::FP32);
}

}  // namespace
