// A residual Add after a product's bias, taken into its cuBLASLt step as C with beta = 1
// (ops_gemm.cpp, gemm_lt.h): y = (x W + bias) + x on odd shapes (M, N, K no multiples of 8, rows of
// 106 bytes at 16-bit types) at every precision against a float64 host reference; ConvNeXt's form,
// through the channels-last view of the Transpose back to [N, C, H, W], against the CPU engine;
// what stays separate (a broadcasting residual, one computed after the product, one after a Gelu,
// the switch off); and the zoo's ConvNeXts.  Also the product's algorithm choice under each
// --autotune level (gemm_lt.cpp): what is timed, what a later start reads back, and that the
// timed choice computes what the heuristic's first does.
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

constexpr int64_t kB = 3, kM = 37, kN = 53;

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

// y = (x w + bias) + x, x [B, M, N], w [N, N]; the residual first when `residual_first`.
Graph residual_product(bool residual_first) {
  const Shape ts = {kB, kM, kN};
  GraphBuilder b(ts);
  b.random_f("w", {kN, kN}, 61, -0.3f, 0.3f).random_f("bias", {kN}, 62);
  b.node("MatMul", {"x", "w"}, {f32("p", ts)});
  b.node("Add", {"p", "bias"}, {f32("s", ts)});
  if (residual_first) b.node("Add", {"x", "s"}, {f32("y", ts)});
  else b.node("Add", {"s", "x"}, {f32("y", ts)});
  b.output("y");
  return b.g;
}

Tensor residual_reference(const Graph& g, const Tensor& x, Precision p) {
  auto seen = [&](std::vector<float> v) {
    for (auto& f : v) f = round_to(p, f);
    return v;
  };
  const auto xs = seen(x.as_float()), w = seen(g.constants.at("w").as_float()), bias = seen(g.constants.at("bias").as_float());
  std::vector<float> y(static_cast<std::size_t>(kB * kM * kN));
  for (int64_t r = 0; r < kB * kM; ++r)
    for (int64_t j = 0; j < kN; ++j) {
      double acc = bias[static_cast<std::size_t>(j)];
      for (int64_t q = 0; q < kN; ++q)
        acc += static_cast<double>(xs[static_cast<std::size_t>(r * kN + q)]) * w[static_cast<std::size_t>(q * kN + j)];
      y[static_cast<std::size_t>(r * kN + j)] = static_cast<float>(acc + xs[static_cast<std::size_t>(r * kN + j)]);
    }
  return Tensor::from(DType::F32, {kB, kM, kN}, y);
}

TEST(GemmResidual, TheResidualAddIsTheProductsCAndMatchesTheFloat64ReferenceOnOddShapes) {
  for (const bool first : {false, true})
    for (const Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(str(precision_name(p), first ? " residual first" : ""));
      const Graph g = residual_product(first);
      const auto kinds = step_kinds(g, p);
      EXPECT_EQ(count(kinds, "MatMul+Bias+Residual"), 1);
      EXPECT_EQ(count(kinds, "Add"), 0);
      EXPECT_EQ(count(kinds, "MatMul+Bias"), 0);
      expect_matches_reference(g, p, [&](const Tensor& x) { return std::vector<Tensor>{residual_reference(g, x, p)}; });
    }
}

TEST(GemmResidual, TheSwitchOffKeepsTheAddAStepOfItsOwn) {
  const Graph g = residual_product(false);
  ScopedEnv off("SLUICE_CUDA_GEMM_RESIDUAL", "0");
  const auto kinds = step_kinds(g, Precision::BF16);
  EXPECT_EQ(count(kinds, "MatMul+Bias"), 1);
  EXPECT_EQ(count(kinds, "Add"), 1);
  EXPECT_EQ(count(kinds, "MatMul+Bias+Residual"), 0);
  expect_matches_cpu(g, Precision::BF16);
  ScopedEnv bad("SLUICE_CUDA_GEMM_RESIDUAL", "yes");
  EXPECT_THROW(step_kinds(g, Precision::BF16), UsageError);
}

