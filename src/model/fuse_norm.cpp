// Fusions of the element-wise spellings older exporters write for two ops of transformer models:
//   LayerNormalization  ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div (then Mul scale, Add bias)
//   Gelu                x * 0.5 * (1 + erf(x / sqrt 2)), in the orders TorchScript and torch 1.13 write
// Both rewrite into the opset-17/20 op, which the engines run in one pass over the data.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

struct Matcher {
  Graph& g;
  std::unordered_set<std::string> outputs;

  explicit Matcher(Graph& graph) : g(graph) {
    for (const auto& o : g.outputs) outputs.insert(o.name);
  }
  // The node producing `name` when it is `op` (default domain), else nullptr.
  Node* producer(const std::string& name, const char* op) {
    const int i = g.producer(name);
    if (i < 0) return nullptr;
    Node& n = g.nodes[static_cast<std::size_t>(i)];
    return n.op == op && n.domain.empty() ? &n : nullptr;
  }
  // Whether `name` is read by exactly `k` node inputs and is no graph output (an intermediate that
  // the fused node may swallow).
  bool internal(const std::string& name, int k = 1) const { return !outputs.count(name) && g.consumers(name) == k; }
  // The scalar value of a float constant, or NaN.
  double scalar(const std::string& name) const {
    const Tensor* t = g.constant(name);
    if (!t || t->numel() != 1 || (t->dtype != DType::F32 && t->dtype != DType::F64 && t->dtype != DType::F16)) return NAN;
    return t->as_float()[0];
  }
  // The operand of a two-input node that is not `x`, or "" when neither is.
  static std::string other(const Node& n, const std::string& x) {
    if (n.inputs.size() != 2) return "";
    if (n.inputs[0] == x) return n.inputs[1];
    if (n.inputs[1] == x) return n.inputs[0];
    return "";
  }
  // The single node reading `name`.
  Node* sole_reader(const std::string& name) {
    if (!internal(name)) return nullptr;
    for (Node& n : g.nodes)
      for (const auto& in : n.inputs)
        if (in == name) return &n;
    return nullptr;
  }
};

