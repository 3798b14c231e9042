// Re-specializing a static-batch graph to another batch, or unrolling it into sub-batches
// (model/batch_adapt.h says when each applies).
//
// The proof behind re-specialization: the batch-axis trace (model/batch_trace.h) checks every op to
// be batch-equivariant along the axis it assigns to the op's input, i.e. op(samples stacked on that
// axis) == the op on each sample, stacked.  A graph of such ops is equivariant as a whole, so at
// batch B it computes, row by row, what the model computes at its own batch.  The shape check
// afterwards guards the rewrites.
#include "model/batch_adapt.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "model/batch_trace.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

const char* static_batch_name(StaticBatch s) {
  switch (s) {
    case StaticBatch::Auto: return "auto";
    case StaticBatch::Respecialize: return "respecialize";
    case StaticBatch::SubBatch: return "sub-batch";
  }
  return "?";
}

StaticBatch static_batch_from_name(const std::string& name) {
  if (name == "auto") return StaticBatch::Auto;
  if (name == "respecialize") return StaticBatch::Respecialize;
  if (name == "sub-batch") return StaticBatch::SubBatch;
  throw UsageError(str("static batch mode must be auto, respecialize or sub-batch, not '", name, "'"));
}

bool respecialize_batch(Graph& g, int64_t model_batch, int64_t batch, std::string& why) {
  infer_shapes(g);
  const std::unordered_map<std::string, ValueInfo> before = g.values;
  const BatchTrace t = trace_batch(g, BatchQuestion::Respecialize, model_batch, batch);
  if (!t.why.empty()) {
    why = t.why;
    return false;
  }
  for (const ValueInfo& o : g.outputs) {
    const BatchState st = t.of(g, o.name);
    if (st.axis != 0 || st.merged()) {
      why = str("graph output '", o.name, "' ",
                st.axis == kNoBatch ? std::string("does not carry the batch")
                : st.merged()       ? str("carries the batch merged with other axes (", st.why, ")")
                                    : str("carries the batch on axis ", st.axis),
                "; outputs need it on axis 0");
      return false;
    }
  }

  const std::vector<Node> nodes = g.nodes;
  const std::vector<ValueInfo> inputs = g.inputs, outputs = g.outputs;
  std::vector<std::string> added;
  auto undo = [&](const std::string& reason) {
    g.nodes = nodes;
    g.inputs = inputs;
    g.outputs = outputs;
    for (const auto& name : added) g.constants.erase(name);
    g.values = before;
    why = reason;
    return false;
  };
  for (const BatchRewrite& r : t.rewrites) {
    Node& n = g.nodes[r.node];
    const std::string name = unique_tensor_name(g, n.inputs[r.input] + "_batch" + std::to_string(batch));
    g.constants[name] = r.value;
    added.push_back(name);
    n.inputs[r.input] = name;
  }
  g.inputs[0].shape[0] = batch;
  try {
    infer_shapes(g);
  } catch (const InputError& e) {
    return undo(str("at batch ", batch, ": ", e.what()));
  }
  for (const auto& kv : before) {
    auto it = g.values.find(kv.first);
    if (it == g.values.end()) continue;  // a constant that was replaced
    Shape expect = kv.second.shape;
    const BatchState st = t.of(g, kv.first);
    if (st.axis >= 0) expect[static_cast<std::size_t>(st.axis)] = st.outer * batch * st.inner;
    if (it->second.shape != expect)
      return undo(str("'", kv.first, "' would have shape ", shape_str(it->second.shape), " at batch ", batch, ", not ",
                      shape_str(expect)));
  }
  g.values.clear();
  return true;
}

