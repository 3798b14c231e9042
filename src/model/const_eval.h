#pragma once
// Evaluating a node on host tensors, for constant folding.  Covers the ops exporters use for shape
// arithmetic (Shape, Gather, Slice, Concat, Cast, Unsqueeze, arithmetic, Floor, Range, ...) and the
// cheap data movements applied to weights (Transpose, Reshape, DepthToSpace, GatherElements, ...).
// Heavy ops (Conv, MatMul beyond small sizes, pools, Resize, GridSample) are left to the engines even
// when their inputs are constant.  An evaluated value takes the shape that shape inference
// (model/shape_inference.h) gives the node; inference never evaluates.
#include <string>
#include <vector>

#include "model/graph.h"

namespace sluice {

// Evaluates `n` with its inputs in `inputs` (nullptr for an absent optional input).  Returns false
// when the op is not one the folder evaluates; throws InputError when the values are invalid.
// `input_shapes` gives the static shape of each input even when its value is not known (Shape, Size
// only need that); inputs[i] may be nullptr for those.
bool evaluate_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& inputs,
                   const std::vector<const Shape*>& input_shapes, std::vector<Tensor>& outputs);

// The default-domain ops evaluate_node evaluates (its table), sorted.
std::vector<std::string> evaluated_ops();

// Cast of a whole tensor to another element type (float -> int truncates toward zero).
Tensor cast_tensor(const Tensor& t, DType to);

}  // namespace sluice
