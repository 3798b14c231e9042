#include "engine/residual_stream.h"

#include <map>
#include <vector>

namespace sluice {
namespace {

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The operand's shape right-aligned against the sum's: equal on every axis but the first, where
// it may be 1.
bool residual_operand(const Graph& g, const std::string& name, const Shape& out) {
  const ValueInfo* v = g.value(name);
  const Tensor* c = g.constant(name);
  const Shape s = v ? v->shape : (c ? c->shape : Shape{});
  if ((!v && !c) || s.size() > out.size() || s.empty()) return false;
  Shape aligned(out.size() - s.size(), 1);
  aligned.insert(aligned.end(), s.begin(), s.end());
  for (std::size_t d = 0; d < out.size(); ++d)
    if (aligned[d] != out[d] && !(d == 0 && aligned[d] == 1)) return false;
  return true;
}

bool is_conv(const Node& n) {
  return (n.domain.empty() && (n.op == "Conv" || n.op == "ConvTranspose")) || (n.domain == "sluice" && n.op == "FusedConv");
}

// The data operand of a branch-tail node: an Add or Mul of one computed float tensor and one float
// constant that repeats onto it along its trailing axes (a bias or a LayerScale vector [C], or a
// table [N, C]); empty when n is not one.
std::string branch_tail_input(const Graph& g, const Node& n) {
  if (!n.domain.empty() || (n.op != "Add" && n.op != "Mul") || n.inputs.size() != 2 || n.outputs.size() != 1) return {};
  const int k = g.constant(n.inputs[0]) ? 0 : (g.constant(n.inputs[1]) ? 1 : -1);
  if (k < 0) return {};
  const std::string& data = n.inputs[static_cast<std::size_t>(1 - k)];
  const Tensor* c = g.constant(n.inputs[static_cast<std::size_t>(k)]);
  const ValueInfo* x = g.value(data);
  const ValueInfo* y = g.value(n.outputs[0]);
  if (g.constant(data) || !x || !y || x->shape != y->shape || !is_float_type(y->dtype) || !is_float_type(c->dtype)) return {};
  // The constant without its leading 1s must equal the output's last axes: element i of the output
  // then takes element i mod numel of the constant, which is how the residual kernels repeat it.
  std::size_t lead = 0;
  while (lead < c->shape.size() && c->shape[lead] == 1) ++lead;
  const std::size_t k_axes = c->shape.size() - lead;
  if (k_axes > y->shape.size()) return {};
  for (std::size_t d = 0; d < k_axes; ++d)
    if (c->shape[lead + d] != y->shape[y->shape.size() - k_axes + d]) return {};
  return data;
}

}  // namespace

bool is_residual_add_candidate(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op != "Add" || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  const ValueInfo* y = g.value(n.outputs[0]);
  if (!y || !is_float_type(y->dtype) || y->shape.size() < 2) return false;
  for (int64_t d : y->shape)
    if (d < 0) return false;
  if (g.constant(n.inputs[0]) && g.constant(n.inputs[1])) return false;
  for (const auto& in : n.inputs)
    if (in.empty() || !residual_operand(g, in, y->shape)) return false;
  for (const Node& c : g.nodes)
    if (is_conv(c))
      for (const auto& in : c.inputs)
        if (in == n.outputs[0]) return false;
  return true;
}

std::set<std::string> residual_stream(const Graph& g) {
  // Readers of each value, then a pass from the last node to the first: every reader of a node
  // comes after it (the nodes are in topological order), so its membership is known by then.
  std::map<std::string, std::vector<const Node*>> readers;
  for (const Node& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) readers[in].push_back(&n);
  std::set<std::string> wide;
  std::set<const Node*> wide_adds;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    const Node& n = *it;
    if (n.outputs.empty() || n.outputs[0].empty()) continue;
    const auto r = readers.find(n.outputs[0]);
    if (r == readers.end()) continue;
    bool feeds_norm = false, feeds_stream = false;
    for (const Node* c : r->second) {
      if (c->domain.empty() && c->op == "LayerNormalization" && c->input(0) == n.outputs[0]) feeds_norm = true;
      if (wide_adds.count(c)) feeds_stream = true;
    }
    if (is_residual_add_candidate(g, n) && (feeds_norm || feeds_stream)) {
      wide_adds.insert(&n);
      wide.insert(n.outputs[0]);
    } else if (n.domain.empty() && n.op == "LayerNormalization" && feeds_stream) {
      const ValueInfo* y = g.value(n.outputs[0]);
      if (y && is_float_type(y->dtype)) wide.insert(n.outputs[0]);
    }
  }
  // Branch tails: the bias Add and LayerScale Mul that end a block's branch right before its
  // residual Add, read by nothing else.  Autocast adds the bias inside the matmul and multiplies
  // the LayerScale in fp32 (a bf16 tensor times a float32 parameter), so the branch is rounded
  // once; keeping their outputs in fp32 rounds it once here too (the matmul's output) instead of
  // once per op.
  std::map<std::string, const Node*> producer;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = &n;
  for (const Node* add : wide_adds)
    for (const auto& in : add->inputs) {
      std::string v = in;
      for (int depth = 0; depth < 4 && !wide.count(v); ++depth) {
        const auto p = producer.find(v);
        const auto r = readers.find(v);
        if (p == producer.end() || r == readers.end() || r->second.size() != 1) break;
        const std::string data = branch_tail_input(g, *p->second);
        if (data.empty()) break;
        bool graph_output = false;
        for (const auto& o : g.outputs) graph_output |= o.name == v;
        if (graph_output) break;
        wide.insert(v);
        v = data;
      }
    }
  return wide;
}

}  // namespace sluice
