#pragma once
// One spelling per op.  ONNX moved many attributes to inputs over the opsets (Squeeze/Unsqueeze axes
// at 13, Slice at 10, Pad and Clip at 11, ReduceMean axes at 18) and changed Softmax's meaning at 13.
// The loader rewrites the old spellings into the newest ones, so shape inference, constant folding
// and every engine kernel handle a single form:
//   Squeeze, Unsqueeze, ReduceMean   axes as input 1 (int64)
//   Slice                            starts, ends, axes, steps as inputs 1..4
//   Pad                              pads as input 1, constant_value as input 2
//   Clip                             min, max as inputs 1, 2
//   Resize                           X, roi, scales, sizes (opset 10 ones get asymmetric coordinates)
//   Softmax                          opset-13 meaning (one axis); older ones become Flatten, Softmax
//                                    over the last axis and Reshape back
//   TopK                             K as input 1
//   Upsample                         Resize;  Dropout  Identity (inference)
// Afterwards g.opset is raised to kCanonicalOpset (when lower), so an engine that picks a spelling by
// opset picks these.
#include <string>

#include "model/graph.h"

namespace sluice {

constexpr int64_t kCanonicalOpset = 18;

// Rewrites g's nodes (loaded at g.opset) into the forms above.
void canonicalize_graph(Graph& g);

// Ops the loader accepts because canonicalize_graph() rewrites them into supported ones.
bool is_convertible_op(const std::string& op);

// Sluice's own ops (domain "sluice").
bool is_sluice_op(const std::string& op);

// The value of a Constant node (value, value_float(s), value_int(s)); InputError for strings and
// sparse values.
Tensor constant_node_value(const Graph& g, const Node& n);

}  // namespace sluice
