// The fp32 residual stream of the CUDA engine under fp16/bf16 (engine/residual_stream.h): a chain of
// pre-LayerNorm blocks at bf16 against a float64 host reference, once as built (fp32 sums, each Add
// fused with the LayerNormalization that reads it) and once with every activation in bf16
// (SLUICE_CUDA_RESIDUAL_FP32=0), which the same bound rejects; the steps the builder makes for it
// and for the zoo's convolutional networks (unchanged); LayerNormalization's Mean and InvStdDev
// outputs, over short rows and rows longer than registers hold; a residual Add past 2^31 elements.
// The chain runs both instantiations of kernels_residual.cu: the typed one (each block's sum) and
// the type-coded one (h0, whose position embedding repeats inside the row loop), as do the two
// LayerNorm row lengths and the two sides of 2^31.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/kernels.h"
#include "gpu_test_util.h"
#include "support/zoo_model.h"

using namespace sluice;
using namespace sluice::gputest;
using testsupport::zoo_dir;
using testsupport::zoo_model;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kB = 2, kN = 50, kC = 192, kBlocks = 12;
const Shape kTokens = {kB, kN, kC};

// h0 = x + pos; h[k+1] = h[k] + (LN(h[k]) W[k]) * gamma[k] (LayerScale, small gains as DINOv2 has
// them, so each branch is small next to the running sum); y = LN(h[12]).
Graph chain() {
  GraphBuilder b(kTokens);
  b.random_f("pos", {1, kN, kC}, 100).random_f("g", {kC}, 101, 0.5f, 1.5f).random_f("beta", {kC}, 102, -0.5f, 0.5f);
  b.node("Add", {"x", "pos"}, {f32("h0", kTokens)});
  for (int64_t k = 0; k < kBlocks; ++k) {
    const std::string s = std::to_string(k), h = "h" + s;
    const float w = 1.f / std::sqrt(static_cast<float>(kC));
    b.random_f("w" + s, {kC, kC}, 200 + static_cast<uint32_t>(k), -w, w);
    b.random_f("ls" + s, {kC}, 300 + static_cast<uint32_t>(k), 0.02f, 0.1f);
    Node& ln = b.node("LayerNormalization", {h, "g", "beta"}, {f32("n" + s, kTokens)});
    set_float(ln, "epsilon", 1e-6f);
    b.node("MatMul", {"n" + s, "w" + s}, {f32("m" + s, kTokens)});
    b.node("Mul", {"m" + s, "ls" + s}, {f32("s" + s, kTokens)});
    b.node("Add", {h, "s" + s}, {f32("h" + std::to_string(k + 1), kTokens)});
  }
  Node& ln = b.node("LayerNormalization", {"h" + std::to_string(kBlocks), "g", "beta"}, {f32("y", kTokens)});
  set_float(ln, "epsilon", 1e-6f);
  b.output("y");
  return b.g;
}

// Rows of `cols` normalized in double.
void layer_norm(const std::vector<double>& h, std::vector<double>& out, int64_t cols, double eps, const std::vector<float>& g,
                const std::vector<float>& be) {
  const std::size_t c = static_cast<std::size_t>(cols);
  out.resize(h.size());
  for (std::size_t r = 0; r < h.size() / c; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < c; ++j) mean += h[r * c + j];
    mean /= static_cast<double>(c);
    for (std::size_t j = 0; j < c; ++j) var += (h[r * c + j] - mean) * (h[r * c + j] - mean);
    var /= static_cast<double>(c);
    for (std::size_t j = 0; j < c; ++j) out[r * c + j] = (h[r * c + j] - mean) / std::sqrt(var + eps) * g[j] + be[j];
  }
}

// The chain in float64 from the input and constants as the engine holds them: the input, the
// matmul weights and the LayerScale gains rounded to the compute type, the position embedding
// (added into the fp32 stream) and the LayerNorm scale and bias (float tables) as they are; what
// remains is the rounding of the activations.
Tensor chain_reference(const Graph& g, const Tensor& x, Precision p) {
  auto seen = [&](const std::vector<float>& v) {
    std::vector<float> r(v);
    for (auto& f : r) f = round_to(p, f);
    return r;
  };
  auto constant = [&](const std::string& name) { return seen(g.constants.at(name).as_float()); };
  auto exact = [&](const std::string& name) { return g.constants.at(name).as_float(); };
  const std::vector<float> xs = seen(x.as_float()), pos = exact("pos"), gm = exact("g"), be = exact("beta");
  const std::size_t n = xs.size(), c = static_cast<std::size_t>(kC), per = static_cast<std::size_t>(kN * kC);
  std::vector<double> h(n), norm;
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<double>(xs[i]) + pos[i % per];
  for (int64_t k = 0; k < kBlocks; ++k) {
    const std::string s = std::to_string(k);
    const std::vector<float> w = constant("w" + s), ls = constant("ls" + s);
    layer_norm(h, norm, kC, 1e-6, gm, be);
    for (std::size_t r = 0; r < n / c; ++r)
      for (std::size_t j = 0; j < c; ++j) {
        double acc = 0;
        for (std::size_t q = 0; q < c; ++q) acc += norm[r * c + q] * w[q * c + j];
        h[r * c + j] += acc * ls[j];
      }
  }
  layer_norm(h, norm, kC, 1e-6, gm, be);
  std::vector<float> y(norm.begin(), norm.end());
  return Tensor::from(DType::F32, kTokens, y);
}

}  // namespace

