#pragma once
// Type and shape inference, one node at a time (model/ internal; the passes are infer_shapes() and
// infer_known_shapes() in model/passes.h).
#include <string>
#include <vector>

#include "model/graph.h"

namespace sluice {

// Infers n's outputs (one ValueInfo per n.outputs entry, "" outputs left Undefined) from its inputs'
// types and shapes (nullptr: absent or unknown) and the graph's constants (Reshape's shape, Resize's
// sizes, ...).  Returns false, with the reason in `why`, when something it needs is not known yet;
// throws InputError, naming the node, when the shapes are inconsistent.
bool infer_node(const Graph& g, const Node& n, const std::vector<const ValueInfo*>& inputs,
                std::vector<ValueInfo>& outputs, std::string& why);

}  // namespace sluice
