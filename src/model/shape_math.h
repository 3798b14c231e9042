#pragma once
// The index arithmetic that constant evaluation (model/const_eval.h) and shape inference
// (model/shape_inference.h) both need, so that a folded value always has the shape inference gives
// it.  Evaluation reads shape inference's output shapes; shape inference reads only this, never the
// evaluator.
#include <cstdint>

#include "model/graph.h"

namespace sluice {

// Folding must not turn a model into gigabytes of constants (ConstantOfShape/Expand of a big shape):
// a value beyond this many elements is left to the engine.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 25;

// Clamped [start, end) with step for one axis of size `dim` (Slice's rules); returns the number of
// elements taken and leaves `start` at the first one.
int64_t slice_length(int64_t dim, int64_t& start, int64_t end, int64_t step);

// Range's element count from its scalar start, limit and delta: ceil((limit - start) / delta), 0 when
// negative, or -1 when it is above kMaxFoldedElements (or NaN).  InputError naming the node for
// non-scalars and delta 0.
int64_t range_length(const Graph& g, const Node& n, const Tensor& start, const Tensor& limit, const Tensor& delta);

}  // namespace sluice