TEST(ResidualStream, EachResidualAddOfTheChainIsOneStepWithTheLayerNormThatReadsIt) {
  const Graph g = chain();
  for (const Precision p : {Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    cuda::Builder b(g, p);
    b.lower_all();
    int fused = 0, converts = 0;
    for (const auto& s : b.steps) {
      fused += s->kind == "AddLayerNorm";
      converts += s->kind == "Convert";
    }
    EXPECT_EQ(fused, kBlocks + 1);   // h0 and each block's sum, with the LayerNorm after it
    EXPECT_LE(converts, 2);          // the input and the output: nothing reads the fp32 sums but the fused steps
    for (const auto& s : b.slots)
      if (s.name.size() >= 2 && s.name[0] == 'h' && std::isdigit(static_cast<unsigned char>(s.name[1])))
        EXPECT_EQ(s.dtype, DType::F32) << s.name;
  }
  for (const Precision p : {Precision::FP32, Precision::TF32}) {
    const auto kinds = step_kinds(g, p);
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "AddLayerNorm"), 0) << precision_name(p);
  }
}

TEST(ResidualStream, TheZoosConvolutionalNetworksLowerToTheSameStepsWithAndWithoutIt) {
  for (const std::string name : {"hf_resnet.dynamo", "tv_deeplab_head.dynamo", "tv_regnet.dynamo", "tv_efficientnet.dynamo"}) {
    SCOPED_TRACE(name);
    const Graph g = zoo_model(name);
    const auto on = step_kinds(g, Precision::BF16);
    ScopedEnv off("SLUICE_CUDA_RESIDUAL_FP32", "0");
    EXPECT_EQ(on, step_kinds(g, Precision::BF16));
  }
}

TEST(ResidualStream, ABf16LayerNormResidualChainMeetsABoundThatAllBf16StorageMisses) {
  SLUICE_REQUIRE_GPU();
  const Graph g = chain();
  const Tensor x = random_tensor(g.inputs.at(0), 7);
  const Tensor ref = chain_reference(g, x, Precision::BF16);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.io_sets = 1;
  // A host simulation of both storage policies on this chain: fp32 sums 2.3e-3 to 3.6e-3 (the
  // final bf16 rounding of the output is most of it), every sum in bf16 1.0e-2 to 1.4e-2.
  const double bound = 6e-3;
  const double mixed = rel_error(run_cuda(g, x, o).at(0), ref);
  EXPECT_LE(mixed, bound) << "fp32 residual stream: max|diff|/max|ref| = " << mixed;
  ScopedEnv all_bf16("SLUICE_CUDA_RESIDUAL_FP32", "0");
  const double narrow = rel_error(run_cuda(g, x, o).at(0), ref);
  EXPECT_GT(narrow, bound) << "every activation in bf16: max|diff|/max|ref| = " << narrow;
  std::printf("[ residual ] bf16 chain of %d blocks: fp32 stream %.2e, all bf16 %.2e\n", static_cast<int>(kBlocks), mixed, narrow);
}

// LayerNormalization over rows of `cols` with its Mean and InvStdDev outputs against the definition
// in double.
void expect_layer_norm_matches_definition(Precision p, int64_t cols) {
  const Shape xs = {3, 4, cols}, stat = {3, 4, 1};
  const std::size_t rows = 12, c = static_cast<std::size_t>(cols);
  GraphBuilder b(xs);
  b.random_f("g", {cols}, 11, 0.5f, 1.5f).random_f("bias", {cols}, 12);
  Node& n = b.node("LayerNormalization", {"x", "g", "bias"}, {f32("y", xs), f32("mean", stat), f32("inv", stat)});
  set_float(n, "epsilon", 1e-4f);
  b.output("y").output("mean").output("inv");
  const Graph g = b.g;
  CompareOptions o;
  o.lo = 0.5f;   // a mean away from zero, so its relative error means something
  o.hi = 2.f;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    std::vector<float> v = x.as_float();
    for (auto& f : v) f = round_to(p, f);
    const auto gm = g.constants.at("g").as_float(), bs = g.constants.at("bias").as_float();
    std::vector<float> y(v.size()), mean(rows), inv(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      double m = 0, var = 0;
      for (std::size_t j = 0; j < c; ++j) m += v[r * c + j];
      m /= static_cast<double>(c);
      for (std::size_t j = 0; j < c; ++j) var += (v[r * c + j] - m) * (v[r * c + j] - m);
      const double is = 1 / std::sqrt(var / static_cast<double>(c) + 1e-4);
      for (std::size_t j = 0; j < c; ++j) y[r * c + j] = static_cast<float>((v[r * c + j] - m) * is * gm[j] + bs[j]);
      mean[r] = static_cast<float>(m);
      inv[r] = static_cast<float>(is);
    }
    return std::vector<Tensor>{Tensor::from(DType::F32, xs, y), Tensor::from(DType::F32, stat, mean),
                               Tensor::from(DType::F32, stat, inv)};
  }, o);
}

