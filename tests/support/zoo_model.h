#pragma once
// The zoo of ONNX exports in tests/data/zoo (data_tools/export_zoo.py), prepared as a job with one
// logits output prepares them: for the unit and the GPU tests that check every export.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "model/onnx_loader.h"
#include "model/prepare.h"

namespace sluice::testsupport {

// tests/data/zoo of the checkout SLUICE_ROOT names (a GPU host's copy of the tree), else of this one.
inline std::filesystem::path zoo_dir() {
  const char* root = std::getenv("SLUICE_ROOT");
  return (root && *root ? std::filesystem::path(root) : std::filesystem::path(SLUICE_SOURCE_DIR)) / "tests" / "data" / "zoo";
}

// Export `name` (its file name without .onnx) prepared for batches of 3 of its own sample shape.
inline Graph zoo_model(const std::string& name) {
  Graph g = load_onnx((zoo_dir() / (name + ".onnx")).string());
  PrepareOptions o;
  o.batch_size = 3;
  const Shape in = g.inputs.at(0).shape;
  o.sample_shape = Shape(in.begin() + 1, in.end());
  o.outputs = {{"logits", OutputSpec::Kind::Logits, DType::F32, 0}};
  return prepare_graph(std::move(g), o);
}

}  // namespace sluice::testsupport
