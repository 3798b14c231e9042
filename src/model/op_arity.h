#pragma once
// How many inputs and outputs each op takes, in the canonical spellings of model/canonicalize.h.
// The loader checks every node against this table before any pass reads a node's inputs by
// position, so a crafted model (an Add with no inputs, a Where with one) is an InputError naming
// the node instead of a read past the end of a vector.
#include <cstddef>

#include "model/graph.h"

namespace sluice {

struct OpArity {
  std::size_t min_in, max_in;    // inputs; positions below min_in must be present (non-empty)
  std::size_t min_out, max_out;  // outputs; output 0 must be named
};

constexpr std::size_t kVariadic = static_cast<std::size_t>(-1);

// The table entry of a default-domain op or a sluice op; nullptr for an op Sluice does not know.
const OpArity* op_arity(const std::string& domain, const std::string& op);

// InputError naming the node when its inputs or outputs do not fit its op.  Ops without an entry
// pass (the loader refuses unknown ops by name elsewhere).
void check_node_arity(const Graph& g, const Node& n);

// Before canonicalization: only what canonicalize_graph itself relies on (a named first output).
void check_node_has_output(const Graph& g, const Node& n);

}  // namespace sluice
