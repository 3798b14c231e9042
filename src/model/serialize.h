#pragma once
// A prepared graph's structure as bytes: nodes, attributes, inputs, outputs and inferred values,
// without the constants' data.  Rank 0 loads and prepares the model once and broadcasts this
// (kilobytes); the weights follow GPU to GPU (cluster/nccl_comm.h), so the model file is read once.
#include <string>

#include "model/graph.h"

namespace sluice {

std::string serialize_structure(const Graph& g);
// The graph of serialize_structure, with no constants (throws Error on malformed bytes).
Graph deserialize_structure(const std::string& bytes);

}  // namespace sluice
