// sluice.Attention on the CUDA engine against the CPU engine, at every precision and on both paths
// (cuDNN's fused attention and the batched GEMMs around the own softmax): ViT-like heads, k given
// transposed, a bias repeating per head, Swin-like windows whose bias repeats over windows and
// heads with a -100 shift mask, a fully masked row, and the fused zoo ViT end to end.
#include <cmath>
#include <cstdlib>

#include "gpu_test_util.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

struct Case {
  Shape lead;       // the score matrices' leading dims
  int64_t s, d;     // tokens, head size
  int64_t period;   // bias matrices (0: none)
  bool kt;          // k given transposed
};

// x [lead, s, d] is q; k = x Wk (transposed when asked), v = x Wv; y = Attention(q, k, v, bias).
Graph attention_graph(const Case& c, uint32_t seed) {
  Shape xs = c.lead;
  xs.push_back(c.s);
  xs.push_back(c.d);
  GraphBuilder b(xs);
  b.random_f("wk", {c.d, c.d}, seed + 1, -0.5f, 0.5f).random_f("wv", {c.d, c.d}, seed + 2, -0.5f, 0.5f);
  b.node("MatMul", {"x", "wk"}, {f32("k", xs)});
  b.node("MatMul", {"x", "wv"}, {f32("v", xs)});
  std::string k = "k";
  if (c.kt) {
    Shape ts = xs;
    std::swap(ts[ts.size() - 1], ts[ts.size() - 2]);
    std::vector<int64_t> perm;
    for (std::size_t i = 0; i < xs.size(); ++i) perm.push_back(static_cast<int64_t>(i));
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    set_ints(b.node("Transpose", {"k"}, {f32("kt", ts)}), "perm", perm);
    k = "kt";
  }
  std::vector<std::string> in = {"x", k, "v"};
  if (c.period > 0) {
    // Relative-position-like values plus, on every other bias matrix, a -100 mask on a block.
    std::vector<float> bias = random_values(static_cast<std::size_t>(c.period * c.s * c.s), seed + 3, -2.f, 2.f);
    for (int64_t p = 1; p < c.period; p += 2)
      for (int64_t i = 0; i < c.s; ++i)
        for (int64_t j = 0; j < c.s; ++j)
          if ((i < c.s / 2) != (j < c.s / 2)) bias[static_cast<std::size_t>((p * c.s + i) * c.s + j)] -= 100.f;
    b.constant_f("bias", {c.period, c.s, c.s}, bias);
    in.push_back("bias");
  }
  Node& a = b.node("Attention", in, {f32("y", xs)}, "sluice");
  set_float(a, "scale", 1.f / std::sqrt(static_cast<float>(c.d)));
  set_string(a, "layout", c.kt ? "bhds" : "bhsd");
  b.output("y");
  return b.g;
}

class Attention : public ::testing::TestWithParam<Precision> {};

TEST_P(Attention, BothPathsMatchTheCpuEngineOnHeadsWindowsAndTransposedKeys) {
  const Precision p = GetParam();
  const Case cases[] = {
      {{2, 3}, 50, 64, 0, false},   // ViT-like: 3 heads, 50 tokens
      {{2, 3}, 50, 64, 3, true},    // a bias per head, k transposed
      {{2, 4, 3}, 49, 32, 12, false},   // Swin-like: 4 windows x 3 heads, window bias and shift mask
      {{1, 2}, 300, 16, 1, false},  // long rows (above the kernel's register path)
  };
  uint32_t seed = 10;
  for (const char* path : {"gemm", "cudnn", "window", "auto"}) {
    ScopedEnv env("SLUICE_CUDA_ATTENTION", path);
    for (const Case& c : cases) {
      SCOPED_TRACE(str(path, " lead ", shape_str(c.lead), " s ", c.s, " d ", c.d, " period ", c.period, c.kt ? " kt" : ""));
      expect_matches_cpu(attention_graph(c, seed += 7), p);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, Attention,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });

// A text encoder's padding mask: a bias computed from the input per sample, [N, 1, S, S], read by
// the N x H score matrices with bias_group H (matrix n * H + h adds bias n), in the compute type on
// the GPU (as a graph computes it), with the last keys of every other sample masked by -1e4.
Graph per_sample_bias_graph(int64_t n, int64_t h, int64_t s, int64_t d, uint32_t seed) {
  const Shape xs = {n, h, s, d};
  GraphBuilder b(xs);
  b.random_f("wk", {d, d}, seed + 1, -0.5f, 0.5f).random_f("wv", {d, d}, seed + 2, -0.5f, 0.5f);
  b.random_f("wb", {d, s}, seed + 3, -0.5f, 0.5f);
  std::vector<float> mask(static_cast<std::size_t>(n * s * s), 0.f);
  for (int64_t i = 1; i < n; i += 2)
    for (int64_t r = 0; r < s; ++r)
      for (int64_t j = s - s / 3; j < s; ++j) mask[static_cast<std::size_t>((i * s + r) * s + j)] = -1e4f;
  b.constant_f("mask", {n, 1, s, s}, mask);
  b.constant_i("st", {1}, {0}).constant_i("en", {1}, {1}).constant_i("ax", {1}, {1});
  b.node("MatMul", {"x", "wk"}, {f32("k", xs)});
  b.node("MatMul", {"x", "wv"}, {f32("v", xs)});
  b.node("Slice", {"x", "st", "en", "ax"}, {f32("x0", {n, 1, s, d})});
  b.node("MatMul", {"x0", "wb"}, {f32("b0", {n, 1, s, s})});
  b.node("Add", {"b0", "mask"}, {f32("bias", {n, 1, s, s})});
  Node& a = b.node("Attention", {"x", "k", "v", "bias"}, {f32("y", xs)}, "sluice");
  set_float(a, "scale", 1.f / std::sqrt(static_cast<float>(d)));
  set_string(a, "layout", "bhsd");
  set_int(a, "bias_group", h);
  b.output("y");
  return b.g;
}

TEST_P(Attention, ABiasPerSampleOverTheHeadsMatchesTheCpuEngineOnEveryPath) {
  const Precision p = GetParam();
  uint32_t seed = 40;
  for (const char* path : {"gemm", "cudnn", "window", "auto"}) {
    ScopedEnv env("SLUICE_CUDA_ATTENTION", path);
    for (int64_t s : {40, 128, 200}) {
      SCOPED_TRACE(str(path, " s ", s));
      expect_matches_cpu(per_sample_bias_graph(3, 4, s, 64, seed += 7), p);
    }
  }
}

TEST(AttentionMasks, AFullyMaskedRowGivesZerosWhenTheNodeSaysSo) {
  Case c{{1, 2}, 8, 16, 1, false};
  Graph g = attention_graph(c, 3);
  Tensor& bias = g.constants.at("bias");
  std::vector<float> v = bias.as_float();
  for (int64_t j = 0; j < c.s; ++j) v[static_cast<std::size_t>(2 * c.s + j)] = -INFINITY;   // row 2
  bias = Tensor::from(DType::F32, bias.shape, v);
  for (auto& n : g.nodes)
    if (n.op == "Attention") set_int(n, "zero_masked_rows", 1);
  SLUICE_REQUIRE_GPU();
  const Tensor x = random_tensor(g.inputs[0], 5);
  EngineOptions o;
  o.precision = Precision::FP32;
  const Tensor y = run_cuda(g, x, o).at(0);
  const std::vector<float> got = y.as_float();
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t j = 0; j < c.d; ++j) EXPECT_EQ(got[static_cast<std::size_t>((m * c.s + 2) * c.d + j)], 0.f) << m << "," << j;
  EXPECT_LE(rel_error(y, run_cpu(g, x).at(0)), 1e-5);
}

