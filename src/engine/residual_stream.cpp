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
  return wide;
}

}  // namespace sluice
