#pragma once
// Sluice's graph IR: a close mirror of an ONNX graph (nodes name their input and output tensors by
// string) with constants held as host tensors and every value's type and shape once inferred.
// Loading (onnx_loader), the passes (prepare.h) and the engines all work on this one structure.
//
// Ops are ONNX ops of the default domain, plus Sluice's own in domain "sluice":
//   FusedConv   inputs X, W, [B], [Z]; Conv's attributes plus
//               activation: "" | "Relu" | "Clip" (clip_min, clip_max) | "LeakyRelu" (alpha) |
//                           "Gelu" (erf) | "GeluTanh"
//               y = act(conv(X, W) + B + Z)  (Z: residual, same shape as y)
//   Normalize   input X (uint8 or float), attributes scale (float), mean, std (floats, one per
//               channel of axis 1, or one for all): y = (float(x) * scale - mean[c]) / std[c]
//   ArgMaxCast  input X, attributes axis, to (onnx dtype of the index output: uint8 or int32):
//               ArgMax with keepdims=0 whose indices are written in the narrow type
//   Attention   inputs q [L..., S, D], k, v [L..., S_kv, Dv], [bias]; attributes scale (float),
//               layout "bhsd" (k is [L..., S_kv, D]), "bhds" (k given transposed, [L..., D, S_kv]) or "strided" (q, k, v, y strided views of [N, ...] tensors: model/attention_layout.cpp),
//               zero_masked_rows (int, default 0: a row whose scores are all -inf gives zeros, not NaN)
//               y = softmax(scale * q k^T + bias) v over the last axis, y [L..., S, Dv].  bias holds
//               P * S * S_kv values ([P, S, S_kv]) with P dividing the product of L: the scores'
//               matrix number i (L flattened) adds bias matrix i mod P (a [1, H, S, S] bias broadcast
//               over the batch, or Swin's [nW, H, N, N] windows of every image); with attribute
//               bias_group G (int, default 1) matrix i adds bias matrix (i / G) mod P instead (a
//               text encoder's padding mask [B, 1, S, S_kv] read per sample over its H heads: G = H);
//               with bias_rows 1 the bias matrices are [1, S_kv], one row for every query
//               ([B, 1, 1, S_kv]: the older exports' (1 - mask) * finfo.min)
//   Detections  a detector's outputs to boxes, scores and classes per sample (model/detections.h)
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace sluice {

struct Graph;

struct Attribute {
  // Graph: an If's then_branch / else_branch, kept only until the If is folded (model/fold_if.h).
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor, Graph };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0.f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<Tensor> t;
  std::shared_ptr<Graph> g;  // Kind::Graph: its nodes, constants and outputs (no inputs)

  static Attribute of_int(int64_t v) { Attribute a; a.kind = Kind::Int; a.i = v; return a; }
  static Attribute of_float(float v) { Attribute a; a.kind = Kind::Float; a.f = v; return a; }
  static Attribute of_string(std::string v) { Attribute a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Attribute of_ints(std::vector<int64_t> v) { Attribute a; a.kind = Kind::Ints; a.ints = std::move(v); return a; }
  static Attribute of_floats(std::vector<float> v) { Attribute a; a.kind = Kind::Floats; a.floats = std::move(v); return a; }
};

struct Node {
  std::string name;     // the ONNX node name, or a made-up one (op_type + index) when empty
  std::string op;       // op type: "Conv", "FusedConv", ...
  std::string domain;   // "" (ONNX default) or "sluice"
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;

  bool has(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t get_int(const std::string& key, int64_t dflt) const;
  float get_float(const std::string& key, float dflt) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> get_ints(const std::string& key, const std::vector<int64_t>& dflt = {}) const;
  std::vector<float> get_floats(const std::string& key, const std::vector<float>& dflt = {}) const;
  // Input i when present (non-empty name), else "".
  const std::string& input(std::size_t i) const;
  std::string describe() const;  // "Conv 'layer1.0.conv1'" for error messages
};

// Type and shape of one tensor.  A dimension of -1 is unknown (before shape inference).
struct ValueInfo {
  std::string name;
  DType dtype = DType::Undefined;
  Shape shape;
  std::size_t bytes() const { return static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype); }
};

struct Graph {
  std::string source;                 // the model file, for messages
  int64_t opset = 0;                  // default-domain opset of the model
                                      // (load_onnx rewrites old op spellings and raises it to at least
                                      // 18: see model/canonicalize.h)
  std::vector<ValueInfo> inputs;      // runtime inputs (not initializers), in model order
  // A prepared text model (model/prepare.h, TokenInputs): what each plane of its one input
  // [B, planes, L] holds ("input_ids", "attention_mask", ...); empty for any other graph.
  std::vector<std::string> input_planes;
  std::vector<ValueInfo> outputs;     // graph outputs, in model order
  // A prepared model that runs each batch as sub-batches (model/batch_adapt.h): how many, why, what
  // it costs and the export that avoids it, for the run's summary; "" otherwise.
  std::string batch_note;
  std::vector<Node> nodes;            // kept in topological order by every pass
  std::unordered_map<std::string, Tensor> constants;   // initializers, Constant nodes, folded values
  std::unordered_map<std::string, ValueInfo> values;   // every tensor's inferred type and shape

  bool is_constant(const std::string& name) const { return constants.count(name) != 0; }
  const Tensor* constant(const std::string& name) const;
  const ValueInfo* value(const std::string& name) const;
  // Index of the node producing `name`, or -1 (graph input or constant).
  int producer(const std::string& name) const;
  // How many node inputs and graph outputs read `name`.
  int consumers(const std::string& name) const;
  // Reorders nodes topologically; throws if the graph has a cycle or reads an undefined tensor.
  void topo_sort();
  // Total bytes of constants (weights).
  std::size_t constant_bytes() const;
  // One line per node, for `sluice inspect --model` and debugging.
  std::string summary() const;
};

}  // namespace sluice
