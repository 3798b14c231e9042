#pragma once
// Reading .onnx files (protobuf) into the graph IR.
#include <string>

#include "model/graph.h"

namespace sluice {

// Loads a model file.  External data (the dynamo exporter's side file) resolves relative to the
// model's folder and may not escape it.  Corrupt files, unsupported opsets or ops, and dynamic
// shapes that cannot be fixed by the job's input shape end in an InputError that names the file and
// the node.
Graph load_onnx(const std::string& path);

// The same from a model already in memory: `path` names it in messages, and external data resolves
// against its folder (the fuzz target feeds bytes straight from the fuzzer).
Graph load_onnx_bytes(const std::string& bytes, const std::string& path);

// What a model file holds, read without judging its ops (for `sluice check`, which reports every
// op an engine lacks instead of stopping at the first refusal).
struct ModelOps {
  int64_t opset = 0;                     // default domain
  std::vector<ValueInfo> inputs;         // runtime inputs (initializers left out)
  struct NodeRef {
    std::string op;                      // "Conv", "com.microsoft::FusedGemm"
    std::string name;
  };
  std::vector<NodeRef> nodes;            // in file order
};
ModelOps read_model_ops(const std::string& path);

}  // namespace sluice
