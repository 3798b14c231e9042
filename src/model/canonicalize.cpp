#include "model/canonicalize.h"

#include <algorithm>

#include "core/error.h"
#include "model/graph_util.h"

namespace sluice {

namespace {

// Moves an ints attribute into a new int64 constant input at position `pos` (padding absent
// optional inputs with "").
void ints_attr_to_input(Graph& g, Node& n, const std::string& key, std::size_t pos) {
  if (!n.has(key)) return;
  const std::string c = add_int64_constant(g, n.name + "_" + key, n.get_ints(key));
  n.attrs.erase(key);
  if (n.inputs.size() <= pos) n.inputs.resize(pos + 1);
  n.inputs[pos] = c;
}

void float_attr_to_input(Graph& g, Node& n, const std::string& key, std::size_t pos) {
  if (!n.has(key)) return;
  const std::string c = add_float_constant(g, n.name + "_" + key, {n.get_float(key, 0.f)}, true);
  n.attrs.erase(key);
  if (n.inputs.size() <= pos) n.inputs.resize(pos + 1);
  n.inputs[pos] = c;
}

// Softmax before opset 13 flattens to 2-D at `axis` and normalises each row.  Rewrite it as exactly
// that: Shape, Flatten, Softmax over the last axis, Reshape back (Shape folds away later).
std::vector<Node> softmax_before_13(Graph& g, Node n) {
  const int64_t axis = n.get_int("axis", 1);
  const std::string x = n.input(0), y = n.outputs.at(0);
  Node shape;
  shape.op = "Shape";
  shape.name = unique_tensor_name(g, n.name + "_shape");
  shape.inputs = {x};
  shape.outputs = {unique_tensor_name(g, n.name + "_in_shape")};
  Node flat;
  flat.op = "Flatten";
  flat.name = unique_tensor_name(g, n.name + "_flatten");
  flat.inputs = {x};
  flat.outputs = {unique_tensor_name(g, n.name + "_2d")};
  flat.attrs["axis"] = Attribute::of_int(axis);
  Node sm = n;
  sm.attrs.clear();
  sm.attrs["axis"] = Attribute::of_int(-1);
  sm.inputs = {flat.outputs[0]};
  sm.outputs = {unique_tensor_name(g, n.name + "_2d_out")};
  Node back;
  back.op = "Reshape";
  back.name = unique_tensor_name(g, n.name + "_reshape");
  back.inputs = {sm.outputs[0], shape.outputs[0]};
  back.outputs = {y};
  return {shape, flat, sm, back};
}

}  // namespace

bool is_convertible_op(const std::string& op) { return op == "Upsample" || op == "Dropout"; }

bool is_sluice_op(const std::string& op) {
  return op == "FusedConv" || op == "Normalize" || op == "ArgMaxCast" || op == "Attention" || op == "Detections";
}

Tensor constant_node_value(const Graph& g, const Node& n) {
  if (n.has("value")) {
    const Attribute& a = n.attrs.at("value");
    if (a.kind != Attribute::Kind::Tensor || !a.t)
      throw InputError(str(node_context(g, n), "attribute 'value' is not a tensor"));
    return *a.t;
  }
  if (n.has("value_float")) return Tensor::from(DType::F32, {}, std::vector<float>{n.get_float("value_float", 0.f)});
  if (n.has("value_int")) return Tensor::from(DType::I64, {}, std::vector<int64_t>{n.get_int("value_int", 0)});
  if (n.has("value_floats")) {
    auto v = n.get_floats("value_floats");
    return Tensor::from(DType::F32, {static_cast<int64_t>(v.size())}, v);
  }
  if (n.has("value_ints")) {
    auto v = n.get_ints("value_ints");
    return Tensor::from(DType::I64, {static_cast<int64_t>(v.size())}, v);
  }
  throw InputError(str(node_context(g, n), "Constant without a numeric value (strings and sparse values are not supported)"));
}

void canonicalize_graph(Graph& g) {
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    if (n.op == "Dropout") {
      // Inference: the data passes through; the optional mask output must be unused.
      if (n.outputs.size() > 1 && !n.outputs[1].empty() && g.consumers(n.outputs[1]) > 0)
        throw InputError(str(node_context(g, n), "the Dropout mask output is used, which inference does not support"));
      n.op = "Identity";
      n.inputs.resize(1);
      n.outputs.resize(1);
      n.attrs.clear();
    } else if (n.op == "Upsample") {
      const std::string mode = n.get_string("mode", "nearest");
      std::string scales = n.input(1);
      if (n.has("scales")) scales = add_float_constant(g, n.name + "_scales", n.get_floats("scales"));
      n.op = "Resize";
      n.attrs.clear();
      n.attrs["mode"] = Attribute::of_string(mode);
      n.attrs["coordinate_transformation_mode"] = Attribute::of_string("asymmetric");
      n.attrs["nearest_mode"] = Attribute::of_string("floor");
      n.inputs = {n.input(0), "", scales};
    } else if ((n.op == "Squeeze" || n.op == "Unsqueeze") && g.opset < 13) {
      ints_attr_to_input(g, n, "axes", 1);
    } else if (n.op.rfind("Reduce", 0) == 0 && g.opset < (n.op == "ReduceSum" ? 13 : 18)) {
      ints_attr_to_input(g, n, "axes", 1);
    } else if (n.op == "Split" && g.opset < 13) {
      ints_attr_to_input(g, n, "split", 1);
    } else if (n.op == "Slice" && g.opset < 10) {
      const std::vector<int64_t> starts = n.get_ints("starts"), ends = n.get_ints("ends");
      const std::string a = n.has("axes") ? add_int64_constant(g, n.name + "_axes", n.get_ints("axes")) : "";
      n.inputs = {n.input(0), add_int64_constant(g, n.name + "_starts", starts),
                  add_int64_constant(g, n.name + "_ends", ends)};
      if (!a.empty()) n.inputs.push_back(a);
      n.attrs.clear();
    } else if (n.op == "Pad" && g.opset < 11) {
      ints_attr_to_input(g, n, "pads", 1);
      float_attr_to_input(g, n, "value", 2);
    } else if (n.op == "Clip" && g.opset < 11) {
      float_attr_to_input(g, n, "min", 1);
      float_attr_to_input(g, n, "max", 2);
    } else if (n.op == "Resize" && g.opset < 11) {
      n.inputs = {n.input(0), "", n.input(1)};
      if (!n.has("coordinate_transformation_mode"))
        n.attrs["coordinate_transformation_mode"] = Attribute::of_string("asymmetric");
      if (!n.has("nearest_mode")) n.attrs["nearest_mode"] = Attribute::of_string("floor");
    } else if (n.op == "Softmax" && g.opset < 13) {
      for (Node& m : softmax_before_13(g, n)) out.push_back(std::move(m));
      continue;
    } else if (n.op == "TopK" && g.opset < 10) {
      const std::string k = add_int64_constant(g, n.name + "_k", {n.get_int("k", 1)});
      n.attrs.erase("k");
      n.inputs = {n.input(0), k};
    } else if (n.op == "BatchNormalization" && n.get_int("spatial", 1) == 0) {
      throw InputError(str(node_context(g, n), "BatchNormalization with spatial=0 is not supported"));
    }
    // Trailing absent optional inputs carry no meaning; dropping them keeps input counts honest.
    while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
    out.push_back(std::move(n));
  }
  g.nodes = std::move(out);
  // The nodes now follow the newest spellings; engines read the opset to pick the form.
  g.opset = std::max(g.opset, kCanonicalOpset);
}

}  // namespace sluice
