// The builder: graph values to tensor slots, nodes to steps (engine_internal.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/cuda/cuda_check.h"
#include "core/params.h"
#include "engine/cuda/engine_internal.h"
#include "engine/residual_stream.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/precision_types.h"
#include "model/op_arity.h"

namespace sluice::cuda {
namespace {

class FnStep final : public Step {
 public:
  FnStep(std::string label, StepFn fn) : Step(std::move(label)), fn_(std::move(fn)) {}
  void run(Context& ctx, const Bindings& b, cudaStream_t s) override { fn_(ctx, b, s); }

 private:
  StepFn fn_;
};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Host conversion of a constant to the engine's element type.
std::vector<uint8_t> convert_bytes(const Tensor& t, DType to) {
  if (t.dtype == to) return t.bytes;
  const std::vector<float> f = t.as_float();
  std::vector<uint8_t> out(f.size() * dtype_size(to));
  for (std::size_t i = 0; i < f.size(); ++i) {
    const uint64_t bits = scalar_bits(to, f[i]);
    std::memcpy(out.data() + i * dtype_size(to), &bits, dtype_size(to));   // little-endian: low bytes
  }
  return out;
}

}  // namespace

std::unique_ptr<Step> make_step(std::string label, StepFn fn) {
  return std::make_unique<FnStep>(std::move(label), std::move(fn));
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: SLUICE_THROW("cuDNN: element type ", dtype_name(t), " is not a float type");
  }
}

Builder::Builder(const sluice::Graph& g, Precision p) : graph(g), precision(p), compute(compute_dtype(p)) {
  // Channels-last wherever tensor cores run the convolutions: fp16, bf16 and tf32 (ResNet-50 on the
  // H200 2x faster than NCHW at tf32; DeepLabV3's large dilations need the atrous path for that,
  // ops_conv.cpp).  Plain fp32 stays NCHW, where cuDNN's FMA kernels are 2x faster.
  nhwc_ = p != Precision::FP32;
  const std::string layout = param_string("SLUICE_CUDA_LAYOUT");   // auto (the above), nchw or nhwc
  if (layout == "nchw") nhwc_ = false;
  else if (layout == "nhwc") nhwc_ = true;
  if (g.inputs.size() != 1)
    throw InputError(str("cuda engine: the graph has ", g.inputs.size(), " inputs; the engine runs graphs with one"));
  for (const auto& in : g.inputs) {
    TensorSlot s;
    s.name = in.name;
    s.dtype = in.dtype;
    s.shape = in.shape;
    s.bytes = in.bytes();
    s.where = Where::Input;
    raw_inputs_[in.name] = new_slot(std::move(s));
  }
  output_slots_.assign(g.outputs.size(), -1);
  // fp16/bf16: the residual stream of transformer blocks stays fp32 (engine/residual_stream.h).
  if (compute != DType::F32 && switch_on("SLUICE_CUDA_RESIDUAL_FP32")) wide_ = residual_stream(g);
}

int Builder::new_slot(TensorSlot s) {
  for (int64_t d : s.shape)
    if (d < 0) throw InputError(str("cuda engine: tensor '", s.name, "' has an unknown dimension: ", shape_str(s.shape)));
  slots.push_back(std::move(s));
  return static_cast<int>(slots.size()) - 1;
}

const ValueInfo& Builder::value(const std::string& name) const {
  const ValueInfo* v = graph.value(name);
  if (!v) throw InputError(str("cuda engine: tensor '", name, "' has no inferred type and shape"));
  return *v;
}

int64_t Builder::axis(const Node& n, int64_t a, int64_t rank) const {
  if (a < -rank || a >= rank) fail(n, "axis ", a, " is out of range for rank ", rank);
  return a < 0 ? a + rank : a;
}

const Tensor* Builder::const_input(const Node& n, std::size_t i) const {
  if (!has_input(n, i)) return nullptr;
  return graph.constant(n.input(i));
}

