#pragma once
// The static memory plan of the CUDA engine: every intermediate tensor gets a byte offset in one
// arena, computed once at start-up from the step where it is first written and the step where it
// is last read.  Tensors whose lifetimes overlap never share bytes; the others reuse them.
#include <cstddef>
#include <vector>

namespace sluice::cuda {

struct PlanItem {
  std::size_t bytes = 0;
  int first = 0;   // first step that writes it
  int last = 0;    // last step that reads it (inclusive; >= first)
};

struct MemoryPlan {
  std::vector<std::size_t> offsets;   // one per item, aligned
  std::size_t arena_bytes = 0;        // what the arena must hold
  std::size_t naive_bytes = 0;        // what one buffer per tensor would take (for reports and tests)
};

// Greedy by size: the largest tensors are placed first, each at the lowest aligned offset that does
// not overlap a placed tensor alive at the same time.  `alignment` must be a power of two.
MemoryPlan plan_memory(const std::vector<PlanItem>& items, std::size_t alignment = 256);

// True when no two items alive at the same step overlap and all fit in the arena (for tests).
bool plan_is_valid(const std::vector<PlanItem>& items, const MemoryPlan& plan);

}  // namespace sluice::cuda
