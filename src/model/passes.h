#pragma once
// The graph passes that prepare_graph (model/prepare.h) runs, in its order, from a loaded graph to
// the one an engine runs (model/ internal; tests call them one by one).  Loading has already
// rewritten every op into one spelling (canonicalize_graph, model/canonicalize.h); a static-batch
// model is taken to the job's batch by adapt_batch (model/batch_adapt.h) before the last inference.
#include "model/graph.h"

namespace sluice {

// Constants and shapes, alternating until a round changes nothing (model/fold_constants.cpp):
// folding a Shape node needs its input's static shape, and folded values let inference reach further.
void fold_constants(Graph& g);
// Fills g.values with every tensor whose type and static shape can be known now, and skips the rest.
void infer_known_shapes(Graph& g);
// Fills g.values for every tensor; throws InputError on an unknown or inconsistent shape.
void infer_shapes(Graph& g);

// Simplification and fusion (model/fuse.cpp, model/fuse_norm.cpp).
void remove_identities(Graph& g);
void fold_batchnorm(Graph& g);
void fuse_convolutions(Graph& g);
void fuse_transformer_patterns(Graph& g);  // LayerNormalization and Gelu from their element-wise spellings
void eliminate_dead_nodes(Graph& g);

}  // namespace sluice
