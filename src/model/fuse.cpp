// Graph rewrites that shrink the work of an engine: Identity removal, BatchNorm folded into the
// convolution before it, Conv (+ residual Add) (+ activation) fused into one sluice FusedConv, and
// dead-node elimination.
#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "model/const_eval.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

bool is_graph_input(const Graph& g, const std::string& name) {
  for (const auto& i : g.inputs) if (i.name == name) return true;
  return false;
}

// The single node reading `name`, when exactly one node input (and no graph output) reads it.
int sole_consumer(const Graph& g, const std::string& name) {
  if (g.consumers(name) != 1 || is_graph_output(g, name)) return -1;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (in == name) return static_cast<int>(i);
  return -1;
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

Tensor float_tensor(DType like, const Shape& shape, const std::vector<float>& v) {
  Tensor f = Tensor::from(DType::F32, shape, v);
  return like == DType::F32 ? f : cast_tensor(f, like);
}

}  // namespace

void remove_identities(Graph& g) {
  for (std::size_t i = 0; i < g.nodes.size();) {
    const Node& n = g.nodes[i];
    if (n.op != "Identity" || !n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1) { ++i; continue; }
    const std::string x = n.inputs[0], y = n.outputs[0];
    if (!is_graph_output(g, y)) {
      g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
      replace_uses(g, y, x);
      g.values.erase(y);
      continue;
    }
    // y is a graph output: keep its name by renaming x, when x is an ordinary node output.
    if (g.producer(x) >= 0 && !is_graph_output(g, x) && !is_graph_input(g, x)) {
      g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
      g.values.erase(y);
      rename_tensor(g, x, y);
      continue;
    }
    ++i;
  }
}

void fold_batchnorm(Graph& g) {
  for (std::size_t i = 0; i < g.nodes.size();) {
    const Node& bn = g.nodes[i];
    if (bn.op != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() < 5) { ++i; continue; }
    bool extra_outputs_used = false;
    for (std::size_t k = 1; k < bn.outputs.size(); ++k)
      extra_outputs_used = extra_outputs_used || (!bn.outputs[k].empty() && g.consumers(bn.outputs[k]) > 0);
    const int p = g.producer(bn.inputs[0]);
    const Tensor *scale = g.constant(bn.inputs[1]), *beta = g.constant(bn.inputs[2]);
    const Tensor *mean = g.constant(bn.inputs[3]), *var = g.constant(bn.inputs[4]);
    if (extra_outputs_used || p < 0 || sole_consumer(g, bn.inputs[0]) != static_cast<int>(i) || !scale || !beta ||
        !mean || !var) { ++i; continue; }
    Node& conv = g.nodes[p];
    const Tensor* w = conv.op == "Conv" && conv.domain.empty() ? g.constant(conv.input(1)) : nullptr;
    const Tensor* b = conv.input(2).empty() ? nullptr : g.constant(conv.input(2));
    if (!w || (!conv.input(2).empty() && !b) || !is_float_type(w->dtype) || w->shape.size() < 2 || w->shape[0] < 1) {
      ++i;
      continue;
    }
    const int64_t m = w->shape[0];
    if (scale->numel() != m || beta->numel() != m || mean->numel() != m || var->numel() != m || (b && b->numel() != m))
      throw InputError(str(node_context(g, bn), "has ", scale->numel(), " channels but the convolution before it has ", m));
    const float eps = bn.get_float("epsilon", 1e-5f);
    const std::vector<float> s = scale->as_float(), be = beta->as_float(), mu = mean->as_float(), va = var->as_float();
    std::vector<float> wv = w->as_float();
    std::vector<float> bv = b ? b->as_float() : std::vector<float>(static_cast<std::size_t>(m), 0.f);
    const int64_t per = w->numel() / m;
    for (int64_t c = 0; c < m; ++c) {
      const float a = s[c] / std::sqrt(va[c] + eps);
      for (int64_t k = 0; k < per; ++k) wv[c * per + k] *= a;
      bv[c] = (bv[c] - mu[c]) * a + be[c];
    }
    // New names: the original weights may be shared with another convolution.
    const std::string wn = unique_tensor_name(g, conv.input(1) + "_bn");
    g.constants[wn] = float_tensor(w->dtype, w->shape, wv);
    const DType bdt = b ? b->dtype : w->dtype;
    const std::string bname = unique_tensor_name(g, (conv.input(2).empty() ? conv.name + "_bias" : conv.input(2)) + "_bn");
    g.constants[bname] = float_tensor(bdt, {m}, bv);
    conv.inputs.resize(std::max<std::size_t>(conv.inputs.size(), 3));
    conv.inputs[1] = wn;
    conv.inputs[2] = bname;
    const std::string y = bn.outputs[0], x = bn.inputs[0];
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    g.values.erase(x);
    rename_tensor(g, x, y);
  }
}

