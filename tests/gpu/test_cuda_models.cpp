// Small ResNet- and DeepLab-style networks built in code: chains of FusedConv (bias, residual,
// ReLU), pooling, a classifier head, dilated convolutions, Concat, bilinear upsampling and the
// argmax head, run by the CUDA engine at every precision and compared with the CPU engine.
#include "gpu_test_util.h"
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