const Tensor& Builder::require_const(const Node& n, std::size_t i, const char* what) const {
  if (!has_input(n, i)) fail(n, what, " (input ", i, ") is missing");
  const Tensor* t = const_input(n, i);
  if (!t) fail(n, what, " (input '", n.input(i), "') must be a constant once the input shape is fixed");
  return *t;
}

std::vector<int64_t> Builder::const_ints(const Node& n, std::size_t i, const char* what) const {
  const Tensor& t = require_const(n, i, what);
  if (t.dtype != DType::I64 && t.dtype != DType::I32) fail(n, what, " must be int64 or int32, not ", dtype_name(t.dtype));
  return t.as_int64();
}

std::vector<float> Builder::const_floats(const Node& n, std::size_t i, const char* what) const {
  return require_const(n, i, what).as_float();
}

bool Builder::conv_runs_nhwc(const Node& n) const {
  if (!nhwc_ || !((n.op == "Conv" && n.domain.empty()) || (n.op == "FusedConv" && n.domain == "sluice"))) return false;
  const ValueInfo* x = graph.value(n.input(0));
  const Tensor* w = const_input(n, 1);
  if (!x || x->shape.size() != 4 || !w || w->shape.size() != 4) return false;
  return n.get_int("group", 1) == 1 || (fast_kernels() && is_depthwise(*this, n));   // ops_depthwise.cpp
}

bool Builder::consumers_want_nhwc(const std::string& name) const {
  if (!nhwc_) return false;
  for (const auto& o : graph.outputs)
    if (o.name == name) return false;
  bool any = false;
  for (const Node& c : graph.nodes)
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i] != name) continue;
      if (i != 0 || !conv_runs_nhwc(c)) return false;
      any = true;
    }
  return any;
}

int64_t Builder::stem_channels(const std::string& name) const {
  const ValueInfo& v = value(name);
  if (v.shape.size() != 4) return v.shape.empty() ? 0 : v.shape[1];
  const int64_t c = v.shape[1];
  static const int64_t pad = std::stoi(param_string("SLUICE_CUDA_STEM_PAD"));   // 0, 4 or 8
  if (pad == 0 || c >= pad || !consumers_want_nhwc(name)) return c;
  for (const Node* r : consumers(name))
    if (r->get_int("group", 1) != 1) return c;
  return (c + pad - 1) / pad * pad;
}

int Builder::input_raw(const Node& n, std::size_t i) {
  const std::string& name = n.input(i);
  if (name.empty()) fail(n, "input ", i, " is missing");
  const auto raw = raw_inputs_.find(name);
  if (raw != raw_inputs_.end()) return raw->second;
  return input(n, i);
}

int Builder::input(const Node& n, std::size_t i) { return input_as(n, i, false); }

int Builder::input_as(const Node& n, std::size_t i, bool nhwc) {
  const std::string& name = n.input(i);
  const auto raw = raw_inputs_.find(name);
  if (nhwc && raw != raw_inputs_.end() && !ids_.count(name) && slot(raw->second).shape.size() == 4 &&
      is_float(slot(raw->second).dtype)) {
    // A float graph input read channels-last first: converted to the compute type and transposed
    // in one pass (one read of the input, one write).
    const TensorSlot r = slot(raw->second);
    Shape padded = r.shape;
    padded[1] = stem_channels(name);
    const int id = temp(compute, padded, name + " (" + dtype_name(compute) + ", nhwc)");
    slots[static_cast<std::size_t>(id)].nhwc = true;
    NormalizeShape ns;
    ns.n = r.shape[0];
    ns.channels = r.shape[1];
    ns.channels_out = padded[1];
    ns.inner = r.shape[2] * r.shape[3];
    ns.nhwc = true;
    const DType from = r.dtype, to = compute;
    const int src = raw->second;
    add("convert input " + name + " to nhwc", {src, id}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      normalize(from, to, bd.at(src), bd.at(id), ns, nullptr, nullptr, s);
    }, "Convert");
    return ids_[name] = id;
  }
  const int id = input_any(n, i);
  if (slot(id).shape.size() != 4 || slot(id).nhwc == nhwc) return id;
  return relayout(id, nhwc);
}