bool near(double v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

// The normalized trailing axes of a ReduceMean with keepdims, as the first axis; -1 when the axes
// are not the last ones of the input.
int64_t trailing_axes(const Graph& g, const Node& m, int64_t rank) {
  if (m.get_int("keepdims", 1) == 0 || m.inputs.size() < 2) return -1;
  const Tensor* t = g.constant(m.inputs[1]);
  if (!t || t->numel() == 0) return -1;
  std::vector<int64_t> axes = t->as_int64();
  for (auto& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return -1;
  return axes.front();
}

// Whether a constant broadcasts over the leading axes only: it covers the last `norm_rank` axes.
bool fits_normalized_axes(const Graph& g, const std::string& name, int64_t norm_rank) {
  const Tensor* t = g.constant(name);
  if (!t || (t->dtype != DType::F32)) return false;
  int64_t lead = static_cast<int64_t>(t->shape.size()) - norm_rank;
  for (int64_t i = 0; i < lead; ++i)
    if (t->shape[static_cast<std::size_t>(i)] != 1) return false;
  return true;
}

bool fuse_layernorm_at(Matcher& m, std::size_t index, std::unordered_set<const Node*>& dead) {
  Graph& g = m.g;
  Node& mean = g.nodes[index];
  if (mean.op != "ReduceMean" || !mean.domain.empty() || mean.inputs.empty()) return false;
  const std::string x = mean.inputs[0];
  const ValueInfo* xv = g.value(x);
  if (!xv || xv->dtype != DType::F32) return false;
  const int64_t rank = static_cast<int64_t>(xv->shape.size());
  const int64_t axis = trailing_axes(g, mean, rank);
  if (axis < 0 || !m.internal(mean.outputs[0])) return false;
  Node* sub = m.sole_reader(mean.outputs[0]);
  if (!sub || sub->op != "Sub" || sub->inputs.size() != 2 || sub->inputs[0] != x || sub->inputs[1] != mean.outputs[0])
    return false;
  const std::string d = sub->outputs[0];
  if (!m.internal(d, 2)) return false;
  Node *pow = nullptr, *div = nullptr;
  for (Node& n : g.nodes)
    for (const auto& in : n.inputs)
      if (in == d) {
        if (n.op == "Pow") pow = &n;
        else if (n.op == "Div") div = &n;
      }
  if (!pow || !div || pow->inputs[0] != d || !near(m.scalar(pow->inputs[1]), 2.0) || div->inputs[0] != d) return false;
  Node* var = m.sole_reader(pow->outputs[0]);
  if (!var || var->op != "ReduceMean" || trailing_axes(g, *var, rank) != axis) return false;
  Node* add = m.sole_reader(var->outputs[0]);
  if (!add || add->op != "Add") return false;
  const double eps = m.scalar(Matcher::other(*add, var->outputs[0]));
  if (!(eps >= 0)) return false;
  Node* sqrt = m.sole_reader(add->outputs[0]);
  if (!sqrt || sqrt->op != "Sqrt" || !m.internal(sqrt->outputs[0]) || div->inputs[1] != sqrt->outputs[0]) return false;
  // Optional scale and bias behind the division.
  std::vector<Node*> swallowed = {&mean, sub, pow, var, add, sqrt, div};
  std::string y = div->outputs[0], scale, bias;
  if (Node* mul = m.internal(y) ? m.sole_reader(y) : nullptr) {
    const std::string s = mul->op == "Mul" ? Matcher::other(*mul, y) : "";
    if (!s.empty() && fits_normalized_axes(g, s, rank - axis)) {
      scale = s;
      swallowed.push_back(mul);
      y = mul->outputs[0];
      if (Node* b = m.internal(y) ? m.sole_reader(y) : nullptr) {
        const std::string c = b->op == "Add" ? Matcher::other(*b, y) : "";
        if (!c.empty() && fits_normalized_axes(g, c, rank - axis)) {
          bias = c;
          swallowed.push_back(b);
          y = b->outputs[0];
        }
      }
    }
  }
  if (scale.empty()) {
    std::vector<float> ones(static_cast<std::size_t>(xv->shape.back()), 1.f);
    if (axis != rank - 1) return false;  // a scale of ones for several axes: rare, left unfused
    scale = add_float_constant(g, mean.name + "_ln_scale", ones);
  }
  Node ln;
  ln.op = "LayerNormalization";
  ln.name = unique_tensor_name(g, mean.name + "_layernorm");
  ln.inputs = {x, scale};
  if (!bias.empty()) ln.inputs.push_back(bias);
  ln.outputs = {y};
  ln.attrs["axis"] = Attribute::of_int(axis);
  ln.attrs["epsilon"] = Attribute::of_float(static_cast<float>(eps));
  for (Node* n : swallowed) dead.insert(n);
  // The fused node takes the place of the last node it swallows (the order stays topological).
  *swallowed.back() = std::move(ln);
  dead.erase(swallowed.back());
  return true;
}

// x * 0.5 * (1 + erf(x / sqrt2)) around an Erf node.
bool fuse_gelu_at(Matcher& m, std::size_t index, std::unordered_set<const Node*>& dead) {
  Graph& g = m.g;
  Node& erf = g.nodes[index];
  if (erf.op != "Erf" || !erf.domain.empty() || erf.inputs.size() != 1) return false;
  Node* scaled = nullptr;
  std::string x;
  if (Node* dv = m.producer(erf.inputs[0], "Div"); dv && near(m.scalar(dv->inputs[1]), std::sqrt(2.0))) {
    scaled = dv;
    x = dv->inputs[0];
  } else if (Node* ml = m.producer(erf.inputs[0], "Mul")) {
    for (std::size_t k = 0; k < 2 && x.empty(); ++k)
      if (near(m.scalar(ml->inputs[1 - k]), std::sqrt(0.5))) {
        scaled = ml;
        x = ml->inputs[k];
      }
  }
  if (!scaled || x.empty() || !m.internal(scaled->outputs[0]) || !m.internal(erf.outputs[0])) return false;
  const ValueInfo* xv = g.value(x);
  if (!xv || xv->dtype != DType::F32) return false;
  Node* one = m.sole_reader(erf.outputs[0]);
  if (!one || one->op != "Add" || !near(m.scalar(Matcher::other(*one, erf.outputs[0])), 1.0)) return false;
  const std::string c = one->outputs[0];
  Node* mul1 = m.sole_reader(c);
  if (!mul1 || mul1->op != "Mul") return false;
  const std::string o = Matcher::other(*mul1, c);
  std::vector<Node*> swallowed = {scaled, &erf, one};
  if (o == x) {
    // (x * c) * 0.5
    Node* half = m.sole_reader(mul1->outputs[0]);
    if (!half || half->op != "Mul" || !near(m.scalar(Matcher::other(*half, mul1->outputs[0])), 0.5)) return false;
    swallowed.push_back(mul1);
    swallowed.push_back(half);
  } else {
    // (x * 0.5) * c
    Node* half = m.producer(o, "Mul");
    if (!half || !m.internal(o) || Matcher::other(*half, x).empty() || !near(m.scalar(Matcher::other(*half, x)), 0.5))
      return false;
    swallowed.push_back(half);
    swallowed.push_back(mul1);
  }
  Node gelu;
  gelu.op = "Gelu";
  gelu.name = unique_tensor_name(g, erf.name + "_gelu");
  gelu.inputs = {x};
  gelu.outputs = {swallowed.back()->outputs[0]};
  for (Node* n : swallowed) dead.insert(n);
  *swallowed.back() = std::move(gelu);
  dead.erase(swallowed.back());
  return true;
}

}  // namespace

void fuse_transformer_patterns(Graph& g) {
  std::unordered_set<const Node*> dead;
  Matcher m(g);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead.count(&g.nodes[i])) continue;
    if (!fuse_layernorm_at(m, i, dead)) fuse_gelu_at(m, i, dead);
  }
  if (dead.empty()) return;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (Node& n : g.nodes)
    if (!dead.count(&n)) kept.push_back(std::move(n));
  g.nodes = std::move(kept);
  g.topo_sort();
}

}  // namespace sluice
