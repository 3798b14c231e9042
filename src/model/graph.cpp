#include "model/graph.h"

#include <sstream>
#include <unordered_set>

#include "core/error.h"

namespace sluice {

namespace {
const Attribute* find_attr(const Node& n, const std::string& key) {
  auto it = n.attrs.find(key);
  return it == n.attrs.end() ? nullptr : &it->second;
}
}  // namespace

int64_t Node::get_int(const std::string& key, int64_t dflt) const {
  const Attribute* a = find_attr(*this, key);
  return a ? a->i : dflt;
}
float Node::get_float(const std::string& key, float dflt) const {
  const Attribute* a = find_attr(*this, key);
  return a ? a->f : dflt;
}
std::string Node::get_string(const std::string& key, const std::string& dflt) const {
  const Attribute* a = find_attr(*this, key);
  return a ? a->s : dflt;
}
std::vector<int64_t> Node::get_ints(const std::string& key, const std::vector<int64_t>& dflt) const {
  const Attribute* a = find_attr(*this, key);
  return a ? a->ints : dflt;
}
std::vector<float> Node::get_floats(const std::string& key, const std::vector<float>& dflt) const {
  const Attribute* a = find_attr(*this, key);
  return a ? a->floats : dflt;
}
const std::string& Node::input(std::size_t i) const {
  static const std::string kNone;
  return i < inputs.size() ? inputs[i] : kNone;
}
std::string Node::describe() const { return str(op, " '", name, "'"); }

const Tensor* Graph::constant(const std::string& name) const {
  auto it = constants.find(name);
  return it == constants.end() ? nullptr : &it->second;
}

const ValueInfo* Graph::value(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

int Graph::producer(const std::string& name) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (o == name) return static_cast<int>(i);
  return -1;
}

int Graph::consumers(const std::string& name) const {
  int n = 0;
  for (const auto& node : nodes)
    for (const auto& in : node.inputs)
      if (in == name) ++n;
  for (const auto& o : outputs)
    if (o.name == name) ++n;
  return n;
}

void Graph::topo_sort() {
  std::unordered_set<std::string> ready;
  for (const auto& in : inputs) ready.insert(in.name);
  for (const auto& kv : constants) ready.insert(kv.first);
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  std::vector<bool> done(nodes.size(), false);
  std::size_t remaining = nodes.size();
  while (remaining > 0) {
    bool progress = false;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (done[i]) continue;
      bool ok = true;
      for (const auto& in : nodes[i].inputs)
        if (!in.empty() && !ready.count(in)) { ok = false; break; }
      if (!ok) continue;
      for (const auto& o : nodes[i].outputs) ready.insert(o);
      sorted.push_back(std::move(nodes[i]));
      done[i] = true;
      --remaining;
      progress = true;
    }
    if (!progress) {
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (done[i]) continue;
        for (const auto& in : nodes[i].inputs)
          if (!in.empty() && !ready.count(in))
            throw InputError(str(source, ": ", nodes[i].describe(), " reads tensor '", in,
                                 "' that no node, input or initializer defines (or the graph has a cycle)"));
      }
    }
  }
  nodes = std::move(sorted);
}

std::size_t Graph::constant_bytes() const {
  std::size_t n = 0;
  for (const auto& kv : constants) n += kv.second.nbytes();
  return n;
}

std::string Graph::summary() const {
  std::ostringstream os;
  for (const auto& in : inputs) os << "input  " << in.name << " " << dtype_name(in.dtype) << shape_str(in.shape) << "\n";
  for (const auto& n : nodes) {
    os << n.op << " " << n.name << " (";
    for (std::size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << n.inputs[i];
    os << ") -> ";
    for (std::size_t i = 0; i < n.outputs.size(); ++i) {
      os << (i ? ", " : "") << n.outputs[i];
      if (const ValueInfo* v = value(n.outputs[i])) os << " " << dtype_name(v->dtype) << shape_str(v->shape);
    }
    os << "\n";
  }
  for (const auto& o : outputs) os << "output " << o.name << " " << dtype_name(o.dtype) << shape_str(o.shape) << "\n";
  return os.str();
}

}  // namespace sluice
