// Re-specializing a static-batch graph to another batch, or unrolling it into sub-batches
// (model/batch_adapt.h says when each applies).
//
// The proof behind re-specialization: the batch-axis trace (model/batch_trace.h) checks every op to
// be batch-equivariant along the axis it assigns to the op's input, i.e. op(samples stacked on that
// axis) == the op on each sample, stacked.  A graph of such ops is equivariant as a whole, so at
// batch B it computes, row by row, what the model computes at its own batch.  The shape check
// afterwards guards the rewrites.
#include "model/batch_adapt.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "model/batch_trace.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

// The flat tensor a Gather reads: data of N elements on axis 0 (1-D, or [N, 1, ..., 1]: `ones` trailing
// axes of 1, as Flatten(x, axis=rank) writes it), indices a constant integer tensor, every index in
// [-N, N) (made non-negative here).  False when the Gather is not such a read.
bool flat_gather(const Graph& g, const Node& n, int64_t& length, Shape& shape, std::vector<int64_t>& idx, std::size_t& ones) {
  if (n.op != "Gather" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  const Shape* ds = static_shape(g, n.input(0));
  const Tensor* it = g.constant(n.input(1));
  if (!ds || ds->empty() || !it || (it->dtype != DType::I64 && it->dtype != DType::I32)) return false;
  for (std::size_t i = 1; i < ds->size(); ++i)
    if ((*ds)[i] != 1) return false;
  ones = ds->size() - 1;
  if (n.get_int("axis", 0) != 0 && n.get_int("axis", 0) != -1) return false;
  length = (*ds)[0];
  shape = it->shape;
  idx = it->as_int64();
  for (int64_t& v : idx) {
    if (v < -length || v >= length) return false;
    if (v < 0) v += length;
  }
  return true;
}

// A GatherND that reads its data in place: data [d_0, ..., d_{r-1}] of a static shape, batch_dims 0,
// constant indices [S_0, ..., S_{m-1}, k] whose tuple at every position p is p's own coordinates,
// idx[p][j] = p_{a_j}, on output axes a_0 < a_1 < ... (axis a_j of length d_j), or 0 where d_j = 1.
// That is torch's `mask[batch_idx, kv_idx]` with index grids from Range and Expand (transformers 5's
// padding mask, written so by the dynamo exporter), folded to a constant once the shapes are fixed.
// Then out[p] = data[p_{a_0}, ..., p_{a_{k-1}}, ...]: the data reshaped to `view` (d_j on axis a_j, 1 on
// the other index axes, then the data's axes past k), broadcast to `out` (S_0, ..., S_{m-1}, then those
// axes).  Every index tuple is checked, so any other GatherND (a permutation, a shifted or repeated
// index, indices at run time) is left as it is.
bool grid_gather_nd(const Graph& g, const Node& n, Shape& view, Shape& out) {
  if (n.op != "GatherND" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  if (n.get_int("batch_dims", 0) != 0) return false;
  const Shape* ds = static_shape(g, n.input(0));
  const Tensor* it = g.constant(n.input(1));
  if (!ds || !it || (it->dtype != DType::I64 && it->dtype != DType::I32) || it->shape.empty()) return false;
  for (int64_t d : *ds)
    if (d < 1) return false;
  const Shape& is = it->shape;
  const std::size_t m = is.size() - 1;
  const int64_t k = is.back();
  if (k < 1 || k > static_cast<int64_t>(ds->size())) return false;
  for (std::size_t a = 0; a < m; ++a)
    if (is[a] < 1) return false;
  // For each indexed axis j with d_j > 1, the output axes whose coordinate its index could still be.
  const std::size_t K = static_cast<std::size_t>(k);
  std::vector<std::vector<std::size_t>> cands(K);
  for (std::size_t j = 0; j < K; ++j)
    for (std::size_t a = 0; (*ds)[j] > 1 && a < m; ++a)
      if (is[a] == (*ds)[j]) cands[j].push_back(a);
  const std::vector<int64_t> idx = it->as_int64();
  std::vector<int64_t> coord(m, 0);
  for (std::size_t p = 0; p * K < idx.size(); ++p) {
    for (std::size_t j = 0; j < K; ++j) {
      const int64_t d = (*ds)[j];
      int64_t v = idx[p * K + j];
      if (v < -d || v >= d) return false;  // out of range: left to the op and its error
      if (v < 0) v += d;
      if (d == 1) continue;  // v == 0
      auto& c = cands[j];
      c.erase(std::remove_if(c.begin(), c.end(), [&](std::size_t a) { return coord[a] != v; }), c.end());
      if (c.empty()) return false;
    }
    for (std::size_t a = m; a-- > 0;) {  // the next position, row-major
      if (++coord[a] < is[a]) break;
      coord[a] = 0;
    }
  }
  // Two axes of length d_j > 1 never share every coordinate, so at most one candidate is left.
  view.assign(m, 1);
  std::size_t next = 0;  // the a_j must increase with j: a reshape keeps the data's order
  for (std::size_t j = 0; j < K; ++j) {
    if ((*ds)[j] == 1) continue;
    const std::size_t a = cands[j].front();
    if (a < next) return false;
    view[a] = (*ds)[j];
    next = a + 1;
  }
  out.assign(is.begin(), is.end() - 1);
  view.insert(view.end(), ds->begin() + k, ds->end());
  out.insert(out.end(), ds->begin() + k, ds->end());
  return true;
}

// One line per node: its op, name, and each input's and output's shape and batch axis
// (axis/outer/inner), for SLUICE_LOG_LEVEL=debug.
std::string trace_summary(const Graph& g, const BatchTrace& t) {
  auto one = [&](const std::string& name) {
    if (name.empty()) return std::string("-");
    const ValueInfo* v = g.value(name);
    const BatchState st = t.of(g, name);
    std::string s = name + (v ? shape_str(v->shape) : std::string("?"));
    if (g.is_constant(name)) return s + "=c";
    if (!t.states.count(name)) return s;
    return s + str("@", st.axis, st.merged() ? str("(", st.outer, "x", st.inner, ")") : std::string());
  };
  std::string out;
  for (const Node& n : g.nodes) {
    out += n.op + " '" + n.name + "' (";
    for (std::size_t i = 0; i < n.inputs.size(); ++i) out += (i ? ", " : "") + one(n.inputs[i]);
    out += ") -> ";
    for (std::size_t i = 0; i < n.outputs.size(); ++i) out += (i ? ", " : "") + one(n.outputs[i]);
    out += "\n";
  }
  return out;
}

}  // namespace

// torch.export writes as_strided (adaptive average pooling's view, ConvNeXt's, Swin's and FocalNet's
// heads) as Reshape(x, [-1]) then Gather(axis 0) at constant offsets, offset(i) = sum of i_k x stride_k.
// At a fixed batch of b0 that Gather reads across the batch (the flat axis holds the samples merged
// with their features), so the batch trace cannot prove it; it is respelled here into forms that keep
// the batch on an axis of its own, each equal to the Gather element by element:
//   identity  offsets = 0, 1, ..., N-1 in row-major order of the indices' shape S (the view of a
//             contiguous tensor): Reshape(x, S).
//   per row   x [b, ...] of P = N / b elements per row, S = [b, S'...], and offsets(s, i) = s x P + o(i)
//             with every o(i) in [0, P): row s of the output reads row s of x only, at the same
//             offsets o for every row: Reshape(x, [b, P]), then Gather(axis 1, o [S'...]).
// Either way the result has shape S (S then the trailing ones of the flat tensor [N, 1, ..., 1]: transformers
// 5's attention masks, `mask[batch_idx, kv_idx]`, written by the TorchScript exporter as a Gather of
// Flatten(mask, 2)).
//
// The dynamo exporter writes that mask as a GatherND whose indices are the output's own coordinates
// (grid_gather_nd): respelled as Reshape(mask, view), then Expand to the output's shape where an index
// axis is not one of the mask's.
int respell_flat_gathers(Graph& g) {
  int done = 0;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    Shape view, out;
    if (grid_gather_nd(g, g.nodes[k], view, out)) {
      const Node gather = g.nodes[k];
      Node r;
      r.op = "Reshape";
      r.name = unique_tensor_name(g, gather.name + "_view");
      r.attrs["allowzero"] = Attribute::of_int(0);
      r.inputs = {gather.input(0), add_int64_constant(g, gather.name + "_shape", view)};
      r.outputs = gather.outputs;
      if (view != out) {
        Node e;
        e.op = "Expand";
        e.name = unique_tensor_name(g, gather.name + "_broadcast");
        r.outputs = {unique_tensor_name(g, gather.outputs[0] + "_view")};
        e.inputs = {r.outputs[0], add_int64_constant(g, gather.name + "_out", out)};
        e.outputs = gather.outputs;
        g.nodes.insert(g.nodes.begin() + static_cast<long>(k) + 1, std::move(e));
      }
      g.nodes[k] = std::move(r);
      if (view != out) ++k;
      ++done;
      continue;
    }
    int64_t length = 0;
    Shape s;
    std::vector<int64_t> idx;
    std::size_t ones = 0;
    if (!flat_gather(g, g.nodes[k], length, s, idx, ones)) continue;
    Shape full = s;  // the Gather's output shape
    full.insert(full.end(), ones, 1);
    const Node gather = g.nodes[k];
    // The tensor before the flattening Reshape (or Flatten), when there is one with a static shape.
    const int p = g.producer(gather.input(0));
    const Node* flat = p >= 0 ? &g.nodes[static_cast<std::size_t>(p)] : nullptr;
    const Shape* xs = flat && flat->domain.empty() && (flat->op == "Reshape" || flat->op == "Flatten")
                          ? static_shape(g, flat->input(0)) : nullptr;
    const std::string x = xs ? flat->input(0) : gather.input(0);
    bool identity = static_cast<int64_t>(idx.size()) == length;
    for (std::size_t i = 0; identity && i < idx.size(); ++i) identity = idx[i] == static_cast<int64_t>(i);
    Node r;
    r.op = "Reshape";
    r.name = unique_tensor_name(g, gather.name + "_view");
    r.attrs["allowzero"] = Attribute::of_int(0);
    if (identity && !s.empty()) {
      r.inputs = {x, add_int64_constant(g, gather.name + "_shape", full)};
      r.outputs = gather.outputs;
      g.nodes[k] = std::move(r);
      ++done;
      continue;
    }
    // Per row: the rows of x, b of them, each P elements.
    if (!xs || xs->empty() || s.empty() || (*xs)[0] < 1 || s[0] != (*xs)[0] || length % (*xs)[0] != 0) continue;
    const int64_t b = (*xs)[0], P = length / b;
    const std::size_t per = idx.size() / static_cast<std::size_t>(b);
    bool rows = true;
    for (int64_t row = 0; rows && row < b; ++row)
      for (std::size_t i = 0; rows && i < per; ++i) {
        const int64_t o = idx[static_cast<std::size_t>(row) * per + i] - row * P;
        rows = o >= 0 && o < P && o == idx[i];
      }
    if (!rows) continue;
    r.inputs = {x, add_int64_constant(g, gather.name + "_rows", {b, P})};
    r.outputs = {unique_tensor_name(g, gather.outputs[0] + "_rows")};
    Node sel = gather;
    sel.inputs = {r.outputs[0], unique_tensor_name(g, gather.input(1) + "_per_row")};
    sel.attrs["axis"] = Attribute::of_int(1);
    g.constants[sel.inputs[1]] = Tensor::from(DType::I64, Shape(s.begin() + 1, s.end()),
                                              std::vector<int64_t>(idx.begin(), idx.begin() + static_cast<long>(per)));
    Node tail;  // the trailing ones back
    if (ones) {
      sel.outputs = {unique_tensor_name(g, gather.outputs[0] + "_selected")};
      tail.op = "Reshape";
      tail.name = unique_tensor_name(g, gather.name + "_ones");
      tail.attrs["allowzero"] = Attribute::of_int(0);
      tail.inputs = {sel.outputs[0], add_int64_constant(g, gather.name + "_full", full)};
      tail.outputs = gather.outputs;
    }
    g.nodes[k] = std::move(sel);
    if (ones) g.nodes.insert(g.nodes.begin() + static_cast<long>(k) + 1, std::move(tail));
    g.nodes.insert(g.nodes.begin() + static_cast<long>(k), std::move(r));
    k += ones ? 2 : 1;
    ++done;
  }
  if (done) {
    eliminate_dead_nodes(g);
    infer_known_shapes(g);
  }
  return done;
}

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
  if (log_level() == LogLevel::Debug) log_debug("batch trace of ", g.source, ":\n", trace_summary(g, t));
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
    const std::string name = unique_tensor_name(g, n.inputs[r.input] + (r.tile ? "_repeats" : "_batch") + std::to_string(batch));
    g.constants[name] = r.value;
    added.push_back(name);
    if (!r.tile) n.inputs[r.input] = name;
  }
  // The Tiles in front of their nodes, last node first so that the indices hold.
  std::vector<std::size_t> tiles;
  for (std::size_t k = 0; k < t.rewrites.size(); ++k)
    if (t.rewrites[k].tile) tiles.push_back(k);
  std::stable_sort(tiles.begin(), tiles.end(), [&](std::size_t x, std::size_t y) { return t.rewrites[x].node > t.rewrites[y].node; });
  for (std::size_t k : tiles) {
    const BatchRewrite& r = t.rewrites[k];
    Node tile;
    tile.op = "Tile";
    tile.name = unique_tensor_name(g, g.nodes[r.node].name + "_repeat" + std::to_string(r.input));
    tile.inputs = {g.nodes[r.node].inputs[r.input], added[k]};
    tile.outputs = {unique_tensor_name(g, tile.inputs[0] + "_per_sample")};
    g.nodes[r.node].inputs[r.input] = tile.outputs[0];
    g.nodes.insert(g.nodes.begin() + static_cast<long>(r.node), std::move(tile));
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
  for (const auto& kv : g.constants) used.insert(kv.first);
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
    // Names with the tag are new (no existing name holds it); add_int64_constant's search for a free
    // name would go over the growing graph once per constant, minutes at a batch of 256.
    auto constant = [&](const char* what, int64_t v) {
      const std::string name = str("sluice_subbatch_", what, suffix);
      g.constants[name] = Tensor::from(DType::I64, Shape{1}, std::vector<int64_t>{v});
      return name;
    };
    cut.inputs = {input, constant("start", j * model_batch), constant("end", (j + 1) * model_batch), constant("axis", 0)};
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

std::string sub_batch_cost(int64_t model_batch, int64_t batch) {
  return str("expect up to ", std::max<int64_t>(batch / std::max<int64_t>(model_batch, 1), 1),
             "x the time per batch of a re-specialized model (each sub-batch runs at the throughput of batch ",
             model_batch, ") and a set-up that grows with --batch-size");
}

std::string dynamic_batch_export_hint() {
  return "to avoid it, export the model with a dynamic batch: torch.onnx.export(model, (x,), path, "
         "dynamic_shapes=({0: torch.export.Dim(\"batch\")},)), or with dynamo=False, "
         "input_names=[\"input\"], dynamic_axes={\"input\": {0: \"batch\"}}";
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
  g.batch_note = str("the model's batch is fixed at ", model_batch, "; each batch of ", batch, " ran as ",
                     batch / model_batch, " sub-batches of ", model_batch, " (not re-specialized: ", why, "); ",
                     sub_batch_cost(model_batch, batch), "; ", dynamic_batch_export_hint());
  if (mode == StaticBatch::SubBatch)
    log_info(g.source, ": the model's batch is fixed at ", model_batch, "; each batch of ", batch, " runs as ",
             batch / model_batch, " sub-batches of ", model_batch, " (not re-specialized: ", why, ")");
  else
    log_warn(g.source, ": the model's batch is fixed at ", model_batch, "; each batch of ", batch, " runs as ",
             batch / model_batch, " sub-batches of ", model_batch, " (not re-specialized: ", why, "); ",
             sub_batch_cost(model_batch, batch), "; ", dynamic_batch_export_hint());
  return r;
}

}  // namespace sluice
