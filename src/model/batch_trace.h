#pragma once
// Where the input's batch axis goes, tensor by tensor: one forward pass over a graph with static
// shapes, with one rule per op saying how the op moves the batch axis and when it would mix samples
// (model/ internal).  Two questions are asked of it:
//
//   Check         (model/batch_axis.h) a prepared graph at the job's batch: does every tensor keep
//                 each row depending on its own sample only?  A data tensor also knows which samples
//                 its batch axis holds (rows 0.. hold samples first..): a Slice along the batch takes
//                 a window of them and a Concat along the batch may join consecutive windows again,
//                 which is how a fixed-batch model runs as sub-batches without mixing samples.
//   Respecialize  (model/batch_adapt.h) a static-batch graph at the model's batch b0: is every op
//                 batch-equivariant along the axis its input carries the batch on, i.e. op(samples
//                 stacked on that axis) == the op on each sample, stacked, at any batch?  That is
//                 stricter (no windows, every operand without the batch broadcasts over it), and the
//                 constants that carry b0 (Reshape targets, Resize sizes, ...) are collected as
//                 rewrites to the new batch.  The first node that fails ends the trace.
#include <string>
#include <unordered_map>
#include <vector>

#include "model/graph.h"

namespace sluice {

enum class BatchQuestion { Check, Respecialize };

constexpr int kNoBatch = -1;  // independent of the input (weights, shape values)
constexpr int kMixed = -2;    // rows mixed or the batch axis dropped (Check; the reason is kept)
constexpr int kSingle = -3;   // computed from one sample only (a sub-batch of one), any layout (Check)

// A batch axis may hold the samples merged with other axes, as exporters write attention heads and
// windows ([S, B x H, D], [B x windows, N, C]): along it, index (o x samples + b) x inner + j holds
// sample b, so each sample's rows are `inner` consecutive ones, repeated `outer` times.  Ops that
// keep rows apart along such an axis keep the samples apart; an output must have it unmerged.
struct BatchState {
  int axis = kNoBatch;  // >= 0: the axis that holds the batch, one row per sample
  std::string why;      // kMixed: the node and what it did; merged: the node that merged the batch
  int64_t first = 0;    // a data tensor: the sample its batch axis' row 0 holds
  int64_t outer = 1;    // the batch axis' length is outer x samples x inner
  int64_t inner = 1;
  bool merged() const { return outer != 1 || inner != 1; }
};

// A constant input of a node to replace so that the graph computes at the new batch (Respecialize).
// With `tile`, the input stays and a Tile by `value` (int64 repeats: the new batch on one axis, 1
// elsewhere) goes in front of the node: an operand that does not depend on the input, holding one
// sample's value where the node's other operands hold each sample's (a query computed from learned
// embeddings alone, DETR's decoder and SigLIP's pooling probe), repeated for every sample.
struct BatchRewrite {
  std::size_t node;
  std::size_t input;
  Tensor value;
  bool tile = false;
};

struct BatchTrace {
  std::unordered_map<std::string, BatchState> states;  // every tensor computed from the input
  std::vector<BatchRewrite> rewrites;                  // Respecialize
  std::string why;  // Respecialize: the first node that is not equivariant, and why; empty when all are
  BatchState of(const Graph& g, const std::string& name) const;
};

// Traces `g` from its first input's axis 0.  Respecialize needs the model's batch `b0` and the new
// `batch` (for the rewrites); Check ignores them.
BatchTrace trace_batch(const Graph& g, BatchQuestion q, int64_t b0 = 0, int64_t batch = 0);

}  // namespace sluice
