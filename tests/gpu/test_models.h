#pragma once
// Small networks with the structure of the models Sluice runs, for the GPU tests.
#include "gpu_test_util.h"

namespace sluice::gputest {

// uint8 image [batch, 3, size, size] -> Normalize -> stem conv 7x7/2 -> maxpool -> two bottlenecks
// (the first with a projection shortcut) -> global pool -> Gemm -> logits [batch, 10].
Graph resnet_like(int64_t batch, int64_t size);

// float image [batch, 3, size, size] -> two strided convs -> dilated branches concatenated ->
// 1x1 classifier (5 classes) -> bilinear x4 upsampling -> logits, or ArgMaxCast (uint8) when
// `argmax` is set.
Graph deeplab_like(int64_t batch, int64_t size, bool argmax);

}  // namespace sluice::gputest