class LayerNormStatistics : public ::testing::TestWithParam<Precision> {};

TEST_P(LayerNormStatistics, MeanAndInvStdDevOutputsMatchTheDefinition) { expect_layer_norm_matches_definition(GetParam(), 40); }

// Rows of more than the 32 * 32 values a warp keeps in registers: read again for each pass.
TEST_P(LayerNormStatistics, RowsLongerThanAWarpHoldsInRegistersMatchTheDefinition) {
  expect_layer_norm_matches_definition(GetParam(), 1500);
}

INSTANTIATE_TEST_SUITE_P(Precisions, LayerNormStatistics,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });

// 2^31 elements and more take 64-bit indices: the elements past 2^31, which a 32-bit index would
// never reach, get their sum too.
TEST(ResidualStream, AResidualAddOfMoreThan2To31ElementsWritesItsLastElements) {
  SLUICE_REQUIRE_GPU();
  const int64_t n = (int64_t{1} << 31) + 4096, period = 64;
  cuda::DeviceBuffer a(static_cast<std::size_t>(n) * 2), b(period * sizeof(float)), y(static_cast<std::size_t>(n) * 2);
  std::vector<float> bh(period);
  for (int64_t i = 0; i < period; ++i) bh[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i + 1);
  CUDA_CHECK(cudaMemcpy(b.get(), bh.data(), bh.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(a.get(), 0, a.bytes()));     // bf16 zeros
  CUDA_CHECK(cudaMemset(y.get(), 0xff, y.bytes()));  // bf16 NaN where nothing is written
  cuda::residual_add({a.get(), DType::BF16, n}, {b.get(), DType::F32, period}, y.get(), DType::BF16, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  // bf16 holds the multiples of 0.25 up to 16 exactly: y[i] = b[i % period].
  for (const int64_t from : {int64_t{0}, (int64_t{1} << 31) - 2048, n - 2048}) {
    std::vector<uint16_t> got(2048);
    CUDA_CHECK(cudaMemcpy(got.data(), y.as<uint16_t>() + from, got.size() * 2, cudaMemcpyDeviceToHost));
    for (std::size_t k = 0; k < got.size(); ++k) {
      const int64_t i = from + static_cast<int64_t>(k);
      uint32_t bits = static_cast<uint32_t>(got[k]) << 16;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      ASSERT_EQ(v, bh[static_cast<std::size_t>(i % period)]) << "element " << i;
    }
  }
}

TEST(ResidualStream, EveryZooExportLowersAtBf16AndTheVisionTransformersFuseTheirResidualAdds) {
  const fs::path zoo = zoo_dir();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(zoo))
    if (e.path().extension() == ".onnx") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 30u);
  std::size_t lowered = 0;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    Graph g;
    try {
      g = zoo_model(name);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    std::vector<std::string> kinds;
    ASSERT_NO_THROW(kinds = step_kinds(g, Precision::BF16));
    ++lowered;
    const auto fused = std::count(kinds.begin(), kinds.end(), "AddLayerNorm");
    for (const char* vit : {"tv_vit.", "timm_deit.", "timm_dinov2.", "hf_vit.", "hf_clip_vision.", "hf_dinov2."})
      if (name.rfind(vit, 0) == 0) {
        EXPECT_GE(fused, 3) << "fused residual steps";
        // The fp32 sums are read by the fused steps, not converted for other readers along the way;
        // CLIP's last hidden state is a sum the pooler slices: converted once (per sub-batch of 1
        // in the dynamo export, which runs as 3).
        std::vector<std::string> off;
        {
          ScopedEnv all_bf16("SLUICE_CUDA_RESIDUAL_FP32", "0");
          // Without the stream a residual Add that no LayerNorm reads would go into its product
          // (ops_gemm.cpp); kept a step here so that the counts compare the stream alone.
          ScopedEnv separate("SLUICE_CUDA_GEMM_RESIDUAL", "0");
          off = step_kinds(g, Precision::BF16);
        }
        const auto converts = std::count(kinds.begin(), kinds.end(), "Convert");
        const auto converts_off = std::count(off.begin(), off.end(), "Convert");
        std::printf("[ residual ] %s: %d fused, %d steps (%d without the stream), %d converts (%d)\n", name.c_str(),
                    static_cast<int>(fused), static_cast<int>(kinds.size()), static_cast<int>(off.size()),
                    static_cast<int>(converts), static_cast<int>(converts_off));
        const bool clip = name.rfind("hf_clip_vision.", 0) == 0;
        EXPECT_LE(converts, converts_off + (clip ? 3 : 0));
        EXPECT_LT(kinds.size(), off.size());
      }
  }
  std::printf("[ residual ] %zu zoo exports lowered at bf16\n", lowered);
}
