#pragma once
// If nodes whose condition is a constant once the input shape is fixed (an exporter's branch on a
// shape, a flag, a size check) are replaced by the branch they take (model/ internal; run by
// fold_constants between its rounds).  An If whose condition depends on the input data stays, and
// prepare refuses it (check_ops): the engines run one fixed graph.
#include "model/graph.h"

namespace sluice {

// Inlines the taken branch of every If with a constant condition: its constants and nodes join the
// graph under names prefixed "<If name>/", the outer tensors it reads under the names of the If's
// inputs 1.. (the loader lists them there, and in attribute "outer_names" as the branches name
// them), and an Identity per If output reads the branch's output.  Returns how many Ifs were folded.
int fold_constant_ifs(Graph& g);

}  // namespace sluice
