#pragma once
// Type and shape inference, one node at a time (model/ internal; the passes are infer_shapes() and
// infer_known_shapes() in model/passes.h), and the model layer's op table it dispatches through.
#include <string>
#include <vector>

#include "model/graph.h"
#include "model/op_arity.h"

namespace sluice {

// Infers n's outputs (one ValueInfo per n.outputs entry, "" outputs left Undefined) from its inputs'
// types and shapes (nullptr: absent or unknown) and the graph's constants (Reshape's shape, Resize's
// sizes, ...).  Returns false, with the reason in `why`, when something it needs is not known yet;
// throws InputError, naming the node, when the shapes are inconsistent.
bool infer_node(const Graph& g, const Node& n, const std::vector<const ValueInfo*>& inputs,
                std::vector<ValueInfo>& outputs, std::string& why);

// The model layer's op table: one row per op Sluice knows, keyed as op_key() spells it, holding the
// op's input and output counts (what the loader checks, model/op_arity.h) beside its shape rule (what
// infer_node dispatches to), the way ONNX's OpSchema holds both.  These ops, less the fold-only ones,
// are what the loader accepts (supported_ops, model/prepare.h); every op an engine registers has a
// row and every row a kernel (tests/unit/test_op_registry.cpp).
std::vector<std::string> shape_rule_ops();  // the keys, sorted
const OpArity* shape_rule_arity(const std::string& key);  // nullptr: no row

}  // namespace sluice
