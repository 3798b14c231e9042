// Folding an If with a constant condition into the branch it takes (model/fold_if.h).
#include "model/fold_if.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "model/graph_util.h"
#include "model/op_arity.h"

namespace sluice {

namespace {

// A deep copy of branch `sg` with every name in `rename` replaced, nested branches included (ONNX
// forbids a branch to reuse a name visible from outside it, so a name means one tensor throughout).
Graph renamed(const Graph& sg, const std::map<std::string, std::string>& rename) {
  auto name = [&](const std::string& s) {
    const auto it = rename.find(s);
    return it == rename.end() ? s : it->second;
  };
  Graph out = sg;
  out.constants.clear();
  for (const auto& [k, t] : sg.constants) out.constants[name(k)] = t;
  for (Node& n : out.nodes) {
    for (auto& in : n.inputs) in = name(in);
    for (auto& o : n.outputs) o = name(o);
    for (auto& [key, a] : n.attrs) {
      if (a.kind == Attribute::Kind::Graph && a.g) a.g = std::make_shared<Graph>(renamed(*a.g, rename));
      if (key == "outer_names" && a.kind == Attribute::Kind::Strings)
        for (auto& s : a.strings) s = name(s);
    }
  }
  for (auto& o : out.outputs) o.name = name(o.name);
  return out;
}

bool condition_of(const Graph& g, const Node& n, bool& taken) {
  const Tensor* c = n.inputs.empty() ? nullptr : g.constant(n.inputs[0]);
  if (!c) return false;
  if (c->numel() != 1) throw InputError(str(node_context(g, n), "the If's condition holds ", c->numel(), " values, not one"));
  taken = c->dtype == DType::F32 || c->dtype == DType::F64 ? c->as_float().at(0) != 0.f : c->as_int64().at(0) != 0;
  return true;
}

}  // namespace

int fold_constant_ifs(Graph& g) {
  int folded = 0;
  std::set<std::string> names;  // every tensor name in use, so that prefixed names are new
  for (const auto& kv : g.constants) names.insert(kv.first);
  for (const auto& in : g.inputs) names.insert(in.name);
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs) names.insert(o);
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    bool taken = false;
    if (n.op != "If" || !n.domain.empty() || !condition_of(g, n, taken)) {
      out.push_back(std::move(n));
      continue;
    }
    const auto it = n.attrs.find(taken ? "then_branch" : "else_branch");
    if (it == n.attrs.end() || it->second.kind != Attribute::Kind::Graph || !it->second.g)
      throw InputError(str(node_context(g, n), "the If has no ", taken ? "then_branch" : "else_branch"));
    const Graph& branch = *it->second.g;
    std::string prefix = n.name + "/";
    for (int k = 2; names.count(prefix) || std::any_of(names.begin(), names.end(), [&](const std::string& s) {
                      return s.rfind(prefix, 0) == 0;
                    });
         ++k)
      prefix = str(n.name, "#", k, "/");
    std::map<std::string, std::string> rename;
    // The outer tensors the branch reads, under the names the If's inputs have now.
    const auto outer = n.attrs.find("outer_names");
    if (outer != n.attrs.end())
      for (std::size_t k = 0; k < outer->second.strings.size() && k + 1 < n.inputs.size(); ++k)
        rename[outer->second.strings[k]] = n.inputs[k + 1];
    for (const auto& kv : branch.constants) rename[kv.first] = prefix + kv.first;
    for (const Node& b : branch.nodes)
      for (const auto& o : b.outputs)
        if (!o.empty()) rename[o] = prefix + o;
    const Graph inlined = renamed(branch, rename);
    for (const auto& [k, t] : inlined.constants) {
      g.constants[k] = t;
      names.insert(k);
    }
    for (const Node& b : inlined.nodes) {
      Node m = b;
      m.name = prefix + b.name;
      check_node_arity(g, m);
      for (const auto& o : m.outputs) names.insert(o);
      out.push_back(std::move(m));
    }
    for (std::size_t k = 0; k < n.outputs.size() && k < inlined.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      Node id;
      id.op = "Identity";
      id.name = str(n.name, "/output_", k);
      id.inputs = {inlined.outputs[k].name};
      id.outputs = {n.outputs[k]};
      out.push_back(std::move(id));
    }
    ++folded;
  }
  g.nodes = std::move(out);
  if (folded) g.topo_sort();
  return folded;
}

}  // namespace sluice