void unroll_batch(Graph& g, int64_t model_batch, int64_t batch) {
  if (batch % model_batch != 0)
    throw InputError(str(g.source, ": the model has a static batch of ", model_batch,
                         " and cannot be re-specialized; it runs on sub-batches of ", model_batch,
                         ", so --batch-size must be a multiple of ", model_batch, " (got ", batch, ")"));
  infer_shapes(g);
  for (const ValueInfo& o : g.outputs)
    if (o.shape.empty() || o.shape[0] != model_batch)
      throw InputError(str(g.source, ": output '", o.name, "' has shape ", shape_str(o.shape), ", not one row per sample (",
                           model_batch, " rows for the model's batch of ", model_batch, "), so it cannot run on sub-batches"));
  const std::string input = g.inputs.at(0).name;
  std::unordered_set<std::string> used;
  for (const Node& n : g.nodes) {
    used.insert(n.name);
    used.insert(n.inputs.begin(), n.inputs.end());
    used.insert(n.outputs.begin(), n.outputs.end());
  }
  std::string tag = "#sb";
  for (bool clash = true; clash;) {  // a suffix no existing name ends with
    clash = false;
    for (const auto& u : used) clash = clash || u.find(tag) != std::string::npos;
    if (clash) tag += "#";
  }
  const std::vector<Node> body = std::move(g.nodes);
  g.nodes.clear();
  const int64_t pieces = batch / model_batch;
  std::vector<std::vector<std::string>> piece_outputs(g.outputs.size());
  for (int64_t j = 0; j < pieces; ++j) {
    const std::string suffix = tag + std::to_string(j);
    auto rename = [&](const std::string& s) { return s.empty() || g.is_constant(s) ? s : s + suffix; };
    Node cut;
    cut.op = "Slice";
    cut.name = "sluice_subbatch" + suffix;
    cut.inputs = {input, add_int64_constant(g, "sluice_subbatch_start" + suffix, {j * model_batch}),
                  add_int64_constant(g, "sluice_subbatch_end" + suffix, {(j + 1) * model_batch}),
                  add_int64_constant(g, "sluice_subbatch_axis" + suffix, {0})};
    cut.outputs = {input + suffix};
    g.nodes.push_back(std::move(cut));
    for (Node n : body) {
      n.name += suffix;
      for (auto& s : n.inputs) s = rename(s);
      for (auto& s : n.outputs) s = rename(s);
      g.nodes.push_back(std::move(n));
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k) piece_outputs[k].push_back(rename(g.outputs[k].name));
  }
  for (std::size_t k = 0; k < g.outputs.size(); ++k) {
    Node join;
    join.op = "Concat";
    join.name = "sluice_subbatch_join_" + g.outputs[k].name;
    join.inputs = piece_outputs[k];
    join.outputs = {g.outputs[k].name};
    join.attrs["axis"] = Attribute::of_int(0);
    g.nodes.push_back(std::move(join));
  }
  g.inputs[0].shape[0] = batch;
  g.values.clear();
}

BatchAdaptation adapt_batch(Graph& g, int64_t model_batch, int64_t batch, StaticBatch mode) {
  BatchAdaptation r;
  r.model_batch = model_batch;
  r.batch = batch;
  std::string why = "--static-batch sub-batch";
  if (mode != StaticBatch::SubBatch && respecialize_batch(g, model_batch, batch, why)) {
    log_info(g.source, ": the model's batch is fixed at ", model_batch, "; re-specialized to batch ", batch,
             " (every shape follows the batch)");
    return r;
  }
  if (mode == StaticBatch::Respecialize)
    throw InputError(str(g.source, ": the model's batch is fixed at ", model_batch, " and cannot be re-specialized to ",
                         batch, ": ", why));
  if (batch % model_batch != 0)
    throw InputError(str(g.source, ": the model's batch is fixed at ", model_batch, " and cannot be re-specialized (", why,
                         "); it can run on sub-batches of ", model_batch, " only, so --batch-size must be a multiple of ",
                         model_batch, " (got ", batch, ")"));
  unroll_batch(g, model_batch, batch);
  r.how = BatchAdaptation::How::SubBatched;
  r.why_not_respecialized = why;
  log_info(g.source, ": the model's batch is fixed at ", model_batch, "; each batch of ", batch, " runs as ",
           batch / model_batch, " sub-batches of ", model_batch, " (not re-specialized: ", why, ")");
  return r;
}

}  // namespace sluice
