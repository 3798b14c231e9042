// DepthToSpace (DCR, CRD), SpaceToDepth, GatherElements, ScatterElements (none, add, mul, max, min;
// int64 and int32 indices) and GridSample (bilinear, nearest; zeros, border, reflection; align_corners 0 and 1) on the CUDA
// engine, run with and without the CUDA graph, against the CPU engine (itself checked against ONNX
// Runtime in tests/python/test_ops_sampling.py).
//
// fp32: max|diff| / max|ref| <= 1e-4.  bf16: at most 1.5 times torch's own bf16 error, which is
// measured here on the same input by running the op as torch does at bf16: every input, constant
// and op output rounded to bf16, each op computing in fp32 in between (the CPU engine with a Cast
// to bf16 and back after every float op); ScatterElements' reductions, which torch accumulates in
// bf16 one update at a time, get that accumulation on the host.
#include <algorithm>
#include <map>

#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

constexpr double kFp32Tol = 1e-4;
constexpr double kBf16Factor = 1.5;

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

Tensor rounded_bf16(const Tensor& t) {
  if (t.dtype != DType::F32) return t;
  Tensor r = t;
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return r;
}

// g as torch runs it at bf16: constants rounded, every float op's output rounded (Cast to bf16 and
// back), computed in fp32 by the CPU engine.
Graph torch_bf16_graph(const Graph& g) {
  Graph e = g;
  for (auto& [name, t] : e.constants) t = rounded_bf16(t);
  e.nodes.clear();
  int k = 0;
  for (const Node& n : g.nodes) {
    Node m = n;
    std::vector<Node> after;
    for (auto& o : m.outputs) {
      const ValueInfo* v = g.value(o);
      if (o.empty() || !v || v->dtype != DType::F32) continue;
      const std::string wide = o + "@fp32", narrow = o + "@bf16";
      e.values[wide] = ValueInfo{wide, DType::F32, v->shape};
      e.values[narrow] = ValueInfo{narrow, DType::BF16, v->shape};
      Node down, up;
      down.op = up.op = "Cast";
      down.name = str("round", k, "a"), up.name = str("round", k++, "b");
      down.inputs = {wide}, down.outputs = {narrow}, down.attrs["to"] = Attribute::of_int(16);
      up.inputs = {narrow}, up.outputs = {o}, up.attrs["to"] = Attribute::of_int(1);
      o = wide;
      after.push_back(down);
      after.push_back(up);
    }
    e.nodes.push_back(m);
    for (auto& a : after) e.nodes.push_back(a);
  }
  return e;
}

double max_rel_error(const std::vector<Tensor>& got, const std::vector<Tensor>& ref) {
  double worst = 0;
  for (std::size_t k = 0; k < ref.size(); ++k)
    if (is_float(ref[k].dtype)) worst = std::max(worst, rel_error(got[k], ref[k]));
  return worst;
}

struct Check {
  float lo = -1.f, hi = 1.f;
  // The bf16 emulation of torch for graphs the Cast rounding does not describe (nullptr: the graph's).
  std::function<std::vector<Tensor>(const Tensor& x_bf16)> torch_bf16;
};

void expect_sampling_matches(const Graph& g, Precision p, const Check& c = {}) {
  const bool gpu = have_gpu();
  if (!gpu && !cpu_check_mode()) GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount reports none, so this GPU test is skipped";
  const Tensor x = random_tensor(g.inputs.at(0), 5, c.lo, c.hi);
  const std::vector<Tensor> ref = run_cpu(g, x);
  double tol = kFp32Tol;
  if (p == Precision::BF16 || !gpu) {
    const Tensor xb = rounded_bf16(x);
    const std::vector<Tensor> torch = c.torch_bf16 ? c.torch_bf16(xb) : run_cpu(torch_bf16_graph(g), xb);
    const double torch_err = max_rel_error(torch, ref);
    std::printf("[ bf16 ] torch's own bf16 error %.3g; the engine may have %.3g\n", torch_err, kBf16Factor * torch_err);
    tol = std::max(kBf16Factor * torch_err, 1e-6);
  }
  if (!gpu) {  // CPU-check mode: the references ran; the graph must lower
    cuda::Builder b(g, p);
    EXPECT_NO_THROW(b.lower_all());
    GTEST_SKIP() << "no CUDA GPU: the references ran and the graph lowered; the comparison needs a GPU";
  }
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "inside a CUDA graph" : "steps launched one by one");
    EngineOptions o;
    o.precision = p;
    o.io_sets = 1;
    o.cuda_graphs = graphs;
    const std::vector<Tensor> got = run_cuda(g, x, o);
    ASSERT_EQ(got.size(), ref.size());
    for (std::size_t k = 0; k < ref.size(); ++k) {
      SCOPED_TRACE(str("output '", g.outputs[k].name, "' at ", precision_name(p)));
      ASSERT_EQ(got[k].shape, ref[k].shape);
      ASSERT_EQ(got[k].dtype, ref[k].dtype);
      if (is_float(ref[k].dtype)) {
        const double err = rel_error(got[k], ref[k]);
        EXPECT_LE(err, tol) << "max|diff|/max|ref| = " << err;
      } else {
        EXPECT_EQ(got[k].as_int64(), ref[k].as_int64());
      }
    }
  }
}