// The zoo's ViT with its attention fused runs on the CUDA engine as the unfused graph does.
TEST(AttentionModels, TheFusedZooVitMatchesTheUnfusedGraph) {
  // SLUICE_ROOT: the checkout, where the tests run from another folder than the build's (the GPU host).
  const char* root = std::getenv("SLUICE_ROOT");
  const std::string path = std::string(root ? root : SLUICE_SOURCE_DIR) + "/tests/data/zoo/hf_vit.dynamo.onnx";
  PrepareOptions o;
  o.batch_size = 1;
  o.sample_shape = {3, 32, 32};
  const Graph fused = prepare_graph(load_onnx(path), o);
  Graph plain;
  {
    ScopedEnv env("SLUICE_FUSE_ATTENTION", "0");
    plain = prepare_graph(load_onnx(path), o);
  }
  int blocks = 0;
  for (const auto& n : fused.nodes) blocks += n.op == "Attention";
  ASSERT_EQ(blocks, 2);
  SLUICE_REQUIRE_GPU();
  const Tensor x = random_tensor(fused.inputs[0], 9);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    EngineOptions eo;
    eo.precision = p;
    const Tensor a = run_cuda(fused, x, eo).at(0), b = run_cuda(plain, x, eo).at(0);
    EXPECT_LE(rel_error(a, b), tolerance(p)) << precision_name(p);
  }
}

// The zoo's torchvision Swin (shifted windows: a bias per window and head) with its attention fused
// and read in the projections' layout runs on the one-pass window kernel as the unfused graph does.
TEST(AttentionModels, TheFusedZooSwinOnTheWindowKernelMatchesTheUnfusedGraph) {
  const char* root = std::getenv("SLUICE_ROOT");
  const std::string path = std::string(root ? root : SLUICE_SOURCE_DIR) + "/tests/data/zoo/tv_swin.dynamo.onnx";
  Graph src = load_onnx(path);
  PrepareOptions o;
  o.batch_size = 2;
  o.sample_shape = Shape(src.inputs.at(0).shape.begin() + 1, src.inputs.at(0).shape.end());
  const Graph fused = prepare_graph(load_onnx(path), o);
  Graph plain;
  {
    ScopedEnv env("SLUICE_FUSE_ATTENTION", "0");
    plain = prepare_graph(load_onnx(path), o);
  }
  int blocks = 0, strided = 0;
  for (const auto& n : fused.nodes)
    if (n.op == "Attention") {
      ++blocks;
      strided += n.get_string("layout", "") == "strided";
    }
  ASSERT_GT(blocks, 0);
  EXPECT_EQ(strided, blocks);
  SLUICE_REQUIRE_GPU();
  const Tensor x = random_tensor(fused.inputs[0], 9);
  for (const char* path_env : {"window", "gemm"}) {
    ScopedEnv env("SLUICE_CUDA_ATTENTION", path_env);
    for (Precision p : {Precision::BF16, Precision::FP16}) {
      EngineOptions eo;
      eo.precision = p;
      const Tensor a = run_cuda(fused, x, eo).at(0), b = run_cuda(plain, x, eo).at(0);
      EXPECT_LE(rel_error(a, b), tolerance(p)) << path_env << " " << precision_name(p);
    }
  }
}

}  // namespace
