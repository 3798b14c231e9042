#include "engine/cpu/memory_plan.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "engine/cpu/kernel.h"
#include "model/graph.h"

namespace sluice::cpu {

const PlannedTensor* MemoryPlan::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

MemoryPlan plan_memory(std::vector<TensorLife> lives) {
  std::vector<std::size_t> order(lives.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (lives[a].bytes != lives[b].bytes) return lives[a].bytes > lives[b].bytes;
    if (lives[a].first != lives[b].first) return lives[a].first < lives[b].first;
    return lives[a].name < lives[b].name;
  });
  MemoryPlan plan;
  std::vector<const PlannedTensor*> placed;
  plan.tensors.reserve(lives.size());
  for (std::size_t i : order) {
    PlannedTensor t;
    t.name = lives[i].name;
    t.bytes = align64(std::max<std::size_t>(lives[i].bytes, 1));
    t.first = lives[i].first;
    t.last = std::max(lives[i].first, lives[i].last);
    plan.total_bytes += t.bytes;
    // Occupied ranges of the tensors alive at the same time, by offset.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (const PlannedTensor* p : placed)
      if (p->first <= t.last && t.first <= p->last) busy.emplace_back(p->offset, p->offset + p->bytes);
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (const auto& r : busy) {
      if (r.first >= at + t.bytes) break;  // the gap before this range fits
      at = std::max(at, r.second);
    }
    t.offset = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + t.bytes);
    plan.tensors.push_back(t);
    placed.push_back(&plan.tensors.back());
  }
  return plan;
}

bool output_needed(const Graph& g, const Node& node, std::size_t k, const std::unordered_set<std::string>& read) {
  if (k >= node.outputs.size() || node.outputs[k].empty()) return false;
  if (k == 0 || read.count(node.outputs[k])) return true;
  for (const auto& o : g.outputs)
    if (o.name == node.outputs[k]) return true;
  return false;
}

std::vector<TensorLife> intermediate_lifetimes(const Graph& g) {
  std::unordered_set<std::string> outside;  // stored elsewhere: inputs, constants, graph outputs
  for (const auto& v : g.inputs) outside.insert(v.name);
  for (const auto& v : g.outputs) outside.insert(v.name);
  for (const auto& kv : g.constants) outside.insert(kv.first);
  std::unordered_set<std::string> read;
  for (const auto& node : g.nodes)
    for (const auto& in : node.inputs) read.insert(in);
  std::unordered_map<std::string, std::size_t> index;
  std::vector<TensorLife> lives;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    for (const auto& in : node.inputs) {
      auto it = index.find(in);
      if (it != index.end()) lives[it->second].last = static_cast<int>(n);
    }
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      const std::string& out = node.outputs[k];
      if (out.empty() || outside.count(out) || !output_needed(g, node, k, read)) continue;
      if (index.count(out)) throw InputError(str("cpu engine: tensor '", out, "' is produced twice"));
      const ValueInfo* v = g.value(out);
      if (!v) throw InputError(str("cpu engine: ", node.describe(), ": no type and shape for output '", out, "'"));
      index[out] = lives.size();
      lives.push_back({out, v->bytes(), static_cast<int>(n), static_cast<int>(n)});
    }
  }
  return lives;
}

}  // namespace sluice::cpu
