#pragma once
// The CPU engine's memory plan: every intermediate tensor gets an offset in one arena, computed once
// when the engine is built.  Tensors whose lifetimes (producing node to last reading node) do not
// overlap may share bytes, so the arena is much smaller than the sum of the tensors.
#include <cstddef>
#include <string>
#include <vector>

#include <unordered_set>

namespace sluice {
struct Graph;
struct Node;
}

namespace sluice::cpu {

struct PlannedTensor {
  std::string name;
  std::size_t bytes = 0;
  int first = 0;            // index of the producing node
  int last = 0;             // index of the last node reading it (first when none does)
  std::size_t offset = 0;   // in the arena, 64-byte aligned
};

struct MemoryPlan {
  std::vector<PlannedTensor> tensors;
  std::size_t arena_bytes = 0;   // peak: the arena's size
  std::size_t total_bytes = 0;   // sum of the planned tensors' (aligned) sizes, for comparison
  const PlannedTensor* find(const std::string& name) const;
};

// A tensor produced by a node and stored in the arena: lifetime and size.
struct TensorLife {
  std::string name;
  std::size_t bytes = 0;
  int first = 0, last = 0;
};

// Places the tensors: largest first, each at the lowest offset that no tensor alive at the same
// time occupies.  Deterministic for a given input.
MemoryPlan plan_memory(std::vector<TensorLife> tensors);

// Whether output k of `node` must be stored: the first output always, optional ones (MaxPool's
// Indices, TopK's indices, ...) only when a node or the graph reads them.  `read`: every name that
// some node reads.
bool output_needed(const Graph& g, const Node& node, std::size_t k, const std::unordered_set<std::string>& read);

// The lifetimes of `g`'s intermediate tensors: produced by a node and needed, neither a graph
// output nor an input or constant.
std::vector<TensorLife> intermediate_lifetimes(const Graph& g);

}  // namespace sluice::cpu
