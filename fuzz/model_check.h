#pragma once
#include <string>

namespace sluice::fuzz {

// Loads, prepares and (when small) runs the ONNX model in `bytes`; aborts on a finding.  `heads`
// picks the job's output heads and input type (bits: 1 argmax, 2 softmax, 4 topk, 8 uint8 input,
// 16 normalize, 32 float16 logits).
void check_model(const std::string& bytes, unsigned heads);

}  // namespace sluice::fuzz
