#pragma once
// Copies that pick each output element from one input element chosen independently per axis:
// Slice, Pad (every mode), Tile and nearest-neighbour Resize.  Each axis gets a table from output
// index to input offset (already multiplied by the input stride), or -1 for "use the fill value".
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {

struct IndexMap {
  Shape out;                                  // output shape
  std::vector<std::vector<int64_t>> offsets;  // per axis: input offset of each output index, or -1
  std::size_t elem = 4;                       // element size in bytes
  uint64_t fill = 0;                          // bit pattern of the fill value (low `elem` bytes)
};

// Highest rank the gather handles (checked when the kernel is built).
constexpr std::size_t kMaxRank = 16;

namespace detail {
template <typename T>
void gather_rows(const IndexMap& m, const T* x, T* y, int64_t row_begin, int64_t row_end) {
  const std::size_t r = m.out.size();
  const int64_t inner = r ? m.out[r - 1] : 1;
  const int64_t* last = r ? m.offsets[r - 1].data() : nullptr;
  T fill;
  std::memcpy(&fill, &m.fill, sizeof(T));
  const std::size_t nd = r > 0 ? r - 1 : 0;  // outer axes (at most kMaxRank - 1)
  int64_t idx[kMaxRank] = {0};
  int64_t rem = row_begin;
  for (std::size_t d = nd; d-- > 0;) {
    idx[d] = rem % m.out[d];
    rem /= m.out[d];
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    int64_t base = 0;
    bool outside = false;
    for (std::size_t d = 0; d < nd; ++d) {
      const int64_t o = m.offsets[d][idx[d]];
      if (o < 0) outside = true;
      base += o;
    }
    T* yr = y + row * inner;
    if (r == 0) {
      yr[0] = x[0];
    } else if (outside) {
      for (int64_t j = 0; j < inner; ++j) yr[j] = fill;
    } else {
      for (int64_t j = 0; j < inner; ++j) yr[j] = last[j] < 0 ? fill : x[base + last[j]];
    }
    for (std::size_t d = nd; d-- > 0;) {
      if (++idx[d] < m.out[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace detail

inline void gather_by_map(const IndexMap& m, const void* x, void* y, ThreadPool& pool) {
  const int64_t inner = m.out.empty() ? 1 : m.out.back();
  const int64_t rows = inner == 0 ? 0 : shape_numel(m.out) / inner;
  const int64_t per_task = std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
  pool.parallel_for(chunk_count(rows, per_task), [&](int64_t t, int) {
    const int64_t b = t * per_task, e = std::min(rows, b + per_task);
    switch (m.elem) {
      case 1: detail::gather_rows(m, static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), b, e); break;
      case 2: detail::gather_rows(m, static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), b, e); break;
      case 4: detail::gather_rows(m, static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), b, e); break;
      default: detail::gather_rows(m, static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), b, e); break;
    }
  });
}

}  // namespace sluice::cpu