int Builder::relayout(int src, bool nhwc) {
  const TensorSlot& s = slot(src);
  if (s.shape.size() != 4 || s.nhwc == nhwc) return src;
  const auto key = std::make_pair(src, nhwc);
  const auto hit = relayouts_.find(key);
  if (hit != relayouts_.end()) return hit->second;
  int id;
  if (s.shape[1] == 1 || (s.shape[2] == 1 && s.shape[3] == 1)) {
    // Same bytes in both orders: a view.
    TensorSlot a = s;
    a.name = s.name + (nhwc ? " (nhwc view)" : " (nchw view)");
    a.nhwc = nhwc;
    a.where = Where::Alias;
    a.index = s.where == Where::Alias ? s.index : src;
    a.offset = s.where == Where::Alias ? s.offset : 0;
    id = new_slot(std::move(a));
  } else {
    id = transposed(src, nhwc);
  }
  relayouts_[key] = id;
  return id;
}

int Builder::transposed(int src, bool nhwc) {
  const TensorSlot s = slot(src);
  const int dst = temp(s.dtype, s.shape, s.name + (nhwc ? " (nhwc)" : " (nchw)"));
  slots[static_cast<std::size_t>(dst)].nhwc = nhwc;
  // One batched transpose of [C, H*W] planes (or [H*W, C] ones back).
  const int64_t n = s.shape[0], c = s.shape[1], hw = s.shape[2] * s.shape[3];
  const int64_t rows = nhwc ? c : hw, cols = nhwc ? hw : c;
  const std::size_t es = dtype_size(s.dtype);
  if (n > 65535 || (rows + 31) / 32 > 65535) {
    CopyShape cs;   // beyond the transpose kernel's grid: the general strided copy: out [N, cols, rows] from in [N, rows, cols]
    cs.rank = 3;
    const int64_t od[3] = {n, cols, rows}, st[3] = {rows * cols, 1, cols};
    for (int d = 0; d < 3; ++d) { cs.out[d] = od[d]; cs.in_dim[d] = od[d]; cs.in_stride[d] = st[d]; }
    add(s.name + (nhwc ? " to nhwc" : " to nchw"), {src, dst},
        [=](Context&, const Bindings& bd, cudaStream_t st) { strided_copy(es, bd.at(src), bd.at(dst), cs, st); }, "Layout");
  } else {
    add(s.name + (nhwc ? " to nhwc" : " to nchw"), {src, dst},
        [=](Context&, const Bindings& bd, cudaStream_t st) { transpose_last2(es, bd.at(src), bd.at(dst), n, rows, cols, st); },
        "Layout");
  }
  return dst;
}

int Builder::input_any(const Node& n, std::size_t i) {
  const int id = input_stored(n, i);
  if (!is_wide(n.input(i)) || slot(id).dtype == compute) return id;
  // A residual-stream value read by an op that computes in the compute type: converted once.
  const auto hit = narrowed_.find(id);
  if (hit != narrowed_.end()) return hit->second;
  const TensorSlot s = slot(id);
  const int narrow = temp(compute, s.shape, s.name + " (" + dtype_name(compute) + ")");
  slots[static_cast<std::size_t>(narrow)].nhwc = s.nhwc;
  copy_or_cast("convert " + s.name + " to " + dtype_name(compute), id, narrow);
  return narrowed_[id] = narrow;
}