class SamplingOps : public ::testing::TestWithParam<Precision> {};

std::vector<int64_t> random_ints(std::size_t n, int64_t lo, int64_t hi, uint32_t seed) {
  const std::vector<float> u = random_values(n, seed, 0.f, 1.f);
  std::vector<int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::min(hi - 1, lo + static_cast<int64_t>(u[i] * static_cast<float>(hi - lo)));
  return v;
}

}  // namespace

TEST_P(SamplingOps, DepthToSpaceBothModesAndSpaceToDepth) {
  const Precision p = GetParam();
  for (const char* mode : {"DCR", "CRD"})
    for (int64_t bs : {2, 3}) {
      SCOPED_TRACE(str(mode, " blocksize ", bs));
      const int64_t c = 2 * bs * bs;
      GraphBuilder b({3, c, 5, 7});
      Node& d = b.node("DepthToSpace", {"x"}, {f32("d", {3, 2, 5 * bs, 7 * bs})});
      set_int(d, "blocksize", bs);
      set_string(d, "mode", mode);
      set_int(b.node("SpaceToDepth", {"d"}, {f32("s", {3, c, 5, 7})}), "blocksize", bs);
      b.output("d").output("s");
      expect_sampling_matches(b.g, p);
    }
}

TEST_P(SamplingOps, PixelShuffleAfterAConvReadsItsChannelsLastOutput) {
  // Swin2SR's upsampler: Conv to 4x the channels (channels-last at bf16), DepthToSpace CRD, Conv.
  const Precision p = GetParam();
  GraphBuilder b({2, 3, 9, 11});
  b.random_f("w", {12, 3, 3, 3}, 2, -0.3f, 0.3f).random_f("w2", {4, 3, 3, 3}, 3, -0.3f, 0.3f);
  Node& c = b.node("Conv", {"x", "w"}, {f32("c", {2, 12, 9, 11})});
  set_ints(c, "pads", {1, 1, 1, 1});
  Node& d = b.node("DepthToSpace", {"c"}, {f32("d", {2, 3, 18, 22})});
  set_int(d, "blocksize", 2);
  set_string(d, "mode", "CRD");
  set_ints(b.node("Conv", {"d", "w2"}, {f32("y", {2, 4, 18, 22})}), "pads", {1, 1, 1, 1});
  b.output("y");
  expect_sampling_matches(b.g, p);
}

TEST_P(SamplingOps, GatherElementsWithConstantAndNegativeIndices) {
  const Precision p = GetParam();
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE(str("axis ", axis));
    const Shape is = axis == 1 ? Shape{3, 9, 6} : Shape{3, 4, 13};
    const int64_t dim = axis == 1 ? 5 : 7;
    GraphBuilder b({3, 5, 7});
    b.constant_i("i", is, random_ints(static_cast<std::size_t>(shape_numel(is)), -dim, dim, 11));
    set_int(b.node("GatherElements", {"x", "i"}, {f32("y", is)}), "axis", axis);
    b.output("y");
    expect_sampling_matches(b.g, p);
  }
}

