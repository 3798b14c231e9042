#pragma once
// Static-batch models at any batch size.  A model exported the usual way
// (`torch.onnx.export(m, torch.randn(1, 3, H, W), path)`) has its batch fixed in the input shape and
// in folded constants (Reshape targets such as [1, -1], Resize sizes [1, C, H, W], ...).  prepare_graph
// binds such a model at its own batch, folds it, and then calls adapt_batch to reach the job's batch:
//
//   re-specialize  trace which axis of every tensor is the batch (starting from the input's axis 0),
//                  check that each op treats the samples along that axis independently, rewrite the
//                  constants that carry the batch, and run shape inference again at the new batch:
//                  every shape must be the old one with the batch axis replaced.  The graph then
//                  computes, for each sample, exactly what the model computes for it alone.
//   sub-batch      otherwise, unroll: the graph slices each batch into batch/model_batch pieces and
//                  runs a copy of the model (sharing the weights) on each, then concatenates the
//                  outputs.  Both engines run that graph as is: the CPU engine as a sequence of
//                  passes, the CUDA engine inside one captured CUDA graph.
#include <string>

#include "model/graph.h"

namespace sluice {

enum class StaticBatch {
  Auto,          // re-specialize when it can be proven, else sub-batch
  Respecialize,  // re-specialize or fail with the reason (tests)
  SubBatch,      // always sub-batch (tests)
};
const char* static_batch_name(StaticBatch s);
StaticBatch static_batch_from_name(const std::string& name);  // auto | respecialize | sub-batch; throws UsageError

// What adapt_batch did, for the log line and tests.
struct BatchAdaptation {
  enum class How { Respecialized, SubBatched } how = How::Respecialized;
  int64_t model_batch = 0;
  int64_t batch = 0;
  std::string why_not_respecialized;  // SubBatched: why re-specialization was not proven
};

// `g` is bound at `model_batch` (its single input "input" [model_batch, ...]) and folded; on return
// its input is [batch, ...] and its values are cleared (prepare_graph infers them again).  Throws
// InputError when neither way applies (sub-batching needs batch to be a multiple of model_batch and
// every output to have model_batch rows).
BatchAdaptation adapt_batch(Graph& g, int64_t model_batch, int64_t batch, StaticBatch mode);

// What a run on sub-batches costs and how to avoid it, for the run's warning and `sluice check`:
// "... runs as N sub-batches of b: expect ...; export the model with a dynamic batch: ...".
std::string sub_batch_cost(int64_t model_batch, int64_t batch);
std::string dynamic_batch_export_hint();

// The two ways, exposed for tests.  respecialize_batch leaves `g` unchanged and returns false with
// `why` set when it cannot prove the rewrite; unroll_batch throws InputError when it cannot apply.
bool respecialize_batch(Graph& g, int64_t model_batch, int64_t batch, std::string& why);
void unroll_batch(Graph& g, int64_t model_batch, int64_t batch);

}  // namespace sluice