int Builder::input_stored(const Node& n, std::size_t i) {
  const std::string& name = n.input(i);
  if (name.empty()) fail(n, "input ", i, " is missing");
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;

  const auto raw = raw_inputs_.find(name);
  if (raw != raw_inputs_.end()) {
    const TensorSlot& r = slot(raw->second);
    if (r.dtype == internal(r.dtype)) return ids_[name] = raw->second;
    // Float32 model input under fp16/bf16: convert once, right before its first reader.
    TensorSlot s;
    s.name = name + " (" + dtype_name(compute) + ")";
    s.dtype = compute;
    s.shape = r.shape;
    s.bytes = static_cast<std::size_t>(r.numel()) * dtype_size(compute);
    const int id = new_slot(std::move(s));
    copy_or_cast("convert input " + name, raw->second, id);
    return ids_[name] = id;
  }

  if (const Tensor* t = graph.constant(name)) {
    TensorSlot s;
    s.name = name;
    s.dtype = internal(t->dtype);
    s.shape = t->shape;
    s.bytes = static_cast<std::size_t>(t->numel()) * dtype_size(s.dtype);
    s.where = Where::Constant;
    s.index = static_cast<int>(weights.size());
    weights.push_back(convert_bytes(*t, s.dtype));
    return ids_[name] = new_slot(std::move(s));
  }
  fail(n, "input '", name, "' is not produced by an earlier node");
}

int Builder::graph_output_slot(std::size_t k) {
  const ValueInfo& o = graph.outputs[k];
  const ValueInfo& v = graph.value(o.name) ? value(o.name) : o;
  TensorSlot s;
  s.name = o.name;
  s.dtype = v.dtype;
  s.shape = v.shape;
  s.bytes = v.bytes();
  s.where = Where::Output;
  s.index = static_cast<int>(k);
  const int id = new_slot(std::move(s));
  output_slots_[k] = id;
  return id;
}

int Builder::output(const Node& n, std::size_t i, bool nhwc) {
  if (!has_output(n, i)) return -1;
  const std::string& name = n.outputs[i];
  if (ids_.count(name) || raw_inputs_.count(name)) fail(n, "tensor '", name, "' is written twice");
  const ValueInfo& v = value(name);
  nhwc = nhwc && v.shape.size() == 4 && !is_wide(name);
  const DType t = stored(name, v.dtype);
  for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
    if (graph.outputs[k].name != name || output_slots_[k] != -1) continue;
    if (t == v.dtype && !nhwc) return ids_[name] = graph_output_slot(k);
    // Written in the compute type (or channels-last), converted into the output buffer after the node.
    const int tmp = temp(t, v.shape, name);
    slots[static_cast<std::size_t>(tmp)].nhwc = nhwc;
    pending_casts_.emplace_back(tmp, graph_output_slot(k));
    return ids_[name] = tmp;
  }
  const int id = temp(t, v.shape, name);
  slots[static_cast<std::size_t>(id)].nhwc = nhwc;
  return ids_[name] = id;
}

int Builder::temp(DType t, const Shape& s, const std::string& label) {
  TensorSlot slot;
  slot.name = label;
  slot.dtype = t;
  slot.shape = s;
  slot.bytes = static_cast<std::size_t>(shape_numel(s)) * dtype_size(t);
  return new_slot(std::move(slot));
}

int Builder::constant(const std::string& label, const Tensor& t) {
  TensorSlot s;
  s.name = label;
  s.dtype = t.dtype;
  s.shape = t.shape;
  s.bytes = t.nbytes();
  s.where = Where::Constant;
  s.index = static_cast<int>(weights.size());
  weights.push_back(t.bytes);
  return new_slot(std::move(s));
}

Tensor Builder::to_compute(const Tensor& t) const {
  Tensor out(internal(t.dtype), t.shape);
  out.bytes = convert_bytes(t, out.dtype);
  return out;
}

