#pragma once
// Type and shape inference, one node at a time (model/ internal; the pass is infer_shapes() in
// prepare.h).
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

// Best-effort inference: fills g.values with every tensor whose type and static shape can be known
// now, and skips the rest (used between rounds of constant folding).
void infer_known_shapes(Graph& g);

}  // namespace sluice
