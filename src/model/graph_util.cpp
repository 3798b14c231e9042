#include "model/graph_util.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "core/error.h"
#include "core/params.h"

namespace sluice {

void rename_tensor(Graph& g, const std::string& from, const std::string& to) {
  if (from == to) return;
  for (auto& n : g.nodes) {
    for (auto& s : n.inputs) if (s == from) s = to;
    for (auto& s : n.outputs) if (s == from) s = to;
  }
  for (auto& v : g.inputs) if (v.name == from) v.name = to;
  for (auto& v : g.outputs) if (v.name == from) v.name = to;
  auto c = g.constants.find(from);
  if (c != g.constants.end()) {
    Tensor t = std::move(c->second);
    g.constants.erase(c);
    g.constants[to] = std::move(t);
  }
  auto v = g.values.find(from);
  if (v != g.values.end()) {
    ValueInfo vi = std::move(v->second);
    g.values.erase(v);
    vi.name = to;
    g.values[to] = std::move(vi);
  }
}

void replace_uses(Graph& g, const std::string& from, const std::string& to) {
  for (auto& n : g.nodes)
    for (auto& s : n.inputs) if (s == from) s = to;
  for (auto& v : g.outputs) if (v.name == from) v.name = to;
}

std::string unique_tensor_name(const Graph& g, const std::string& base) {
  std::unordered_set<std::string> used;
  for (const auto& n : g.nodes) {
    used.insert(n.inputs.begin(), n.inputs.end());
    used.insert(n.outputs.begin(), n.outputs.end());
    used.insert(n.name);
  }
  for (const auto& v : g.inputs) used.insert(v.name);
  for (const auto& v : g.outputs) used.insert(v.name);
  for (const auto& kv : g.constants) used.insert(kv.first);
  for (const auto& kv : g.values) used.insert(kv.first);
  if (!used.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string name = str(base, "_", i);
    if (!used.count(name)) return name;
  }
}

std::string add_int64_constant(Graph& g, const std::string& base, const std::vector<int64_t>& values, bool scalar) {
  std::string name = unique_tensor_name(g, base);
  Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(values.size())};
  g.constants[name] = Tensor::from(DType::I64, shape, values);
  return name;
}

std::string add_float_constant(Graph& g, const std::string& base, const std::vector<float>& values, bool scalar) {
  std::string name = unique_tensor_name(g, base);
  Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(values.size())};
  g.constants[name] = Tensor::from(DType::F32, shape, values);
  return name;
}

std::string node_context(const Graph& g, const Node& n) {
  return str(g.source.empty() ? std::string("graph") : g.source, ": ", n.describe(), ": ");
}

int64_t normalize_axis(int64_t axis, int64_t rank, const Graph& g, const Node& n) {
  // A scalar has no axis at all: every op that takes one indexes the shape with it.
  if (rank < 1 || axis < -rank || axis >= rank)
    throw InputError(str(node_context(g, n), "axis ", axis, " is out of range for a tensor of rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const Graph& g, const Node& n) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      throw InputError(str(node_context(g, n), "shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast"));
  }
  return out;
}

bool is_fold_only_op(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      "Range", "Size", "If"};
  return ops.count(op) != 0;
}

bool is_graph_output(const Graph& g, const std::string& name) {
  for (const auto& o : g.outputs)
    if (o.name == name) return true;
  return false;
}

const Shape* static_shape(const Graph& g, const std::string& name) {
  const ValueInfo* v = g.value(name);
  if (!v) return nullptr;
  for (int64_t d : v->shape)
    if (d < 0) return nullptr;
  return &v->shape;
}

bool switched_off(const char* name) { return !param_on(name); }

std::vector<int64_t> transpose_permutation(const Node& t, std::size_t rank) {
  std::vector<int64_t> p = t.get_ints("perm");
  if (p.empty())
    for (std::size_t d = 0; d < rank; ++d) p.push_back(static_cast<int64_t>(rank - 1 - d));
  if (p.size() != rank) return {};
  std::vector<bool> seen(rank, false);
  for (auto& a : p) {
    if (a < 0) a += static_cast<int64_t>(rank);
    if (a < 0 || a >= static_cast<int64_t>(rank) || seen[static_cast<std::size_t>(a)]) return {};
    seen[static_cast<std::size_t>(a)] = true;
  }
  return p;
}

}  // namespace sluice
