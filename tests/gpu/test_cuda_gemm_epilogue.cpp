// Products with their bias (and GELU) as a cuBLASLt epilogue (engine/cuda/gemm_lt.h): odd shapes
// (M, N, K no multiples of 8) at every precision against a float64 host reference, the folded batch
// of a shared weight, a strided batch of per-sample weights, Gemm's own C as the bias, fp32 output
// for a branch tail of the residual stream, the erf GELU at bf16 against the separate steps; which
// steps the builder makes for them, with and without SLUICE_CUDA_GEMM_EPILOGUE, and for the zoo's
// vision transformers.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gpu_test_util.h"
#include "model/prepare.h"
#include "support/zoo_model.h"

using namespace sluice;
using namespace sluice::gputest;
using sluice::testsupport::zoo_model;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kB = 3, kM = 37, kK = 29, kN = 53;

enum class Tail { Bias, BiasGelu, BiasGeluTanh };

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

// x [B, M, K] times w (shared [K, N], or per sample [B, K, N]), plus bias [N] (written [1, 1, N]
// when `padded`), then the tail's Gelu.
Graph product(Tail tail, bool per_sample_weights, bool padded = false) {
  GraphBuilder b({kB, kM, kK});
  const Shape ws = per_sample_weights ? Shape{kB, kK, kN} : Shape{kK, kN};
  b.random_f("w", ws, 21, -0.5f, 0.5f).random_f("bias", padded ? Shape{1, 1, kN} : Shape{kN}, 22);
  const Shape ys = {kB, kM, kN};
  b.node("MatMul", {"x", "w"}, {f32("p", ys)});
  b.node("Add", {"bias", "p"}, {f32(tail == Tail::Bias ? "y" : "s", ys)});   // the bias first, as TorchScript writes it
  if (tail != Tail::Bias) {
    Node& g = b.node("Gelu", {"s"}, {f32("y", ys)});
    if (tail == Tail::BiasGeluTanh) set_string(g, "approximate", "tanh");
  }
  b.output("y");
  return b.g;
}

double gelu(double v, bool tanh_form) {
  if (tanh_form) return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
}

// The graph of product() in float64 from the operands as the engine holds them (the input, the
// weights and the bias rounded to the compute type); the Gelu is the one the graph names.
Tensor product_reference(const Graph& g, const Tensor& x, Precision p, Tail tail, bool per_sample_weights) {
  auto seen = [&](std::vector<float> v) {
    for (auto& f : v) f = round_to(p, f);
    return v;
  };
  const auto xs = seen(x.as_float()), w = seen(g.constants.at("w").as_float()), bias = seen(g.constants.at("bias").as_float());
  std::vector<float> y(static_cast<std::size_t>(kB * kM * kN));
  for (int64_t s = 0; s < kB; ++s)
    for (int64_t i = 0; i < kM; ++i)
      for (int64_t j = 0; j < kN; ++j) {
        double acc = bias[static_cast<std::size_t>(j)];
        for (int64_t q = 0; q < kK; ++q)
          acc += static_cast<double>(xs[static_cast<std::size_t>((s * kM + i) * kK + q)]) *
                 w[static_cast<std::size_t>((per_sample_weights ? s * kK * kN : 0) + q * kN + j)];
        if (tail != Tail::Bias) acc = gelu(acc, tail == Tail::BiasGeluTanh);
        y[static_cast<std::size_t>((s * kM + i) * kN + j)] = static_cast<float>(acc);
      }
  return Tensor::from(DType::F32, {kB, kM, kN}, y);
}

struct Case {
  Precision p;
  Tail tail;
  bool per_sample;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const char* tails[] = {"Bias", "BiasGelu", "BiasGeluTanh"};
  return std::string(precision_name(i.param.p)) + "_" + tails[static_cast<int>(i.param.tail)] +
         (i.param.per_sample ? "_PerSampleWeights" : "_SharedWeights");
}

class GemmEpilogue : public ::testing::TestWithParam<Case> {};

TEST_P(GemmEpilogue, MatchesTheHostReferenceOnOddShapes) {
  const Case c = GetParam();
  const Graph g = product(c.tail, c.per_sample);
  expect_matches_reference(g, c.p, [&](const Tensor& x) {
    return std::vector<Tensor>{product_reference(g, x, c.p, c.tail, c.per_sample)};
  });
}

