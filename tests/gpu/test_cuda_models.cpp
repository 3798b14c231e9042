// Small ResNet- and DeepLab-style networks built in code: chains of FusedConv (bias, residual,
// ReLU), pooling, a classifier head, dilated convolutions, Concat, bilinear upsampling and the
// argmax head, run by the CUDA engine at every precision and compared with the CPU engine.
#include <cstdlib>

#include "gpu_test_util.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "test_models.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class Models : public ::testing::TestWithParam<Precision> {};

TEST_P(Models, ResNetStyleFusedConvChainMatchesCpu) {
  expect_matches_cpu(resnet_like(2, 32), GetParam());
}

TEST_P(Models, DeepLabStyleSegmentationLogitsMatchCpu) {
  expect_matches_cpu(deeplab_like(2, 32, false), GetParam());
}

std::string precision_param(const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); }

INSTANTIATE_TEST_SUITE_P(Precisions, Models,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         precision_param);

TEST(ModelsIndices, DeepLabStyleArgMaxAgreesWithCpu) {
  // Class maps at fp32 must match exactly; at bf16 nearly everywhere (near-ties may flip).
  expect_matches_cpu(deeplab_like(2, 32, true), Precision::FP32);
  CompareOptions c;
  c.exact_ints = false;
  expect_matches_cpu(deeplab_like(2, 32, true), Precision::BF16, c);
}

}  // namespace

// ---- an exported model given on the command line ----------------------------------------------


namespace {

// SLUICE_GPU_TEST_MODEL=model.onnx SLUICE_GPU_TEST_SHAPE=3,224,224: prepare the model at batch 2,
// then compare the CUDA engine with the CPU engine at each precision (or, in CPU-check mode
// without a GPU, check that the CUDA engine can lower every node).
TEST(ExportedModel, MatchesCpuAtEveryPrecision) {
  const char* path = std::getenv("SLUICE_GPU_TEST_MODEL");
  if (!path) GTEST_SKIP() << "SLUICE_GPU_TEST_MODEL is not set";
  const char* shape = std::getenv("SLUICE_GPU_TEST_SHAPE");
  PrepareOptions po;
  po.batch_size = 2;
  std::string s = shape ? shape : "3,224,224";
  for (std::size_t at = 0; at < s.size();) {
    const std::size_t comma = s.find(',', at);
    po.sample_shape.push_back(std::stoll(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  const Graph g = prepare_graph(load_onnx(path), po);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    CompareOptions c;
    c.tol = p == Precision::FP32 ? 1e-4 : (p == Precision::TF32 ? 2e-3 : 5e-2);   // deep nets: looser than single ops
    expect_matches_cpu(g, p, c);
  }
}

}  // namespace
