// Channels-last 1x1 convolutions as one cuBLASLt product (ops_conv.cpp, ConvGemm): the product's
// result against the CPU engine and against cuDNN's for every bias / residual / ReLU combination,
// odd channel counts (3, 24, 1000: rows of 6 and 48 bytes, not 16-byte multiples), batch 1 and odd
// spatial sizes, at fp16, bf16 and tf32 (where the engine runs channels-last); the path each
// SLUICE_CUDA_CONV_GEMM setting takes; and a warm cache answering the start-up choice untimed.
#include <unistd.h>

#include <filesystem>

#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;
namespace fs = std::filesystem;

namespace {

struct Case {
  int64_t n, cin, cout, h, w;
  bool bias, residual, relu;
};

std::string name_of(const Case& c) {
  return str(c.n, "x", c.cin, "x", c.h, "x", c.w, " -> ", c.cout, c.bias ? " bias" : "", c.residual ? " residual" : "",
             c.relu ? " relu" : "");
}

// x -> FusedConv 1x1 (or a plain Conv without bias, residual and ReLU) -> y; the residual comes from
// a 3x3 convolution of x (cuDNN's, whatever the switch: only the 1x1 one is the product).
Graph one_by_one(const Case& c) {
  GraphBuilder b({c.n, c.cin, c.h, c.w});
  b.random_f("W", {c.cout, c.cin, 1, 1}, 21, -0.5f, 0.5f);
  std::vector<std::string> ins = {"x", "W"};
  if (c.bias || c.residual || c.relu) {
    b.random_f("B", {c.cout}, 22);
    ins.push_back(c.bias ? "B" : "");
  }
  if (c.residual) {
    b.random_f("W3", {c.cout, c.cin, 3, 3}, 23, -0.3f, 0.3f);
    Node& r = b.node("Conv", {"x", "W3"}, {f32("z", {c.n, c.cout, c.h, c.w})});
    set_ints(r, "pads", {1, 1, 1, 1});
    ins.push_back("z");
  }
  const bool plain = !c.bias && !c.residual && !c.relu;
  Node& n = b.node(plain ? "Conv" : "FusedConv", ins, {f32("y", {c.n, c.cout, c.h, c.w})}, plain ? "" : "sluice");
  if (c.relu) set_string(n, "activation", "Relu");
  b.output("y");
  return b.g;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int m = 0; m < 8; ++m) v.push_back({2, 16, 32, 7, 9, (m & 1) != 0, (m & 2) != 0, (m & 4) != 0});
  v.push_back({1, 3, 24, 5, 7, true, false, true});      // batch 1, 3 input channels
  v.push_back({1, 24, 1000, 3, 5, true, true, false});   // 1000 outputs
  v.push_back({2, 1000, 3, 4, 3, true, true, true});     // 3 outputs, k = 1000
  v.push_back({1, 24, 24, 1, 1, false, false, false});   // one position
  return v;
}

int gemm_convolutions(const Graph& g, Precision p, const char* mode) {
  ScopedEnv env("SLUICE_CUDA_CONV_GEMM", mode);
  EngineOptions o;
  o.precision = p;
  o.io_sets = 1;
  auto e = create_cuda_engine(g, o);
  return cuda::engine_stats(*e)->gemm_convolutions;
}

class ConvGemm : public ::testing::TestWithParam<Precision> {};

TEST_P(ConvGemm, ForcedProductMatchesCpu) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    ScopedEnv env("SLUICE_CUDA_CONV_GEMM", "force");
    CompareOptions o;
    o.tol = tolerance(GetParam()) * (c.cin >= 1000 ? 2 : 1);   // tf32's 10-bit products over k = 1000
    expect_matches_cpu(one_by_one(c), GetParam(), o);
  }
}

TEST_P(ConvGemm, ForcedProductMatchesCudnn) {
  SLUICE_REQUIRE_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    const Graph g = one_by_one(c);
    const Tensor x = random_tensor(g.inputs.at(0), 5);
    EngineOptions o;
    o.precision = GetParam();
    o.io_sets = 1;
    std::vector<Tensor> gemm, cudnn;
    {
      ScopedEnv env("SLUICE_CUDA_CONV_GEMM", "force");
      gemm = run_cuda(g, x, o);
    }
    {
      ScopedEnv env("SLUICE_CUDA_CONV_GEMM", "0");
      cudnn = run_cuda(g, x, o);
    }
    ASSERT_EQ(gemm.size(), 1u);
    ASSERT_EQ(cudnn.size(), 1u);
    // Both accumulate in fp32 and round once: a few units of the last place of the type apart.
    EXPECT_LE(rel_error(gemm[0], cudnn[0]), 2 * tolerance(GetParam())) << "the product against cuDNN";
  }
}

TEST_P(ConvGemm, SwitchChoosesThePath) {
  SLUICE_REQUIRE_GPU();
  const Graph g = one_by_one({2, 16, 32, 7, 9, true, true, true});
  EXPECT_EQ(gemm_convolutions(g, GetParam(), "force"), 1);   // the 1x1 one; the 3x3 residual stays on cuDNN
  EXPECT_EQ(gemm_convolutions(g, GetParam(), "0"), 0);
  const int chosen = gemm_convolutions(g, GetParam(), nullptr);   // the default: the faster one
  EXPECT_GE(chosen, 0);
  EXPECT_LE(chosen, 1);
  // Strided: never the product.
  GraphBuilder b({2, 16, 8, 8});
  b.random_f("W", {32, 16, 1, 1}, 21);
  b.random_f("B", {32}, 22);
  Node& n = b.node("FusedConv", {"x", "W", "B"}, {f32("y", {2, 32, 4, 4})}, "sluice");
  set_ints(n, "strides", {2, 2});
  set_string(n, "activation", "Relu");
  b.output("y");
  EXPECT_EQ(gemm_convolutions(b.g, GetParam(), "force"), 0) << "a 1x1 convolution of stride 2";
}

TEST_P(ConvGemm, DefaultChoiceMatchesCpuAndAWarmCacheMeasuresNothing) {
  SLUICE_REQUIRE_GPU();
  const Graph g = one_by_one({4, 64, 256, 14, 14, true, true, true});
  expect_matches_cpu(g, GetParam());
  const fs::path dir = fs::temp_directory_path() / str("sluice-gpu-test-convgemm-", ::getpid());
  fs::remove_all(dir);
  EngineOptions o;
  o.precision = GetParam();
  o.io_sets = 1;
  o.cache_dir = dir.string();
  o.autotune = Autotune::Quick;
  auto cold = create_cuda_engine(g, o);
  const int path = cuda::engine_stats(*cold)->gemm_convolutions;
  auto warm = create_cuda_engine(g, o);
  EXPECT_EQ(cuda::engine_stats(*warm)->algos_measured, 0) << "the warm cache must answer every convolution";
  EXPECT_EQ(cuda::engine_stats(*warm)->gemm_convolutions, path) << "the cached choice is the measured one";
  fs::remove_all(dir);
}

TEST(ConvGemmSwitch, RejectsAnUnknownValue) {
  SLUICE_REQUIRE_GPU();
  ScopedEnv env("SLUICE_CUDA_CONV_GEMM", "maybe");
  EngineOptions o;
  o.precision = Precision::BF16;
  EXPECT_ANY_THROW(create_cuda_engine(one_by_one({1, 8, 8, 4, 4, true, false, true}), o));
}

INSTANTIATE_TEST_SUITE_P(Precisions, ConvGemm, ::testing::Values(Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