TEST_P(GemmEpilogue, IsOneStepWhereThePrecisionAllowsItsGelu) {
  const Case c = GetParam();
  const Graph g = product(c.tail, c.per_sample);
  const auto kinds = step_kinds(g, c.p);
  // cuBLASLt's GELU is the tanh form: the erf form is fused at bf16 only (ops_gemm.cpp).
  const bool gelu_fused = c.tail == Tail::BiasGeluTanh || (c.tail == Tail::BiasGelu && c.p == Precision::BF16);
  EXPECT_EQ(count(kinds, "MatMul+Bias+Gelu"), gelu_fused ? 1 : 0);
  EXPECT_EQ(count(kinds, "MatMul+Bias"), gelu_fused ? 0 : 1);
  EXPECT_EQ(count(kinds, "Gelu"), c.tail != Tail::Bias && !gelu_fused ? 1 : 0);
  EXPECT_EQ(count(kinds, "Add"), 0);
  EXPECT_EQ(count(kinds, "MatMul"), 0);
  ScopedEnv off("SLUICE_CUDA_GEMM_EPILOGUE", "0");
  const auto separate = step_kinds(g, c.p);
  EXPECT_EQ(count(separate, "MatMul"), 1);
  EXPECT_EQ(count(separate, "Add"), 1);
  EXPECT_EQ(count(separate, "Gelu"), c.tail == Tail::Bias ? 0 : 1);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    for (Tail t : {Tail::Bias, Tail::BiasGelu, Tail::BiasGeluTanh}) v.push_back({p, t, false});
  for (Precision p : {Precision::FP32, Precision::BF16}) v.push_back({p, Tail::BiasGelu, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmEpilogue, ::testing::ValuesIn(cases()), case_name);

TEST(GemmEpilogueFusion, ABiasWrittenWithLeadingOnesIsFusedAndMatchesTheCpuEngine) {
  const Graph g = product(Tail::Bias, false, true);
  EXPECT_EQ(count(step_kinds(g, Precision::FP32), "MatMul+Bias"), 1);
  expect_matches_cpu(g, Precision::FP32);
  expect_matches_cpu(g, Precision::BF16);
}

TEST(GemmEpilogueFusion, AnAddOfANonVectorOrAProductReadTwiceStaysSeparate) {
  const Shape ys = {kB, kM, kN};
  {
    GraphBuilder b({kB, kM, kK});
    b.random_f("w", {kK, kN}, 21).random_f("table", {kM, kN}, 22);   // [M, N]: no bias vector
    b.node("MatMul", {"x", "w"}, {f32("p", ys)});
    b.node("Add", {"p", "table"}, {f32("y", ys)});
    b.output("y");
    const auto kinds = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul"), 1);
    EXPECT_EQ(count(kinds, "Add"), 1);
  }
  {
    GraphBuilder b({kB, kM, kK});
    b.random_f("w", {kK, kN}, 21).random_f("bias", {kN}, 22);
    b.node("MatMul", {"x", "w"}, {f32("p", ys)});
    b.node("Add", {"p", "bias"}, {f32("y", ys)});
    b.output("y").output("p");   // the product itself is wanted too
    const auto kinds = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul"), 1);
    EXPECT_EQ(count(kinds, "Add"), 1);
  }
}

TEST(GemmEpilogueFusion, AnUnknownSwitchValueIsAUsageError) {
  ScopedEnv bad("SLUICE_CUDA_GEMM_EPILOGUE", "yes");
  EXPECT_THROW(step_kinds(product(Tail::Bias, false), Precision::BF16), UsageError);
}

// Gemm(x, w^T, C) with alpha and beta, C a row [N]: alpha * x w^T + beta * C, then the tanh Gelu.
TEST(GemmEpilogueFusion, GemmsOwnRowCIsTheBiasAndMatchesTheHostReference) {
  const int64_t m = 45, k = 19, n = 27;
  GraphBuilder b({m, k});
  b.random_f("w", {n, k}, 31).random_f("c", {n}, 32);
  Node& gm = b.node("Gemm", {"x", "w", "c"}, {f32("s", {m, n})});
  set_int(gm, "transB", 1);
  set_float(gm, "alpha", 0.75f);
  set_float(gm, "beta", 1.5f);
  Node& ge = b.node("Gelu", {"s"}, {f32("y", {m, n})});
  set_string(ge, "approximate", "tanh");
  b.output("y");
  const Graph g = b.g;
  for (const Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    EXPECT_EQ(count(step_kinds(g, p), "Gemm+Bias+Gelu"), 1);
    expect_matches_reference(g, p, [&](const Tensor& x) {
      std::vector<float> xs = x.as_float(), w = g.constants.at("w").as_float(), c = g.constants.at("c").as_float();
      for (auto* v : {&xs, &w, &c})
        for (auto& f : *v) f = round_to(p, f);
      std::vector<float> y(static_cast<std::size_t>(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t q = 0; q < k; ++q) acc += static_cast<double>(xs[static_cast<std::size_t>(i * k + q)]) * w[static_cast<std::size_t>(j * k + q)];
          y[static_cast<std::size_t>(i * n + j)] = static_cast<float>(gelu(0.75 * acc + 1.5 * c[static_cast<std::size_t>(j)], true));
        }
      return std::vector<Tensor>{Tensor::from(DType::F32, {m, n}, y)};
    });
  }
}

// One pre-LayerNorm block, h = x + (LN(x) W + bias), y = LN(h): at bf16 the bias Add is a branch
// tail of the residual stream, so the fused step writes it in fp32 straight from the accumulators.
TEST(GemmEpilogueFusion, ABranchTailOfTheResidualStreamIsWrittenInFp32) {
  const Shape ts = {kB, kM, kN};
  GraphBuilder b(ts);
  b.random_f("g", {kN}, 41, 0.5f, 1.5f).random_f("beta", {kN}, 42, -0.5f, 0.5f).random_f("w", {kN, kN}, 43, -0.2f, 0.2f);
  b.random_f("bias", {kN}, 44);
  b.node("LayerNormalization", {"x", "g", "beta"}, {f32("n", ts)});
  b.node("MatMul", {"n", "w"}, {f32("p", ts)});
  b.node("Add", {"bias", "p"}, {f32("t", ts)});
  b.node("Add", {"x", "t"}, {f32("h", ts)});
  b.node("LayerNormalization", {"h", "g", "beta"}, {f32("y", ts)});
  b.output("y");
  const Graph g = b.g;
  cuda::Builder bl(g, Precision::BF16);
  bl.lower_all();
  int fused = 0;
  for (std::size_t i = 0; i < bl.steps.size(); ++i) {
    if (bl.steps[i]->kind != "MatMul+Bias") continue;
    ++fused;
    const int y = bl.step_slots[i].back();
    EXPECT_EQ(bl.slot(y).dtype, DType::F32) << bl.slot(y).name;
  }
  EXPECT_EQ(fused, 1);
  expect_matches_cpu(g, Precision::BF16);
  expect_matches_cpu(g, Precision::FP32);
}

// The erf GELU computed by cuBLASLt's tanh form at bf16: against the float64 erf reference, the
// fused step (one rounding) is no further off than the three separate steps (three roundings).
TEST(GemmEpilogueFusion, TheFusedBf16GeluIsAsCloseToTheErfFormAsTheSeparateSteps) {
  SLUICE_REQUIRE_GPU();
  const Graph g = product(Tail::BiasGelu, false);
  const Tensor x = random_tensor(g.inputs.at(0), 5);
  const Tensor ref = product_reference(g, x, Precision::BF16, Tail::BiasGelu, false);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.io_sets = 1;
  const double fused = rel_error(run_cuda(g, x, o).at(0), ref);
  ScopedEnv off("SLUICE_CUDA_GEMM_EPILOGUE", "0");
  const double separate = rel_error(run_cuda(g, x, o).at(0), ref);
  std::printf("[ epilogue ] bf16 bias + erf GELU: fused %.2e, separate steps %.2e (max|diff|/max|ref|)\n", fused, separate);
  // bf16's half ulp is 2^-9 of a value; the tanh form adds at most 4.7e-4 absolute.
  EXPECT_LE(fused, std::max(separate, 1.0 / 512) + 5e-4);
}

// Two products of one shape: the first times cuBLASLt's candidates (when its heuristic offers more
// than one), the second takes that choice; a second engine reads both from the algorithm cache and
// computes the same bytes; SLUICE_CUDA_GEMM_TUNE=0 times nothing.
TEST(GemmEpilogueFusion, IdenticalProductsShareOneTimingAndASecondStartReadsItFromTheCache) {
  SLUICE_REQUIRE_GPU();
  const Shape ts = {kB, kM, kN};
  GraphBuilder b(ts);
  b.random_f("w1", {kN, kN}, 51, -0.2f, 0.2f).random_f("w2", {kN, kN}, 52, -0.2f, 0.2f).random_f("b1", {kN}, 53).random_f("b2", {kN}, 54);
  b.node("MatMul", {"x", "w1"}, {f32("p1", ts)});
  b.node("Add", {"p1", "b1"}, {f32("s1", ts)});
  b.node("MatMul", {"s1", "w2"}, {f32("p2", ts)});
  b.node("Add", {"p2", "b2"}, {f32("y", ts)});
  b.output("y");
  const Graph g = b.g;
  const fs::path dir = fs::temp_directory_path() / str("sluice-gpu-test-lt-", ::getpid());
  EngineOptions o;
  o.precision = Precision::BF16;
  o.cache_dir = dir.string();
  o.io_sets = 1;
  auto first = create_cuda_engine(g, o);
  const cuda::EngineStats a = *cuda::engine_stats(*first);
  EXPECT_LE(a.products_measured, 1);
  EXPECT_EQ(a.products_cached, a.products_measured);
  auto second = create_cuda_engine(g, o);
  const cuda::EngineStats c = *cuda::engine_stats(*second);
  EXPECT_EQ(c.products_measured, 0);
  EXPECT_EQ(c.products_cached, 2 * a.products_measured);
  std::printf("[ epilogue ] products timed %d, cached %d; second start timed %d, cached %d\n", a.products_measured,
              a.products_cached, c.products_measured, c.products_cached);
  const Tensor x = random_tensor(g.inputs[0], 9);
  EXPECT_EQ(cuda::run_forward(*first, x)[0].bytes, cuda::run_forward(*second, x)[0].bytes);
  fs::remove_all(dir);
  ScopedEnv heuristic("SLUICE_CUDA_GEMM_TUNE", "0");
  auto untimed = create_cuda_engine(g, o);
  EXPECT_EQ(cuda::engine_stats(*untimed)->products_measured, 0);
  EXPECT_EQ(cuda::engine_stats(*untimed)->products_cached, 0);
  fs::remove_all(dir);
}

TEST(GemmEpilogueFusion, TheZoosVisionTransformersFuseEveryProjectionsBiasAndTheirMlpGelu) {
  for (const std::string name : {"timm_deit.torchscript", "timm_deit.dynamo", "timm_dinov2.torchscript", "hf_vit.torchscript",
                                 "hf_clip_vision.torchscript", "tv_vit.dynamo"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    const auto on = step_kinds(g, Precision::BF16);
    const auto off = step_kinds_with(g, Precision::BF16, "SLUICE_CUDA_GEMM_EPILOGUE", "0");
    const int gelu_fused = count(on, "MatMul+Bias+Gelu") + count(on, "Gemm+Bias+Gelu");
    const int bias_fused = count(on, "MatMul+Bias") + count(on, "Gemm+Bias");
    std::printf("[ epilogue ] %s: %d products with bias and GELU, %d with bias, %d products left; %d steps (%d separate)\n",
                name.c_str(), gelu_fused, bias_fused, count(on, "MatMul") + count(on, "Gemm"), static_cast<int>(on.size()),
                static_cast<int>(off.size()));
    // CLIP's MLP activation is x * sigmoid(1.702 x) (no Gelu node): its products take the bias only.
    const bool clip = name.rfind("hf_clip_vision.", 0) == 0;
    EXPECT_EQ(gelu_fused >= 1, !clip);
    EXPECT_EQ(count(on, "Gelu"), count(off, "Gelu") - gelu_fused);   // each MLP's Gelu went into its product
    EXPECT_GE(bias_fused, std::max(2, 2 * gelu_fused));              // and the projections' biases
    // Every product of these has a bias but CLIP's patch embedding, a Conv without one that runs as a
    // bare MatMul (model/fuse_patches.cpp).
    EXPECT_EQ(count(on, "MatMul") + count(on, "Gemm"), clip ? 1 : 0);
    EXPECT_EQ(static_cast<int>(on.size()), static_cast<int>(off.size()) - 2 * gelu_fused - bias_fused);
  }
}

}  // namespace