TEST(GemmResidual, ABroadcastingALaterOrAGeluResidualStaysSeparate) {
  const Shape ts = {kB, kM, kN};
  {
    // The residual [M, N] repeats over the batch: not Y's layout.
    GraphBuilder b(ts);
    b.random_f("w", {kN, kN}, 61, -0.3f, 0.3f).random_f("bias", {kN}, 62);
    b.node("Relu", {"x"}, {f32("r0", ts)});
    b.constant_i("axes", {1}, {0});
    b.node("ReduceMean", {"r0", "axes"}, {f32("r", {1, kM, kN})});
    b.node("MatMul", {"x", "w"}, {f32("p", ts)});
    b.node("Add", {"p", "bias"}, {f32("s", ts)});
    b.node("Add", {"s", "r"}, {f32("y", ts)});
    b.output("y");
    const auto kinds = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul+Bias"), 1);
    EXPECT_EQ(count(kinds, "MatMul+Bias+Residual"), 0);
    expect_matches_cpu(b.g, Precision::BF16);
  }
  {
    // The residual is computed after the product.
    GraphBuilder b(ts);
    b.random_f("w", {kN, kN}, 61, -0.3f, 0.3f).random_f("bias", {kN}, 62);
    b.node("MatMul", {"x", "w"}, {f32("p", ts)});
    b.node("Add", {"p", "bias"}, {f32("s", ts)});
    b.node("Relu", {"x"}, {f32("r", ts)});
    b.node("Add", {"s", "r"}, {f32("y", ts)});
    b.output("y");
    const auto kinds = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul+Bias"), 1);
    EXPECT_EQ(count(kinds, "MatMul+Bias+Residual"), 0);
    expect_matches_cpu(b.g, Precision::BF16);
  }
  {
    // cuBLASLt applies its GELU after C: the Gelu is fused, the residual Add stays.
    GraphBuilder b(ts);
    b.random_f("w", {kN, kN}, 61, -0.3f, 0.3f).random_f("bias", {kN}, 62);
    b.node("MatMul", {"x", "w"}, {f32("p", ts)});
    b.node("Add", {"p", "bias"}, {f32("s", ts)});
    set_string(b.node("Gelu", {"s"}, {f32("h", ts)}), "approximate", "tanh");
    b.node("Add", {"h", "x"}, {f32("y", ts)});
    b.output("y");
    const auto kinds = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul+Bias+Gelu"), 1);
    EXPECT_EQ(count(kinds, "Add"), 1);
    expect_matches_cpu(b.g, Precision::BF16);
  }
}

// ConvNeXt's block: d = depthwise(x) (channels-last), t = permute to [N, H, W, C], fc (x W + b),
// permute back, + d, then a depthwise convolution reading the sum: the permute back is a view and
// the residual Add goes into the product.
Graph convnext_block(int64_t c) {
  const int64_t n = 2, h = 5, w = 7;
  GraphBuilder b({n, c, h, w});
  b.random_f("dw", {c, 1, 3, 3}, 71, -0.5f, 0.5f).random_f("fc", {c, c}, 72, -0.3f, 0.3f).random_f("fb", {c}, 73);
  b.random_f("dw2", {c, 1, 3, 3}, 74, -0.5f, 0.5f);
  Node& conv = b.node("Conv", {"x", "dw"}, {f32("d", {n, c, h, w})});
  set_int(conv, "group", c);
  set_ints(conv, "pads", {1, 1, 1, 1});
  set_ints(b.node("Transpose", {"d"}, {f32("t", {n, h, w, c})}), "perm", {0, 2, 3, 1});
  b.node("MatMul", {"t", "fc"}, {f32("p", {n, h, w, c})});
  b.node("Add", {"p", "fb"}, {f32("s", {n, h, w, c})});
  set_ints(b.node("Transpose", {"s"}, {f32("u", {n, c, h, w})}), "perm", {0, 3, 1, 2});
  b.node("Add", {"u", "d"}, {f32("r", {n, c, h, w})});
  Node& conv2 = b.node("Conv", {"r", "dw2"}, {f32("y", {n, c, h, w})});
  set_int(conv2, "group", c);
  set_ints(conv2, "pads", {1, 1, 1, 1});
  b.output("y");
  return b.g;
}

TEST(GemmResidual, ConvNeXtsResidualThroughTheChannelsLastViewMatchesTheCpuEngine) {
  for (const int64_t c : {int64_t{64}, int64_t{40}}) {
    SCOPED_TRACE(str("C ", c));
    const Graph g = convnext_block(c);
    for (const Precision p : {Precision::BF16, Precision::FP16}) {
      const auto kinds = step_kinds(g, p);
      EXPECT_EQ(count(kinds, "MatMul+Bias+Residual"), 1);
      EXPECT_EQ(count(kinds, "Add"), 0);
      expect_matches_cpu(g, p);
    }
    // Without the layout views the permute back copies: the Add stays.
    ScopedEnv views("SLUICE_CUDA_LAYOUT_VIEWS", "0");
    EXPECT_EQ(count(step_kinds(g, Precision::BF16), "MatMul+Bias+Residual"), 0);
    expect_matches_cpu(g, Precision::BF16);
  }
}