void fuse_convolutions(Graph& g) {
  infer_known_shapes(g);  // the residual must match the convolution's output shape
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != "Conv" || !g.nodes[i].domain.empty()) continue;
    std::vector<int> chain = {static_cast<int>(i)};
    std::string cur = g.nodes[i].outputs.at(0), residual, activation;
    std::map<std::string, Attribute> act_attrs;
    int k = sole_consumer(g, cur);
    if (k >= 0 && g.nodes[k].op == "Add" && g.nodes[k].domain.empty() && g.nodes[k].inputs.size() == 2) {
      const Node& add = g.nodes[k];
      const std::string other = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
      const ValueInfo *vo = g.value(other), *vc = g.value(cur);
      if (other != cur && !other.empty() && !g.is_constant(other) && vo && vc && vo->shape == vc->shape &&
          vo->dtype == vc->dtype) {
        residual = other;
        chain.push_back(k);
        cur = add.outputs.at(0);
        k = sole_consumer(g, cur);
      }
    }
    if (k >= 0 && g.nodes[k].domain.empty()) {
      const Node& a = g.nodes[k];
      if (a.op == "Relu") {
        activation = "Relu";
      } else if (a.op == "LeakyRelu") {
        activation = "LeakyRelu";
        act_attrs["alpha"] = Attribute::of_float(a.get_float("alpha", 0.01f));
      } else if (a.op == "Clip") {
        const Tensor* lo = a.input(1).empty() ? nullptr : g.constant(a.input(1));
        const Tensor* hi = a.input(2).empty() ? nullptr : g.constant(a.input(2));
        // Bounds that are not scalars stay a separate Clip, which shape inference refuses.
        if ((a.input(1).empty() || (lo && lo->numel() == 1)) && (a.input(2).empty() || (hi && hi->numel() == 1))) {
          activation = "Clip";
          act_attrs["clip_min"] = Attribute::of_float(lo ? lo->as_float().at(0) : -std::numeric_limits<float>::infinity());
          act_attrs["clip_max"] = Attribute::of_float(hi ? hi->as_float().at(0) : std::numeric_limits<float>::infinity());
        }
      }
      if (!activation.empty()) {
        chain.push_back(k);
        cur = a.outputs.at(0);
      }
    }
    if (chain.size() == 1) continue;

    const Node& conv = g.nodes[i];
    Node f;
    f.name = conv.name;
    f.op = "FusedConv";
    f.domain = "sluice";
    f.inputs = {conv.input(0), conv.input(1), conv.input(2)};
    if (!residual.empty()) f.inputs.push_back(residual);
    while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
    f.outputs = {cur};
    f.attrs = conv.attrs;
    f.attrs["activation"] = Attribute::of_string(activation);
    for (auto& kv : act_attrs) f.attrs[kv.first] = kv.second;
    // The fused node takes the place of the chain's last node: by then X, W and the residual exist.
    const int last = *std::max_element(chain.begin(), chain.end());
    for (int c : chain)
      if (c != last)
        for (const auto& o : g.nodes[c].outputs) g.values.erase(o);
    g.nodes[last] = std::move(f);
    std::vector<int> drop(chain.begin(), chain.end());
    std::sort(drop.rbegin(), drop.rend());
    for (int c : drop)
      if (c != last) g.nodes.erase(g.nodes.begin() + c);
    --i;  // the node now at i was not looked at yet
  }
}

void eliminate_dead_nodes(Graph& g) {
  std::unordered_set<std::string> live;
  for (const auto& o : g.outputs) live.insert(o.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    const Node& n = g.nodes[j];
    for (const auto& o : n.outputs) keep[j] = keep[j] || (!o.empty() && live.count(o));
    if (keep[j]) for (const auto& in : n.inputs) if (!in.empty()) live.insert(in);
  }
  std::vector<Node> kept;
  for (std::size_t j = 0; j < g.nodes.size(); ++j)
    if (keep[j]) kept.push_back(std::move(g.nodes[j]));
  g.nodes = std::move(kept);
  for (auto it = g.constants.begin(); it != g.constants.end();)
    it = live.count(it->first) ? std::next(it) : g.constants.erase(it);
  for (const auto& n : g.nodes) for (const auto& o : n.outputs) live.insert(o);
  for (const auto& in : g.inputs) live.insert(in.name);
  for (auto it = g.values.begin(); it != g.values.end();)
    it = live.count(it->first) ? std::next(it) : g.values.erase(it);
}

}  // namespace sluice
