#pragma once
// Which values of a graph an engine keeps in fp32 when it computes in fp16 or bf16: the residual
// stream of transformer blocks, the way torch's autocast treats it.  Autocast rounds only what a
// matmul or convolution reads; the residual sums, LayerNorm and its statistics stay in fp32.  An
// engine that stores every activation in bf16 instead rounds the running sum at every block, and
// that error grows with depth (ViT-B/16: 1.6x autocast's error; DINOv2, whose LayerScale makes each
// branch small next to the sum: 5x).
//
// The residual stream, as found here:
//   - an Add of two float tensors that both have the sum's shape (one may broadcast over the
//     leading axis only: a position embedding [1, N, C] added to [B, N, C]; a bias vector is no
//     residual) and whose sum no convolution reads (convolutional networks keep their tuned
//     all-low-precision path), which feeds a LayerNormalization (as its input) or another such Add;
//   - a LayerNormalization whose output is itself added into the stream (CLIP's pre-LayerNorm
//     starts the stream with it);
//   - the branch tails of such an Add: up to four Adds or Muls of a constant repeating along the
//     trailing axes (the bias of the branch's last matmul, DINOv2's LayerScale) that end a branch
//     and are read only by the next one in the chain, so the branch is rounded once (the matmul's
//     output), as autocast rounds it.
// Everything else (what matmuls, convolutions, softmax, activations read) stays in the compute type.
#include <set>
#include <string>

#include "model/graph.h"

namespace sluice {

// The names of the values to keep in fp32 (empty for a graph with no transformer pattern).
std::set<std::string> residual_stream(const Graph& g);

// Whether Add node n qualifies as a residual sum by its operand shapes and readers (the first
// rule above, without the requirement of feeding a LayerNormalization).
bool is_residual_add_candidate(const Graph& g, const Node& n);

}  // namespace sluice
