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

}  // namespace sluice
