// The CPU engine's kernels on tiny graphs whose results are worked out by hand: pooling (ceil mode,
// padding counts), Resize, Pad, Slice, Gather, Softmax, ArgMax/ArgMaxCast, TopK, Normalize, Cast,
// broadcasting arithmetic, Concat, Transpose, Gemm, MatMul, ReduceMean, Clip, BatchNormalization.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "test_cpu_util.h"

using namespace sluice;
using namespace sluice::cputest;

namespace {

std::vector<float> iota(int n, float start = 0.f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// One node on input x, output y; returns y as floats.
std::vector<float> run1(const std::string& op, Shape xs, Shape ys, const std::vector<float>& x,
                        std::map<std::string, Attribute> attrs = {}, std::vector<std::string> extra = {},
                        GraphBuilder* prebuilt = nullptr) {
  GraphBuilder local(xs);
  GraphBuilder& gb = prebuilt ? *prebuilt : local;
  std::vector<std::string> ins = {"x"};
  ins.insert(ins.end(), extra.begin(), extra.end());
  Node& n = gb.node(op, ins, {f32("y", ys)});
  n.attrs = std::move(attrs);
  gb.output("y");
  return run_f32(gb.g, x);
}

TEST(CpuPool, MaxPoolCeilModeKeepsThePartialWindow) {
  // 5x5 ramp, 2x2 windows, stride 2, ceil_mode: the last row and column of windows hold one pixel.
  const auto y = run1("MaxPool", {1, 1, 5, 5}, {1, 1, 3, 3}, iota(25),
                      {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})},
                       {"ceil_mode", Attribute::of_int(1)}});
  expect_near(y, {6, 8, 9, 16, 18, 19, 21, 23, 24});
}

TEST(CpuPool, AveragePoolCeilModeDividesByTheValidPixels) {
  const auto y = run1("AveragePool", {1, 1, 5, 5}, {1, 1, 3, 3}, iota(25),
                      {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})},
                       {"ceil_mode", Attribute::of_int(1)}});
  expect_near(y, {3, 5, 6.5f, 13, 15, 16.5f, 20.5f, 22.5f, 24});
}

TEST(CpuPool, AveragePoolCountIncludePad) {
  const std::map<std::string, Attribute> base = {{"kernel_shape", Attribute::of_ints({3, 3})},
                                                 {"pads", Attribute::of_ints({1, 1, 1, 1})}};
  auto include = base;
  include["count_include_pad"] = Attribute::of_int(1);
  const std::vector<float> ones(9, 1.f);
  expect_near(run1("AveragePool", {1, 1, 3, 3}, {1, 1, 3, 3}, ones, include),
              {4 / 9.f, 6 / 9.f, 4 / 9.f, 6 / 9.f, 1, 6 / 9.f, 4 / 9.f, 6 / 9.f, 4 / 9.f});
  expect_near(run1("AveragePool", {1, 1, 3, 3}, {1, 1, 3, 3}, ones, base), ones);
}

TEST(CpuPool, MaxPoolDilationAndPadding) {
  // 1-D: x = 0..6, kernel 2 with dilation 3, pads 1: windows {-1,2}, {0,3}, ... (stride 1).
  const auto y = run1("MaxPool", {1, 1, 7}, {1, 1, 6}, iota(7),
                      {{"kernel_shape", Attribute::of_ints({2})}, {"dilations", Attribute::of_ints({3})},
                       {"pads", Attribute::of_ints({1, 1})}});
  expect_near(y, {2, 3, 4, 5, 6, 4});  // the last window is {4, pad}
}

TEST(CpuPool, GlobalAveragePool) {
  expect_near(run1("GlobalAveragePool", {2, 2, 2, 3}, {2, 2, 1, 1}, iota(24)), {2.5f, 8.5f, 14.5f, 20.5f});
}

Attribute s(const char* v) { return Attribute::of_string(v); }

