#include "engine/cuda/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace sluice::cuda {
namespace {

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) & ~(a - 1); }
bool alive_together(const PlanItem& a, const PlanItem& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanItem>& items, std::size_t alignment) {
  SLUICE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment ", alignment, " is not a power of two");
  MemoryPlan plan;
  plan.offsets.assign(items.size(), 0);
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Largest first; equal sizes by first use, then index, so the plan does not depend on sort details.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
    return items[a].first < items[b].first;
  });

  std::vector<std::size_t> placed;
  for (std::size_t idx : order) {
    const PlanItem& it = items[idx];
    SLUICE_CHECK(it.first <= it.last, "tensor ", idx, " is read (step ", it.last, ") before it is written (step ",
                 it.first, ")");
    plan.naive_bytes += align_up(it.bytes, alignment);
    const std::size_t size = align_up(std::max<std::size_t>(it.bytes, 1), alignment);
    // The byte ranges of placed tensors alive at the same time, by offset.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (std::size_t p : placed)
      if (alive_together(items[p], it))
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + align_up(std::max<std::size_t>(items[p].bytes, 1), alignment));
    std::sort(busy.begin(), busy.end());
    std::size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + size <= lo) break;   // fits in the gap before this range
      offset = std::max(offset, hi);
    }
    plan.offsets[idx] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(idx);
  }
  return plan;
}

bool plan_is_valid(const std::vector<PlanItem>& items, const MemoryPlan& plan) {
  if (plan.offsets.size() != items.size()) return false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (plan.offsets[i] + items[i].bytes > plan.arena_bytes) return false;
    for (std::size_t j = i + 1; j < items.size(); ++j) {
      if (!alive_together(items[i], items[j]) || items[i].bytes == 0 || items[j].bytes == 0) continue;
      const bool disjoint = plan.offsets[i] + items[i].bytes <= plan.offsets[j] ||
                            plan.offsets[j] + items[j].bytes <= plan.offsets[i];
      if (!disjoint) return false;
    }
  }
  return true;
}

}  // namespace sluice::cuda