TEST(GemmResidual, TheZoosConvNeXtsTakeEveryBlocksResidualIntoFc2) {
  for (const std::string name : {"tv_convnext.torchscript", "tv_convnext.dynamo", "timm_convnext.torchscript",
                                 "hf_convnext.torchscript"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    const auto on = step_kinds(g, Precision::BF16);
    const auto off = step_kinds_with(g, Precision::BF16, "SLUICE_CUDA_GEMM_RESIDUAL", "0");
    const int fused = count(on, "MatMul+Bias+Residual") + count(on, "Gemm+Bias+Residual");
    std::printf("[ residual ] %s: %d products with their residual; Adds %d (%d without); %d steps (%d)\n", name.c_str(), fused,
                count(on, "Add"), count(off, "Add"), static_cast<int>(on.size()), static_cast<int>(off.size()));
    EXPECT_EQ(count(on, "Add"), count(off, "Add") - fused);
    EXPECT_EQ(static_cast<int>(on.size()), static_cast<int>(off.size()) - fused);
  }
}

// Two products of one shape under each --autotune level: off times nothing and writes the
// heuristic's choices; quick times them again (the first product; the second reads it); a later
// quick or off start reads both; full times again; the results agree with the untimed first choice
// within bf16's rounding (another algorithm may sum in another order).
TEST(GemmTuning, EachAutotuneLevelTimesWhatTheCacheHoldsLessThoroughlyAndAgreesWithTheFirstChoice) {
  SLUICE_REQUIRE_GPU();
  const int64_t rows = 512, n = 768;
  const Shape ts = {2, rows, n};
  GraphBuilder b(ts);
  b.random_f("w1", {n, n}, 81, -0.05f, 0.05f).random_f("w2", {n, n}, 82, -0.05f, 0.05f).random_f("b1", {n}, 83).random_f("b2", {n}, 84);
  b.node("MatMul", {"x", "w1"}, {f32("p1", ts)});
  b.node("Add", {"p1", "b1"}, {f32("s1", ts)});
  b.node("MatMul", {"s1", "w2"}, {f32("p2", ts)});
  b.node("Add", {"p2", "b2"}, {f32("y", ts)});
  b.output("y");
  const Graph g = b.g;
  const fs::path dir = fs::temp_directory_path() / str("sluice-gpu-test-lt-tune-", ::getpid());
  fs::remove_all(dir);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.cache_dir = dir.string();
  o.io_sets = 1;
  auto start = [&](Autotune a) {
    o.autotune = a;
    auto e = create_cuda_engine(g, o);
    const cuda::EngineStats s = *cuda::engine_stats(*e);
    std::printf("[ tuning ] --autotune %s: products timed %d, cached %d\n", autotune_name(a), s.products_measured,
                s.products_cached);
    return std::make_pair(std::move(e), s);
  };
  const Tensor x = random_tensor(g.inputs[0], 9);
  auto [off, s0] = start(Autotune::Off);
  EXPECT_EQ(s0.products_measured, 0);
  EXPECT_EQ(s0.products_cached, 1);   // the second product reads the first's choice
  const Tensor first = cuda::run_forward(*off, x)[0];
  auto [quick, s1] = start(Autotune::Quick);
  EXPECT_LE(s1.products_measured, 1);
  EXPECT_EQ(s1.products_cached, 2 - s1.products_measured);
  auto [again, s2] = start(Autotune::Quick);
  EXPECT_EQ(s2.products_measured, 0);
  EXPECT_EQ(s2.products_cached, 2);
  auto [full, s3] = start(Autotune::Full);
  EXPECT_EQ(s3.products_measured, s1.products_measured);
  auto [after, s4] = start(Autotune::Off);
  EXPECT_EQ(s4.products_measured, 0);
  EXPECT_EQ(s4.products_cached, 2);
  for (auto* e : {quick.get(), full.get(), after.get()}) {
    const Tensor y = cuda::run_forward(*e, x)[0];
    const double err = rel_error(y, first);
    EXPECT_LE(err, 2.0 / 256) << "the timed algorithm computes another result than the first choice";
  }
  EXPECT_EQ(cuda::run_forward(*full, x)[0].bytes, cuda::run_forward(*after, x)[0].bytes);
  // SLUICE_CUDA_GEMM_TUNE=full times under --autotune off too, =0 never and reads nothing.
  fs::remove_all(dir);
  {
    ScopedEnv forced("SLUICE_CUDA_GEMM_TUNE", "full");
    auto [e, s] = start(Autotune::Off);
    EXPECT_EQ(s.products_measured, s1.products_measured);
  }
  {
    ScopedEnv none("SLUICE_CUDA_GEMM_TUNE", "0");
    auto [e, s] = start(Autotune::Full);
    EXPECT_EQ(s.products_measured, 0);
    EXPECT_EQ(s.products_cached, 0);
  }
  {
    ScopedEnv bad("SLUICE_CUDA_GEMM_TUNE", "2");
    EXPECT_THROW(start(Autotune::Quick), UsageError);
  }
  fs::remove_all(dir);
}

}  // namespace