TEST(CpuResize, NearestAsymmetricFloorRepeatsPixels) {
  GraphBuilder gb({1, 1, 2, 2});
  gb.constant_f("sc", {4}, {1, 1, 2, 2});
  const auto y = run1("Resize", {1, 1, 2, 2}, {1, 1, 4, 4}, {1, 2, 3, 4},
                      {{"mode", s("nearest")}, {"coordinate_transformation_mode", s("asymmetric")}, {"nearest_mode", s("floor")}},
                      {"", "sc"}, &gb);
  expect_near(y, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST(CpuResize, LinearAlignCorners) {
  GraphBuilder gb({1, 1, 2, 2});
  gb.constant_i("sz", {4}, {1, 1, 3, 3});
  const auto y = run1("Resize", {1, 1, 2, 2}, {1, 1, 3, 3}, {0, 1, 2, 3},
                      {{"mode", s("linear")}, {"coordinate_transformation_mode", s("align_corners")}}, {"", "", "sz"}, &gb);
  expect_near(y, {0, 0.5f, 1, 1, 1.5f, 2, 2, 2.5f, 3});
}

TEST(CpuResize, LinearHalfPixelClampsAtTheBorder) {
  GraphBuilder gb({1, 1, 1, 2});
  gb.constant_f("sc", {4}, {1, 1, 1, 2});
  const auto y = run1("Resize", {1, 1, 1, 2}, {1, 1, 1, 4}, {0, 1}, {{"mode", s("linear")}}, {"", "sc"}, &gb);
  expect_near(y, {0, 0.25f, 0.75f, 1});
}

TEST(CpuResize, NearestHalfPixelRoundPreferCeilDownsample) {
  // 1x6 -> 1x4, scale 2/3: x = (o + 0.5) * 1.5 - 0.5 = 0.25, 1.75, 3.25, 4.75 -> 0, 2, 3, 5.
  GraphBuilder gb({1, 1, 1, 6});
  gb.constant_i("sz", {4}, {1, 1, 1, 4});
  const auto y = run1("Resize", {1, 1, 1, 6}, {1, 1, 1, 4}, iota(6, 10),
                      {{"mode", s("nearest")}, {"nearest_mode", s("round_prefer_ceil")}}, {"", "", "sz"}, &gb);
  expect_near(y, {10, 12, 13, 15});
}

std::vector<float> pad1d(const char* mode, std::vector<int64_t> pads, float value = 0.f, int64_t out = 7) {
  GraphBuilder gb({1, 3});
  gb.constant_i("p", {4}, {0, pads[0], 0, pads[1]});
  gb.constant_f("v", {}, {value});
  return run1("Pad", {1, 3}, {1, out}, {1, 2, 3}, {{"mode", s(mode)}}, {"p", "v"}, &gb);
}

TEST(CpuData, PadModes) {
  expect_near(pad1d("constant", {2, 2}, 9.f), {9, 9, 1, 2, 3, 9, 9});
  expect_near(pad1d("reflect", {2, 2}), {3, 2, 1, 2, 3, 2, 1});
  expect_near(pad1d("edge", {2, 2}), {1, 1, 1, 2, 3, 3, 3});
  expect_near(pad1d("wrap", {2, 2}), {2, 3, 1, 2, 3, 1, 2});
  expect_near(pad1d("constant", {-1, 2}, 0.f, 4), {2, 3, 0, 0});  // negative pads crop
}

TEST(CpuData, SliceWithNegativeStep) {
  GraphBuilder gb({1, 10});
  gb.constant_i("st", {1}, {-1}).constant_i("en", {1}, {-100}).constant_i("ax", {1}, {1}).constant_i("sp", {1}, {-3});
  expect_near(run1("Slice", {1, 10}, {1, 4}, iota(10), {}, {"st", "en", "ax", "sp"}, &gb), {9, 6, 3, 0});
}

TEST(CpuData, GatherNegativeIndicesAlongAxis1) {
  GraphBuilder gb({2, 3});
  gb.constant_i("i", {2}, {-1, 0});
  expect_near(run1("Gather", {2, 3}, {2, 2}, iota(6), {{"axis", Attribute::of_int(1)}}, {"i"}, &gb), {2, 0, 5, 3});
}

TEST(CpuData, GatherIndexOutOfRangeFailsTheForwardPass) {
  // Axis 1 of [8, 3]: eight tasks on the pool, each of which throws; the error reaches the caller.
  GraphBuilder gb({8, 3});
  gb.constant_i("i", {2}, {0, 3});
  gb.node("Gather", {"x", "i"}, {f32("y", {8, 2})}).attrs["axis"] = Attribute::of_int(1);
  gb.output("y");
  const auto x = iota(24);
  for (int threads : {1, 3}) {
    try {
      run_f32(gb.g, x, 0, threads);
      ADD_FAILURE() << "no error with " << threads << " threads";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("index out of range"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuData, ConcatAndTranspose) {
  GraphBuilder gb({2, 2});
  gb.constant_f("c", {2, 1}, {7, 8});
  gb.node("Concat", {"x", "c"}, {f32("cat", {2, 3})}).attrs["axis"] = Attribute::of_int(-1);
  gb.node("Transpose", {"cat"}, {f32("y", {3, 2})});
  gb.output("y");
  expect_near(run_f32(gb.g, {1, 2, 3, 4}), {1, 3, 2, 4, 7, 8});
}

TEST(CpuData, ExpandAndTile) {
  GraphBuilder gb({1, 3});
  gb.constant_i("shape", {2}, {2, 3}).constant_i("rep", {2}, {1, 2});
  gb.node("Expand", {"x", "shape"}, {f32("e", {2, 3})});
  gb.node("Tile", {"e", "rep"}, {f32("y", {2, 6})});
  gb.output("y");
  expect_near(run_f32(gb.g, {1, 2, 3}), {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
}

TEST(CpuReduce, SoftmaxOverTheLastAxis) {
  const auto y = run1("Softmax", {2, 3}, {2, 3}, {1, 2, 3, 0, 0, 0});
  const float z = std::exp(1.f) + std::exp(2.f) + std::exp(3.f);
  expect_near(y, {std::exp(1.f) / z, std::exp(2.f) / z, std::exp(3.f) / z, 1 / 3.f, 1 / 3.f, 1 / 3.f});
}

TEST(CpuReduce, SoftmaxOverAMiddleAxis) {
  const auto y = run1("Softmax", {1, 2, 2}, {1, 2, 2}, {0, 1, 0, 3}, {{"axis", Attribute::of_int(1)}});
  expect_near(y, {0.5f, 1 / (1 + std::exp(2.f)), 0.5f, 1 / (1 + std::exp(-2.f))});
}

TEST(CpuReduce, ArgMaxTiesFirstOrLast) {
  const std::vector<float> x = {1, 5, 5, 2, 7, 7, 7, 0};
  for (int last : {0, 1}) {
    GraphBuilder gb({2, 4});
    Node& n = gb.node("ArgMax", {"x"}, {typed("y", DType::I64, {2, 1})});
    n.attrs["axis"] = Attribute::of_int(1);
    n.attrs["select_last_index"] = Attribute::of_int(last);
    gb.output("y");
    EXPECT_EQ(as<int64_t>(run_bytes(gb.g, x.data())[0]), last ? (std::vector<int64_t>{2, 2}) : (std::vector<int64_t>{1, 0}));
  }
}

TEST(CpuReduce, ArgMaxCastWritesNarrowIndices) {
  // [1, 3 classes, 2 pixels]: argmax over the classes, written as uint8 and as int32.
  const std::vector<float> x = {0, 9, 5, 1, 7, 3};
  for (DType t : {DType::U8, DType::I32}) {
    GraphBuilder gb({1, 3, 2});
    Node& n = gb.node("ArgMaxCast", {"x"}, {typed("y", t, {1, 2})}, "sluice");
    n.attrs["axis"] = Attribute::of_int(1);
    n.attrs["to"] = Attribute::of_int(dtype_to_onnx(t));
    gb.output("y");
    const auto out = run_bytes(gb.g, x.data())[0];
    if (t == DType::U8) EXPECT_EQ(out, (std::vector<uint8_t>{2, 0}));
    else EXPECT_EQ(as<int32_t>(out), (std::vector<int32_t>{2, 0}));
  }
}

TEST(CpuReduce, TopKLargestAndSmallestWithTies) {
  const std::vector<float> x = {3, 1, 3, 2};
  for (int largest : {1, 0}) {
    GraphBuilder gb({1, 4});
    gb.constant_i("k", {1}, {2});
    gb.node("TopK", {"x", "k"}, {f32("v", {1, 2}), typed("i", DType::I64, {1, 2})}).attrs["largest"] =
        Attribute::of_int(largest);
    gb.output("v").output("i");
    const auto out = run_bytes(gb.g, x.data());
    EXPECT_EQ(as<float>(out[0]), largest ? (std::vector<float>{3, 3}) : (std::vector<float>{1, 2}));
    EXPECT_EQ(as<int64_t>(out[1]), largest ? (std::vector<int64_t>{0, 2}) : (std::vector<int64_t>{1, 3}));
  }
}

TEST(CpuReduce, ReduceMeanAxesKeepdimsAndNoop) {
  GraphBuilder gb({2, 3});
  gb.constant_i("ax", {1}, {-1}).constant_i("none", {0}, {});
  gb.node("ReduceMean", {"x", "ax"}, {f32("m", {2, 1})});
  gb.node("ReduceMean", {"x"}, {f32("all", {1, 1})});
  Node& keep = gb.node("ReduceMean", {"x", "none"}, {f32("same", {2, 3})});
  keep.attrs["noop_with_empty_axes"] = Attribute::of_int(1);
  gb.node("ReduceMean", {"x", "ax"}, {f32("flat", {2})}).attrs["keepdims"] = Attribute::of_int(0);
  gb.output("m").output("all").output("same").output("flat");
  const auto x = iota(6);
  const auto out = run_bytes(gb.g, x.data());
  expect_near(as<float>(out[0]), {1, 4});
  expect_near(as<float>(out[1]), {2.5f});
  expect_near(as<float>(out[2]), x);
  expect_near(as<float>(out[3]), {1, 4});
}

TEST(CpuElementwise, NormalizeUint8PerChannel) {
  GraphBuilder gb({1, 2, 2}, DType::U8);
  Node& n = gb.node("Normalize", {"x"}, {f32("y", {1, 2, 2})}, "sluice");
  n.attrs["scale"] = Attribute::of_float(1.f / 255.f);
  n.attrs["mean"] = Attribute::of_floats({0.5f, 0.25f});
  n.attrs["std"] = Attribute::of_floats({0.5f, 0.25f});
  gb.output("y");
  const std::vector<uint8_t> x = {0, 255, 51, 102};
  const auto y = as<float>(run_bytes(gb.g, x.data())[0]);
  expect_near(y, {-1, 1, (0.2f - 0.25f) / 0.25f, (0.4f - 0.25f) / 0.25f}, 1e-6f);
}

TEST(CpuElementwise, ActivationValues) {
  const std::vector<float> x = {-4, -1, 0, 1, 4};
  expect_near(run1("HardSwish", {5}, {5}, x), {0, -1 / 3.f, 0, 2 / 3.f, 4});
  expect_near(run1("HardSigmoid", {5}, {5}, x), {0, 0.3f, 0.5f, 0.7f, 1});
  expect_near(run1("LeakyRelu", {5}, {5}, x, {{"alpha", Attribute::of_float(0.5f)}}), {-2, -0.5f, 0, 1, 4});
  expect_near(run1("Sigmoid", {5}, {5}, x), {1 / (1 + std::exp(4.f)), 1 / (1 + std::exp(1.f)), 0.5f,
                                              1 / (1 + std::exp(-1.f)), 1 / (1 + std::exp(-4.f))});
  GraphBuilder gb({5});
  gb.constant_f("lo", {}, {-0.5f});
  expect_near(run1("Clip", {5}, {5}, x, {}, {"lo"}, &gb), {-0.5f, -0.5f, 0, 1, 4});  // max absent: unbounded
}

TEST(CpuElementwise, BatchNormalization) {
  GraphBuilder gb({1, 2, 2});
  gb.constant_f("s", {2}, {2, 1}).constant_f("b", {2}, {0, 1}).constant_f("m", {2}, {1, 0}).constant_f("v", {2}, {4, 0.25f});
  Node& n = gb.node("BatchNormalization", {"x", "s", "b", "m", "v"}, {f32("y", {1, 2, 2})});
  n.attrs["epsilon"] = Attribute::of_float(0.f);
  gb.output("y");
  expect_near(run_f32(gb.g, {1, 3, 0.5f, -0.5f}), {0, 2, 2, 0});
}

TEST(CpuBinary, BroadcastingBothWays) {
  GraphBuilder gb({2, 1});
  gb.constant_f("r", {1, 3}, {10, 20, 30});
  gb.node("Mul", {"x", "r"}, {f32("y", {2, 3})});
  gb.node("Sub", {"r", "x"}, {f32("z", {2, 3})});
  gb.output("y").output("z");
  const std::vector<float> x = {1, 2};
  const auto out = run_bytes(gb.g, x.data());
  expect_near(as<float>(out[0]), {10, 20, 30, 20, 40, 60});
  expect_near(as<float>(out[1]), {9, 19, 29, 8, 18, 28});
}

TEST(CpuBinary, IntegerDivisionTruncatesAndDivisionByZeroGivesZero) {
  GraphBuilder gb({4});
  gb.constant_i("d", {4}, {2, -2, 0, 3});
  gb.node("Cast", {"x"}, {typed("xi", DType::I64, {4})}).attrs["to"] = Attribute::of_int(7);
  gb.node("Div", {"xi", "d"}, {typed("y", DType::I64, {4})});
  gb.output("y");
  const std::vector<float> x = {-7, 7, 5, 9};
  EXPECT_EQ(as<int64_t>(run_bytes(gb.g, x.data())[0]), (std::vector<int64_t>{-3, -3, 0, 3}));
}

TEST(CpuCast, FloatToEveryType) {
  const std::vector<float> x = {-2.7f, 0.5f, 1.5f, 65519.f, 3.3f};
  GraphBuilder gb({5});
  const std::vector<std::pair<std::string, DType>> outs = {{"i32", DType::I32}, {"i64", DType::I64}, {"f16", DType::F16},
                                                           {"bf16", DType::BF16}, {"b", DType::Bool}};
  for (const auto& [name, t] : outs) {
    gb.node("Cast", {"x"}, {typed(name, t, {5})}).attrs["to"] = Attribute::of_int(dtype_to_onnx(t));
    gb.output(name);
  }
  const auto out = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<int32_t>(out[0]), (std::vector<int32_t>{-2, 0, 1, 65519, 3}));  // toward zero
  EXPECT_EQ(as<int64_t>(out[1]), (std::vector<int64_t>{-2, 0, 1, 65519, 3}));
  const auto h = as<uint16_t>(out[2]);
  EXPECT_EQ(f16_to_f32(h[0]), f16_to_f32(f32_to_f16(-2.7f)));
  EXPECT_EQ(f16_to_f32(h[2]), 1.5f);
  EXPECT_EQ(f16_to_f32(h[3]), 65504.f);  // rounds to the largest half
  EXPECT_EQ(bf16_to_f32(as<uint16_t>(out[3])[4]), bf16_to_f32(f32_to_bf16(3.3f)));
  EXPECT_EQ(out[4], (std::vector<uint8_t>{1, 1, 1, 1, 1}));
}

// The one conversion behind Pad's fill value on the CPU and every scalar constant of the CUDA engine.
TEST(DTypeScalarBits, EachTypesBitPatternInTheLowBytes) {
  EXPECT_EQ(scalar_bits(DType::F32, 1.5), 0x3FC00000u);
  EXPECT_EQ(scalar_bits(DType::F64, -2.0), 0xC000000000000000ull);
  EXPECT_EQ(scalar_bits(DType::F16, 1.0), 0x3C00u);
  EXPECT_EQ(scalar_bits(DType::BF16, 1.0), 0x3F80u);
  EXPECT_EQ(scalar_bits(DType::U8, 200.0), 200u);
  EXPECT_EQ(scalar_bits(DType::U8, -1.0), 255u);               // wraps to the type's width
  EXPECT_EQ(scalar_bits(DType::I8, -3.0), 0xFDu);
  EXPECT_EQ(scalar_bits(DType::I32, -2.9), 0xFFFFFFFEu);       // toward zero, upper bytes clear
  EXPECT_EQ(scalar_bits(DType::I64, -2.0), 0xFFFFFFFFFFFFFFFEull);
  EXPECT_EQ(scalar_bits(DType::Bool, 0.5), 1u);
  EXPECT_EQ(scalar_bits(DType::Bool, 0.0), 0u);
  try {
    scalar_bits(DType::Undefined, 1.0);
    ADD_FAILURE() << "an undefined type has no bit pattern";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no scalar conversion"), std::string::npos) << e.what();
  }
}

TEST(CpuMatMul, GemmTransposesAlphaBetaAndBroadcastC) {
  // A^T with A = [[1,3],[2,4]] (so op(A) = [[1,2],[3,4]]), B^T with B = [[1,1],[0,1]] (op(B) = [[1,0],[1,1]]).
  GraphBuilder gb({2, 2});
  gb.constant_f("b", {2, 2}, {1, 1, 0, 1}).constant_f("c", {2, 1}, {10, 20});
  Node& n = gb.node("Gemm", {"x", "b", "c"}, {f32("y", {2, 2})});
  n.attrs["transA"] = Attribute::of_int(1);
  n.attrs["transB"] = Attribute::of_int(1);
  n.attrs["alpha"] = Attribute::of_float(2.f);
  n.attrs["beta"] = Attribute::of_float(0.5f);
  gb.output("y");
  // op(A) op(B) = [[3,2],[7,4]]; *2 + 0.5*[[10],[20]] = [[11,9],[24,18]]
  expect_near(run_f32(gb.g, {1, 3, 2, 4}), {11, 9, 24, 18});
}

TEST(CpuMatMul, BatchedBroadcastAgainstNaive) {
  // x [2,1,3,4] @ w [3,4,5] -> [2,3,3,5]
  const auto x = random_values(2 * 3 * 4, 41);
  const auto w = random_values(3 * 4 * 5, 42);
  GraphBuilder gb({2, 1, 3, 4});
  gb.constant_f("w", {3, 4, 5}, w);
  gb.node("MatMul", {"x", "w"}, {f32("y", {2, 3, 3, 5})});
  gb.output("y");
  const auto y = run_f32(gb.g, x);
  std::vector<double> ref(2 * 3 * 3 * 5, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j)
          for (int k = 0; k < 4; ++k)
            ref[((a * 3 + b) * 3 + i) * 5 + j] += static_cast<double>(x[(a * 3 + i) * 4 + k]) * w[(b * 4 + k) * 5 + j];
  EXPECT_LE(rel_error(y, ref), 1e-6);
}

TEST(CpuShape, ShapeWithStartAndEnd) {
  GraphBuilder gb({2, 3, 4, 5});
  Node& n = gb.node("Shape", {"x"}, {typed("y", DType::I64, {2})});
  n.attrs["start"] = Attribute::of_int(1);
  n.attrs["end"] = Attribute::of_int(-1);
  gb.output("y");
  const auto x = iota(120);
  EXPECT_EQ(as<int64_t>(run_bytes(gb.g, x.data())[0]), (std::vector<int64_t>{3, 4}));
}

}  // namespace
