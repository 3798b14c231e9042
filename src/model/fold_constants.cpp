// Constant folding and the shape-inference pass.  They alternate: folding a Shape node needs its
// input's static shape, and the folded values (Resize sizes, Reshape targets) let inference reach
// further, until a round changes nothing.
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "model/const_eval.h"
#include "model/fold_if.h"
#include "model/graph_util.h"
#include "model/passes.h"
#include "model/shape_inference.h"

namespace sluice {

namespace {

bool is_static(const Shape& s) {
  for (int64_t d : s) if (d < 0) return false;
  return true;
}

// Errors thrown below the node level (checked size arithmetic, tensor allocation) do not know the
// node; this names it, so every message about a model says where in the model.
template <typename F>
auto with_node_context(const Graph& g, const Node& n, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    const std::string where = node_context(g, n);
    if (std::string(e.what()).rfind(where, 0) == 0) throw;
    // Same kind (a SizeError lets the caller blame the batch size) and same hint, located.
    if (dynamic_cast<const SizeError*>(&e)) throw SizeError(where + e.what(), e.hint());
    throw InputError(where + e.what(), e.hint());
  }
}

// Seeds g.values with the graph inputs and the constants.  Inputs with a dynamic dimension are left
// out (unknown) unless `strict`, where they are an error.
void seed_values(Graph& g, bool strict) {
  g.values.clear();
  for (const auto& in : g.inputs) {
    if (in.dtype == DType::Undefined || !is_static(in.shape)) {
      if (strict)
        throw InputError(str(g.source, ": graph input '", in.name, "' has no static type and shape (",
                             dtype_name(in.dtype), shape_str(in.shape), "); the job must fix it first"));
      continue;
    }
    g.values[in.name] = in;
  }
  for (const auto& kv : g.constants) g.values[kv.first] = ValueInfo{kv.first, kv.second.dtype, kv.second.shape};
}

// One sweep in topological order; returns how many nodes were folded.
int fold_sweep(Graph& g) {
  std::unordered_set<std::string> graph_outputs;
  for (const auto& o : g.outputs) graph_outputs.insert(o.name);
  // Identity of a constant (TorchScript writes one per shared weight): alias it instead of copying
  // the weights.
  std::unordered_map<std::string, std::string> alias;
  for (const Node& n : g.nodes)
    if (n.op == "Identity" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
        g.is_constant(n.inputs[0]) && !graph_outputs.count(n.outputs[0]))
      alias[n.outputs[0]] = n.inputs[0];
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  int folded = static_cast<int>(alias.size());
  for (Node& n : g.nodes) {
    if (n.op == "Identity" && !n.outputs.empty() && alias.count(n.outputs[0])) continue;
    for (auto& in : n.inputs) {
      auto a = alias.find(in);
      if (a != alias.end()) in = a->second;
    }
    bool foldable = !n.outputs.empty();
    // A graph output must keep a producer: the engines fill output buffers by running nodes.
    for (const auto& o : n.outputs) foldable = foldable && !o.empty() && !graph_outputs.count(o);
    std::vector<const Tensor*> in(n.inputs.size(), nullptr);
    std::vector<const Shape*> shapes(n.inputs.size(), nullptr);
    for (std::size_t i = 0; foldable && i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      in[i] = g.constant(n.inputs[i]);
      const ValueInfo* v = g.value(n.inputs[i]);
      if (v && is_static(v->shape)) shapes[i] = &v->shape;
      else if (in[i]) shapes[i] = &in[i]->shape;
      const bool shape_only = n.op == "Shape" || n.op == "Size";
      if (!in[i] && !(shape_only && shapes[i])) foldable = false;
    }
    std::vector<Tensor> out;
    if (foldable && with_node_context(g, n, [&] { return evaluate_node(g, n, in, shapes, out); })) {
      for (std::size_t k = 0; k < out.size() && k < n.outputs.size(); ++k) {
        g.values[n.outputs[k]] = ValueInfo{n.outputs[k], out[k].dtype, out[k].shape};
        g.constants[n.outputs[k]] = std::move(out[k]);
      }
      ++folded;
      continue;
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return folded;
}

// Infers node by node; `strict` throws on anything unknown, otherwise unknown outputs are skipped.
void run_inference(Graph& g, bool strict) {
  seed_values(g, strict);
  std::vector<const ValueInfo*> ins;
  std::vector<ValueInfo> outs;
  std::string why;
  for (const Node& n : g.nodes) {
    ins.assign(n.inputs.size(), nullptr);
    bool complete = true;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      ins[i] = g.value(n.inputs[i]);
      if (!ins[i]) complete = false;
    }
    why.clear();
    bool ok = false;
    if (complete || !strict) {
      try {
        ok = with_node_context(g, n, [&] { return infer_node(g, n, ins, outs, why); });
      } catch (const InputError&) {
        if (strict || complete) throw;  // with unknown inputs, a "mismatch" may only be a gap
      }
    }
    if (!ok) {
      if (strict)
        throw InputError(str(node_context(g, n), "cannot infer the output shape",
                             why.empty() ? std::string() : str(": ", why)));
      continue;
    }
    for (auto& v : outs) {
      if (v.name.empty() || v.dtype == DType::Undefined) continue;
      if (!is_static(v.shape)) {
        if (strict) throw InputError(str(node_context(g, n), "output '", v.name, "' has no static shape"));
        continue;
      }
      // Every size computed from this shape later (engines, slots) stays far from overflow.
      with_node_context(g, n, [&] { return checked_tensor_bytes(v.shape, v.dtype, str("tensor '", v.name, "'")); });
      g.values[v.name] = v;
    }
  }
}

}  // namespace

void infer_known_shapes(Graph& g) { run_inference(g, false); }

void infer_shapes(Graph& g) {
  run_inference(g, true);
  for (auto& o : g.outputs) {
    const ValueInfo* v = g.value(o.name);
    if (!v) throw InputError(str(g.source, ": graph output '", o.name, "' is not produced by any node"));
    o.dtype = v->dtype;
    o.shape = v->shape;
  }
  for (auto& in : g.inputs) in = g.values.at(in.name);
}

void fold_constants(Graph& g) {
  // Each round: learn what shapes are known now, then fold what became constant.
  for (;;) {
    infer_known_shapes(g);
    // An If whose condition has become a constant gives way to the branch it takes.
    if (fold_sweep(g) == 0 && fold_constant_ifs(g) == 0) break;
  }
}

}  // namespace sluice
