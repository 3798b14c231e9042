#pragma once
// Small helpers shared by the loader and the graph passes (model/ internal; engines do not need it).
#include <string>
#include <vector>

#include "model/graph.h"

namespace sluice {

// Renames tensor `from` to `to` everywhere: node inputs and outputs, graph inputs and outputs,
// constants and inferred values.
void rename_tensor(Graph& g, const std::string& from, const std::string& to);

// Replaces every read of `from` (node inputs and graph outputs) by `to`; producers are untouched.
void replace_uses(Graph& g, const std::string& from, const std::string& to);

// A tensor or node name not yet used in `g`, built from `base`.
std::string unique_tensor_name(const Graph& g, const std::string& base);

// A new int64 / float constant in `g` under a fresh name derived from `base`; returns the name.
std::string add_int64_constant(Graph& g, const std::string& base, const std::vector<int64_t>& values, bool scalar = false);
std::string add_float_constant(Graph& g, const std::string& base, const std::vector<float>& values, bool scalar = false);

// Axis in [0, rank) from an ONNX axis in [-rank, rank); InputError naming the node otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const Graph& g, const Node& n);

// Numpy-style broadcast of two shapes; InputError naming the node when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const Graph& g, const Node& n);

// Whether `name` is one of the graph's outputs.
bool is_graph_output(const Graph& g, const std::string& name);

// The shape of `name` when shape inference knows every dimension, else nullptr.
const Shape* static_shape(const Graph& g, const std::string& name);

// Whether a pass's environment switch is set to "0" (the pass then leaves the graph as it is).
bool switched_off(const char* name);

// Transpose node t's perm for an input of `rank` dims, negative entries resolved (none given: the
// reversal); empty when it is no permutation of [0, rank).
std::vector<int64_t> transpose_permutation(const Node& t, std::size_t rank);

// "model.onnx: Conv 'conv1': " prefix for messages about one node.
std::string node_context(const Graph& g, const Node& n);

// Default-domain ops that are only accepted when constant folding removes them (shape arithmetic of
// the exporters), and ops the loader rewrites into supported ones.
bool is_fold_only_op(const std::string& op);

}  // namespace sluice
