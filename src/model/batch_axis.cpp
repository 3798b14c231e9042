// The batch-axis check: the batch-axis trace (model/batch_trace.h) of the prepared graph, read at
// its outputs.
#include "model/batch_axis.h"

#include "core/error.h"
#include "model/batch_trace.h"

namespace sluice {

void check_batch_axis(const Graph& g, int64_t batch) {
  const BatchTrace t = trace_batch(g, BatchQuestion::Check);
  for (const ValueInfo& o : g.outputs) {
    const ValueInfo* v = g.value(o.name);
    const Shape& s = v ? v->shape : o.shape;
    const BatchState st = t.of(g, o.name);
    const std::string what = str(g.source, ": the model's output '", o.name, "' ", shape_str(s));
    const std::string need = "; Sluice stores one row per sample, so every output must keep the batch on axis 0 "
                             "with each row depending on its own sample only";
    const std::string hint = "export the model so that each output row comes from its own sample (no reduction, "
                             "softmax or reshape across axis 0; keep such steps for after the run)";
    if (st.axis == kMixed) throw InputError(str(what, " does not keep the batch apart: ", st.why, need), hint);
    if (st.axis >= 0 && st.merged())
      throw InputError(str(what, " holds the batch merged with other axes on axis ", st.axis, " (", st.why, ")", need,
                           " (end the model with a Reshape that gives the batch an axis of its own)"), hint);
    if (st.axis > 0)
      throw InputError(str(what, " holds the batch on axis ", st.axis, ", not axis 0", need,
                           " (end the model with a Transpose that moves it back)"), hint);
    if (st.axis == kSingle && st.first == 0 && !s.empty() && s[0] == batch && batch == 1) continue;
    if (st.axis == kSingle)
      throw InputError(str(what, " holds one sample where the batch of ", batch, " should be", need), hint);
    if (st.axis == 0 && st.first != 0)
      throw InputError(str(what, " starts at sample ", st.first, ", not at the batch's first sample", need), hint);
    if (s.empty() || s[0] != batch)
      throw InputError(str(what, " does not start with the batch size ", batch, need), hint);
  }
}

}  // namespace sluice
