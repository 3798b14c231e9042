#pragma once
// How many inputs and outputs each op takes, in the canonical spellings of model/canonicalize.h.
// The loader checks every node against these counts before any pass reads a node's inputs by
// position, so a crafted model (an Add with no inputs, a Where with one) is an InputError naming
// the node instead of a read past the end of a vector.  The counts are a column of the model
// layer's op table, each op's row beside its shape rule (model/shape_inference.cpp).
#include <cstddef>
#include <string>

#include "model/graph.h"

namespace sluice {

struct OpArity {
  std::size_t min_in, max_in;    // inputs; positions below min_in must be present (non-empty)
  std::size_t min_out, max_out;  // outputs; output 0 must be named
};

constexpr std::size_t kVariadic = static_cast<std::size_t>(-1);

// An op's key in the op tables of the model layer and the engines: "Conv" for the default domain
// ("" or "ai.onnx"), "sluice.FusedConv" for the others.
std::string op_key(const std::string& domain, const std::string& op);

// The counts of an op in the op table; nullptr for an op Sluice does not know (any other domain's).
const OpArity* op_arity(const std::string& domain, const std::string& op);

// InputError naming the node when its inputs or outputs do not fit its op.  Ops without an entry
// pass (the loader refuses unknown ops by name elsewhere).
void check_node_arity(const Graph& g, const Node& n);

// Before canonicalization: only what canonicalize_graph itself relies on (a named first output).
void check_node_has_output(const Graph& g, const Node& n);

}  // namespace sluice