TEST_P(SamplingOps, GatherAndScatterElementsTakeInt32Indices) {
  const Precision p = GetParam();
  {
    const Shape is{3, 9, 7};
    const std::vector<int64_t> v = random_ints(static_cast<std::size_t>(shape_numel(is)), -5, 5, 21);
    GraphBuilder b({3, 5, 7});
    b.constant("i", Tensor::from(DType::I32, is, std::vector<int32_t>(v.begin(), v.end())));
    set_int(b.node("GatherElements", {"x", "i"}, {f32("y", is)}), "axis", 1);
    b.output("y");
    expect_sampling_matches(b.g, p);
  }
  {
    // Indices computed at run time and cast to int32: TopK over scores 0.1 apart (no ties at bf16).
    GraphBuilder b({3, 37, 6});
    std::vector<float> ramp(37);
    for (int i = 0; i < 37; ++i) ramp[static_cast<std::size_t>(i)] = 0.1f * static_cast<float>((i * 14) % 37) - 1.8f;
    b.constant_i("axes", {1}, {2}).constant_i("k", {1}, {10}).constant_i("shape", {3}, {3, 10, 6});
    b.constant_f("ramp", {1, 37, 1}, ramp).constant_f("small", {}, {0.01f});
    set_int(b.node("ReduceMax", {"x", "axes"}, {f32("m", {3, 37, 1})}), "keepdims", 1);
    b.node("Mul", {"m", "small"}, {f32("ms", {3, 37, 1})});
    b.node("Add", {"ms", "ramp"}, {f32("score", {3, 37, 1})});
    Node& t = b.node("TopK", {"score", "k"}, {f32("top", {3, 10, 1}), typed("at", DType::I64, {3, 10, 1})});
    set_int(t, "axis", 1);
    b.node("Expand", {"at", "shape"}, {typed("at6", DType::I64, {3, 10, 6})});
    set_int(b.node("Cast", {"at6"}, {typed("at32", DType::I32, {3, 10, 6})}), "to", 6);
    set_int(b.node("GatherElements", {"x", "at32"}, {f32("y", {3, 10, 6})}), "axis", 1);
    b.output("y");
    expect_sampling_matches(b.g, p);
  }
  {
    // ScatterElements: a permutation of axis 1 in every column, one index negative.
    std::vector<int32_t> idx(3 * 5 * 7);
    for (int32_t n = 0; n < 3; ++n)
      for (int32_t j = 0; j < 7; ++j)
        for (int32_t i = 0; i < 5; ++i) idx[static_cast<std::size_t>((n * 5 + i) * 7 + j)] = (i * 2 + j + n) % 5 - (i == 3 ? 5 : 0);
    GraphBuilder b({3, 5, 7});
    b.constant("i", Tensor::from(DType::I32, {3, 5, 7}, idx));
    b.node("Neg", {"x"}, {f32("u", {3, 5, 7})});
    set_int(b.node("ScatterElements", {"x", "i", "u"}, {f32("y", {3, 5, 7})}), "axis", 1);
    b.output("y");
    expect_sampling_matches(b.g, p);
  }
}

TEST_P(SamplingOps, GatherElementsWithTopKIndicesFromTheData) {
  // YOLOv10's and RT-DETR's query selection: TopK over the scores, then the candidates' rows.
  const Precision p = GetParam();
  // The scores: a small part from the data on a ramp 0.1 apart (a permutation), so that no two tie at
  // bf16 and every precision selects the same candidates.
  GraphBuilder b({3, 37, 6});
  std::vector<float> ramp(37);
  for (int i = 0; i < 37; ++i) ramp[static_cast<std::size_t>(i)] = 0.1f * static_cast<float>((i * 14) % 37) - 1.8f;
  b.constant_i("axes", {1}, {2}).constant_i("k", {1}, {10}).constant_i("shape", {3}, {3, 10, 6});
  b.constant_f("ramp", {1, 37, 1}, ramp).constant_f("small", {}, {0.01f});
  Node& r = b.node("ReduceMax", {"x", "axes"}, {f32("m", {3, 37, 1})});
  set_int(r, "keepdims", 1);
  b.node("Mul", {"m", "small"}, {f32("ms", {3, 37, 1})});
  b.node("Add", {"ms", "ramp"}, {f32("score", {3, 37, 1})});
  Node& t = b.node("TopK", {"score", "k"}, {f32("top", {3, 10, 1}), typed("at", DType::I64, {3, 10, 1})});
  set_int(t, "axis", 1);
  b.node("Expand", {"at", "shape"}, {typed("at6", DType::I64, {3, 10, 6})});
  set_int(b.node("GatherElements", {"x", "at6"}, {f32("y", {3, 10, 6})}), "axis", 1);
  b.output("y");
  expect_sampling_matches(b.g, p);
}