void Builder::alias_or_copy(const Node& n, std::size_t out_index, int src) {
  src = relayout(src, false);   // views reinterpret NCHW order
  const std::string& name = n.outputs.at(out_index);
  const ValueInfo& v = value(name);
  const TensorSlot& from = slot(src);
  if (static_cast<std::size_t>(shape_numel(v.shape)) * dtype_size(from.dtype) != from.bytes)
    fail(n, "output ", shape_str(v.shape), " does not have as many elements as input ", shape_str(from.shape));
  bool is_graph_output = false;
  for (const auto& o : graph.outputs) is_graph_output |= o.name == name;
  if (is_graph_output) {
    // Output buffers belong to the io set: the value has to be copied there.
    const int dst = output(n, out_index);
    copy_or_cast(n.name + " (copy)", src, dst);
    return;
  }
  if (ids_.count(name)) fail(n, "tensor '", name, "' is written twice");
  TensorSlot s;
  s.name = name;
  s.dtype = from.dtype;
  s.shape = v.shape;
  s.bytes = from.bytes;
  s.where = Where::Alias;
  s.index = from.where == Where::Alias ? from.index : src;
  s.offset = from.where == Where::Alias ? from.offset : 0;
  ids_[name] = new_slot(std::move(s));
}

void Builder::add(std::unique_ptr<Step> step, std::vector<int> uses, const std::string& kind) {
  step->kind = !kind.empty() ? kind : (current_ ? current_->op : "Copy");
  std::vector<int> seen;
  for (int id : uses) {
    if (id < 0 || std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    step->bytes += static_cast<double>(slot(id).bytes);
  }
  steps.push_back(std::move(step));
  step_slots.push_back(std::move(uses));
}

void Builder::copy_or_cast(const std::string& label, int src, int dst) {
  const TensorSlot& a = slot(src);
  const TensorSlot& b = slot(dst);
  if (a.dtype == b.dtype) {
    const std::size_t bytes = b.bytes;
    add(label, {src, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      CUDA_CHECK(cudaMemcpyAsync(bd.at(dst), bd.at(src), bytes, cudaMemcpyDeviceToDevice, s));
    }, "Copy");
  } else {
    const DType from = a.dtype, to = b.dtype;
    const int64_t n = b.numel();
    add(label, {src, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      cast(from, to, bd.at(src), bd.at(dst), n, s);
    }, "Convert");
  }
}

int Builder::graph_output(const std::string& name) {
  for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
    if (graph.outputs[k].name != name || output_slots_[k] != -1) continue;
    if (ids_.count(name)) return -1;
    return ids_[name] = graph_output_slot(k);
  }
  return -1;
}

std::vector<const Node*> Builder::consumers(const std::string& name) const {
  std::vector<const Node*> out;
  for (const Node& c : graph.nodes)
    for (const auto& in : c.inputs)
      if (in == name) {
        out.push_back(&c);
        break;
      }
  return out;
}

bool Builder::is_graph_output(const std::string& name) const {
  for (const auto& o : graph.outputs)
    if (o.name == name) return true;
  return false;
}

