#include "model/shape_math.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/graph_util.h"

namespace sluice {

namespace {

double scalar_value(const Tensor& t) {
  if (t.dtype == DType::F64) return t.data<double>()[0];
  if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16) return t.as_float()[0];
  return static_cast<double>(t.as_int64()[0]);
}

}  // namespace

int64_t slice_length(int64_t dim, int64_t& start, int64_t end, int64_t step) {
  // dim >= 0 and start, end end up within [-1, dim], so the differences below cannot overflow; the
  // step can be anything (INT64_MIN included), hence the unsigned division.
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return end > start ? static_cast<int64_t>(static_cast<uint64_t>(end - start - 1) / static_cast<uint64_t>(step)) + 1 : 0;
  }
  if (dim == 0) {
    start = 0;
    return 0;
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  const uint64_t down = 0 - static_cast<uint64_t>(step);  // |step|, also for INT64_MIN
  return start > end ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / down) + 1 : 0;
}

int64_t range_length(const Graph& g, const Node& n, const Tensor& start, const Tensor& limit, const Tensor& delta) {
  for (const Tensor* t : {&start, &limit, &delta})
    if (t->numel() != 1) throw InputError(str(node_context(g, n), "start, limit and delta must be scalars"));
  const double d = scalar_value(delta);
  if (d == 0) throw InputError(str(node_context(g, n), "delta 0"));
  const double length = std::ceil((scalar_value(limit) - scalar_value(start)) / d);
  if (!(length <= static_cast<double>(kMaxFoldedElements))) return -1;  // also NaN
  return length > 0 ? static_cast<int64_t>(length) : 0;  // a huge negative length is empty
}

}  // namespace sluice