TEST_P(SamplingOps, ScatterElementsOfUpdatesFromTheDataWithoutDuplicates) {
  const Precision p = GetParam();
  GraphBuilder b({3, 5, 7});
  // A permutation of axis 1 in every column, one index written negative.
  std::vector<int64_t> idx(3 * 5 * 7);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t i = 0; i < 5; ++i) idx[static_cast<std::size_t>((n * 5 + i) * 7 + j)] = (i * 2 + j + n) % 5 - (i == 3 ? 5 : 0);
  b.constant_i("i", {3, 5, 7}, idx);
  b.node("Neg", {"x"}, {f32("u", {3, 5, 7})});
  set_int(b.node("ScatterElements", {"x", "i", "u"}, {f32("y", {3, 5, 7})}), "axis", 1);
  b.output("y");
  expect_sampling_matches(b.g, p);
}

TEST_P(SamplingOps, ScatterElementsReductionsCombineDuplicates) {
  const Precision p = GetParam();
  const Shape is{3, 6, 7};
  const std::vector<int64_t> idx = random_ints(3 * 6 * 7, 0, 4, 13);   // 6 updates into 4 rows of 5
  const std::vector<float> upd = random_values(3 * 6 * 7, 14, 0.5f, 1.5f);
  for (const char* reduction : {"add", "mul", "max", "min"}) {
    SCOPED_TRACE(reduction);
    GraphBuilder b({3, 5, 7});
    b.constant_i("i", is, idx).constant_f("u", is, upd);
    Node& s = b.node("ScatterElements", {"x", "i", "u"}, {f32("y", {3, 5, 7})});
    set_int(s, "axis", 1);
    set_string(s, "reduction", reduction);
    b.output("y");
    Check c;
    c.lo = 0.5f, c.hi = 1.5f;
    const std::string red = reduction;
    // torch at bf16: data and updates rounded, each update combined in fp32 and rounded, in order.
    c.torch_bf16 = [=](const Tensor& xb) {
      Tensor y = xb;
      float* yp = y.data<float>();
      for (int64_t n = 0; n < 3; ++n)
        for (int64_t i = 0; i < 6; ++i)
          for (int64_t j = 0; j < 7; ++j) {
            const std::size_t q = static_cast<std::size_t>((n * 6 + i) * 7 + j);
            float& t = yp[(n * 5 + idx[q]) * 7 + j];
            const float u = bf16_to_f32(f32_to_bf16(upd[q]));
            const float v = red == "add" ? t + u : red == "mul" ? t * u : red == "max" ? std::max(t, u) : std::min(t, u);
            t = bf16_to_f32(f32_to_bf16(v));
          }
      return std::vector<Tensor>{y};
    };
    expect_sampling_matches(b.g, p, c);
  }
}

TEST_P(SamplingOps, GridSampleEveryModePaddingAndAlignmentWithAConstantGrid) {
  const Precision p = GetParam();
  const Shape gs{2, 6, 9, 2};
  const std::vector<float> grid = random_values(static_cast<std::size_t>(shape_numel(gs)), 17, -1.6f, 1.6f);
  for (const char* mode : {"bilinear", "nearest"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (int64_t align : {0, 1}) {
        SCOPED_TRACE(str(mode, " ", pad, " align_corners ", align));
        GraphBuilder b({2, 3, 5, 7});
        b.constant_f("g", gs, grid);
        Node& n = b.node("GridSample", {"x", "g"}, {f32("y", {2, 3, 6, 9})});
        set_string(n, "mode", mode);
        set_string(n, "padding_mode", pad);
        set_int(n, "align_corners", align);
        b.output("y");
        expect_sampling_matches(b.g, p);
      }
}

TEST_P(SamplingOps, GridSampleWithAGridComputedFromTheData) {
  // Deformable attention: the sampling locations come from the input.
  const Precision p = GetParam();
  for (int64_t align : {0, 1}) {
    SCOPED_TRACE(str("align_corners ", align));
    GraphBuilder b({3, 4, 6, 10});
    b.constant_i("s0", {1}, {0}).constant_i("s1", {1}, {2}).constant_i("ax", {1}, {1}).constant_f("k", {}, {1.3f});
    b.node("Slice", {"x", "s0", "s1", "ax"}, {f32("two", {3, 2, 6, 10})});
    set_ints(b.node("Transpose", {"two"}, {f32("g0", {3, 6, 10, 2})}), "perm", {0, 2, 3, 1});
    b.node("Mul", {"g0", "k"}, {f32("g", {3, 6, 10, 2})});
    Node& n = b.node("GridSample", {"x", "g"}, {f32("y", {3, 4, 6, 10})});
    set_int(n, "align_corners", align);
    b.output("y");
    expect_sampling_matches(b.g, p);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, SamplingOps, ::testing::Values(Precision::FP32, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