namespace {

using Lowering = bool (*)(Builder&, const Node&);

// The engine's op registry: each op key (model/op_arity.h: "Conv", "sluice.FusedConv") and the
// lowerings that take it, tried in order (an Add of integers falls through lower_elementwise to
// lower_index).  An op without a row is refused by name; `sluice check` reads the keys
// (implemented_ops), tests/unit/test_op_registry.cpp holds them to the model layer's op table and
// the GPU tests hold every key to a lowering that takes it (test_cuda_transformer_ops.cpp).
const std::map<std::string, std::vector<Lowering>>& registry() {
  static const std::map<std::string, std::vector<Lowering>> table = [] {
    std::map<std::string, std::vector<Lowering>> t;
    auto add = [&t](Lowering f, std::initializer_list<const char*> ops) {
      for (const char* op : ops) t[op].push_back(f);
    };
    add(lower_conv, {"Conv", "ConvTranspose", "sluice.FusedConv"});  // ops_conv.cpp
    add(lower_gemm, {"Gemm", "MatMul", "Einsum"});  // ops_gemm.cpp
    add(lower_elementwise, {  // ops_elementwise.cpp
        "Relu", "Sigmoid", "Tanh", "HardSwish", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal", "Floor", "Ceil",
        "Round", "Softplus", "Sin", "Cos", "LeakyRelu", "HardSigmoid", "Elu", "Gelu", "Sign", "Add", "Sub", "Mul", "Div",
        "Pow", "Max", "Min", "Mod", "Clip", "Cast", "BatchNormalization", "LayerNormalization", "GroupNormalization",
        "InstanceNormalization", "sluice.Normalize"});
    add(lower_layout, {  // ops_layout.cpp, ops_resize.cpp
        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Concat", "Split", "Slice",
        "Gather", "Pad", "Expand", "Tile", "Resize", "Upsample"});
    add(lower_reduce, {  // ops_reduce.cpp
        "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Softmax", "LogSoftmax", "ArgMax", "ArgMin",
        "TopK", "sluice.ArgMaxCast", "sluice.Detections"});
    add(lower_index, {  // ops_index.cpp; integer Add, Sub, Mul, Div, Mod, Max, Min too
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf",
        "Where", "GatherND", "ScatterND", "CumSum", "Trilu", "Range", "Col2Im", "Add", "Sub", "Mul", "Div", "Mod", "Max",
        "Min"});
    add(lower_attention, {"sluice.Attention"});  // ops_attention.cpp
    add(lower_sample, {"DepthToSpace", "SpaceToDepth", "GatherElements", "ScatterElements", "GridSample"});  // ops_sample.cpp
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> implemented_ops() {
  std::vector<std::string> ops;
  for (const auto& kv : registry()) ops.push_back(kv.first);
  return ops;
}

void Builder::lower_node(const Node& n) {
  if (skipped_.count(&n)) return;
  current_ = &n;
  const std::size_t first = steps.size();
  const std::string key = op_key(n.domain, n.op);
  const auto row = registry().find(key);
  if (row == registry().end()) fail(n, "op ", key, " is not implemented by the cuda engine");
  bool lowered = false;
  for (Lowering lower : row->second)
    if ((lowered = lower(*this, n))) break;
  if (!lowered) {
    std::string types;
    for (const auto& in : n.inputs)
      if (!in.empty()) types += str(types.empty() ? "" : ", ", graph.value(in) ? dtype_name(graph.value(in)->dtype) : "?");
    fail(n, "op ", key, " is not implemented by the cuda engine for inputs of types ", types);
  }
  // The node's FLOPs go to its main step: the first one named after it.
  for (std::size_t i = first; i < steps.size(); ++i) {
    if (steps[i]->label() != n.name) continue;
    std::vector<Shape> in, out;
    for (const auto& name : n.inputs) in.push_back(name.empty() ? Shape{} : (graph.value(name) ? graph.value(name)->shape : Shape{}));
    for (const auto& name : n.outputs) out.push_back(name.empty() || !graph.value(name) ? Shape{} : graph.value(name)->shape);
    for (std::size_t k = 0; k < in.size(); ++k)
      if (in[k].empty() && !n.input(k).empty() && graph.constant(n.input(k))) in[k] = graph.constant(n.input(k))->shape;
    steps[i]->flops = node_flops(n, in, out);
    break;
  }
  const auto pending = std::move(pending_casts_);
  pending_casts_.clear();
  for (const auto& [from, to] : pending) copy_or_cast("convert output " + slot(to).name, relayout(from, false), to);
  current_ = nullptr;
}

void Builder::lower_all() {
  for (const Node& n : graph.nodes) lower_node(n);
  // Outputs no node wrote: a graph input or constant passed through, or a value listed twice.
  for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
    if (output_slots_[k] != -1) continue;
    const std::string& name = graph.outputs[k].name;
    Node probe;
    probe.name = "graph output " + name;
    probe.op = "Output";
    probe.inputs = {name};
    const int src = input(probe, 0);   // NCHW
    copy_or_cast("output " + name, src, graph_output_slot(k));
  }
}

}  // namespace sluice::cuda
