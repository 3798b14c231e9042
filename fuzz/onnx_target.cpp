// Fuzz target (a): the bytes are an ONNX model (model_check.cpp says what happens to it); the last
// byte also picks the job's output heads, so the fuzzer reaches argmax, softmax and top-k too.
#include <cstdint>
#include <string>

#include "model_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::check_model(std::string(reinterpret_cast<const char*>(data), size), size ? data[size - 1] : 0);
  return 0;
}
