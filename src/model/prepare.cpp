// prepare_graph: bind the job's input, put preprocessing in front and output heads behind, then run
// the passes until every tensor has a static shape.
#include "model/prepare.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "model/batch_adapt.h"
#include "model/canonicalize.h"
#include "model/detections.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

bool any_reads(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    for (const auto& s : n.inputs) if (s == name) return true;
  for (const auto& n : g.nodes)
    for (const auto& s : n.outputs) if (s == name) return true;
  for (const auto& o : g.outputs) if (o.name == name) return true;
  return g.is_constant(name);
}

// Frees `name` for a new tensor by renaming whatever already carries it.
void claim_name(Graph& g, const std::string& name) {
  if (any_reads(g, name)) rename_tensor(g, name, unique_tensor_name(g, name + "_model"));
}

Node make_node(Graph& g, const std::string& op, const std::string& domain, std::vector<std::string> inputs,
               std::vector<std::string> outputs) {
  Node n;
  n.op = op;
  n.domain = domain;
  n.name = unique_tensor_name(g, "sluice_" + (outputs.empty() ? op : outputs[0]));
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

// Binds the model's input to the job's sample shape and returns the batch it was bound at: the job's,
// or the model's own when the model fixes it (adapt_batch takes it to the job's batch later).
int64_t bind_input(Graph& g, const PrepareOptions& o) {
  if (g.inputs.size() != 1) {
    std::string names;
    for (const auto& in : g.inputs) names += str(names.empty() ? "" : ", ", "'", in.name, "'");
    throw InputError(str(g.source, ": the model has ", g.inputs.size(), " runtime inputs (", names,
                         "); Sluice feeds exactly one"));
  }
  Shape job = {o.batch_size};
  job.insert(job.end(), o.sample_shape.begin(), o.sample_shape.end());
  const ValueInfo model_in = g.inputs[0];
  const bool static_batch = model_in.shape.size() == job.size() && model_in.shape[0] > 0 && model_in.shape[0] != o.batch_size;
  if (static_batch) job[0] = model_in.shape[0];
  bool fits = model_in.shape.empty() || model_in.shape.size() == job.size();
  for (std::size_t i = 0; fits && i < model_in.shape.size(); ++i) fits = model_in.shape[i] < 0 || model_in.shape[i] == job[i];
  if (!fits) {
    Shape shown = model_in.shape;
    std::string s = "[";
    for (std::size_t i = 0; i < shown.size(); ++i) s += str(i ? "," : "", shown[i] < 0 ? std::string("?") : std::to_string(shown[i]));
    job[0] = o.batch_size;
    // Name the fix: a rank mismatch or a channels-first/-last mix-up is the model's layout, anything
    // else the sample size the job makes.
    std::string hint;
    if (model_in.shape.size() != job.size())
      hint = str("the model takes ", model_in.shape.size(), "-d input; give samples of ", model_in.shape.size() - 1,
                 " dimensions (--sample-shape for synthetic input, or a dataset of that rank)");
    else if (job.size() == 4 && model_in.shape[3] == 3 && job[1] == 3)
      hint = "the model takes channels last (NHWC) and the input is channels first: re-export the model with NCHW input";
    else
      hint = str("make the samples ", s.substr(s.find(',') + 1), " (synthetic: --sample-shape; images: --resize/--center-crop ",
                 "to the model's height and width), or re-export the model with dynamic dimensions");
    throw InputError(str(g.source, ": the model's input '", model_in.name, "' has shape ", s, "] (? = dynamic) but the job feeds ",
                         shape_str(job), " (batch size ", o.batch_size, ", sample shape ", shape_str(o.sample_shape), ")"),
                     hint);
  }
  const DType model_type = model_in.dtype == DType::Undefined ? DType::F32 : model_in.dtype;
  if (model_in.name != "input") {
    claim_name(g, "input");
    rename_tensor(g, model_in.name, "input");
  }
  g.inputs[0] = ValueInfo{"input", o.input_dtype, job};

  // Preprocessing: Normalize (uint8 -> float, scale, mean, std), then a Cast if the model wants
  // another float type.
  std::string cur = "input";
  DType cur_type = o.input_dtype;
  const bool raw_u8_model = o.input_dtype == DType::U8 && model_type == DType::U8 && !o.normalize;
  if ((o.normalize || o.input_dtype == DType::U8) && !raw_u8_model) {
    const std::size_t channels = o.sample_shape.empty() ? 1 : static_cast<std::size_t>(o.sample_shape[0]);
    for (const auto* v : {&o.mean, &o.stddev})
      if (v->size() > 1 && v->size() != channels)
        throw UsageError(str("preprocessing has ", v->size(), " mean/std values but the input has ", channels, " channels"));
    for (float s : o.stddev)
      if (s == 0.f) throw UsageError("preprocessing: a std value is 0");
    const std::string y = unique_tensor_name(g, "input_normalized");
    replace_uses(g, "input", y);
    Node n = make_node(g, "Normalize", "sluice", {"input"}, {y});
    n.attrs["scale"] = Attribute::of_float(o.scale);
    n.attrs["mean"] = Attribute::of_floats(o.mean.empty() ? std::vector<float>{0.f} : o.mean);
    n.attrs["std"] = Attribute::of_floats(o.stddev.empty() ? std::vector<float>{1.f} : o.stddev);
    g.nodes.insert(g.nodes.begin(), std::move(n));
    cur = y;
    cur_type = DType::F32;
  }
  if (cur_type != model_type) {
    const std::string y = unique_tensor_name(g, "input_cast");
    replace_uses(g, cur, y);
    Node c = make_node(g, "Cast", "", {cur}, {y});
    c.attrs["to"] = Attribute::of_int(dtype_to_onnx(model_type));
    g.nodes.insert(g.nodes.begin() + (cur == "input" ? 0 : 1), std::move(c));
  }
  return job[0];
}

std::string cast_to(Graph& g, const std::string& x, DType to, const std::string& out) {
  Node c = make_node(g, "Cast", "", {x}, {out});
  c.attrs["to"] = Attribute::of_int(dtype_to_onnx(to));
  g.nodes.push_back(std::move(c));
  return out;
}

void check_float_spec(const OutputSpec& s) {
  if (s.dtype != DType::F32 && s.dtype != DType::F16 && s.dtype != DType::BF16)
    throw UsageError(str("output '", s.name, "' can be float32, float16 or bfloat16, not ", dtype_name(s.dtype)));
}

std::string outputs_text(const Graph& g) {
  std::string names;
  for (const auto& o : g.outputs) {
    const ValueInfo* v = g.value(o.name);
    names += str(names.empty() ? "" : ", ", "'", o.name, "'", v ? " " + shape_str(v->shape) : std::string());
  }
  return names;
}

// The model output the heads read: `wanted`, or the first.
std::size_t head_source(const Graph& g, const std::string& wanted) {
  if (wanted.empty()) return 0;
  for (std::size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i].name == wanted) return i;
  throw InputError(str(g.source, ": --model-output '", wanted, "' is not an output of the model; its outputs are ",
                       outputs_text(g)),
                   "give one of those names");
}

// The shape of a model output before the heads; folding has inferred it wherever the input's shape fixes it.
Shape known_shape(const Graph& g, const std::string& name, const char* head) {
  const ValueInfo* v = g.value(name);
  if (!v || v->shape.empty()) throw InputError(str(g.source, ": the model's output '", name, "' has no static shape; the ", head,
                                                   " head needs one"));
  return v->shape;
}

// Embedding: [B, D] as is, [B, T, D] its first token; then y / max(||y||_2, 1e-12) over D.
std::string add_embedding(Graph& g, const std::string& y, const OutputSpec& s, const std::string& out_f32) {
  const Shape shape = known_shape(g, y, "embedding");
  std::string v = y;
  if (shape.size() == 3) {
    v = unique_tensor_name(g, s.name + "_token0");
    const std::string zero = add_int64_constant(g, s.name + "_first", {0}, true);
    Node n = make_node(g, "Gather", "", {y, zero}, {v});
    n.attrs["axis"] = Attribute::of_int(1);
    g.nodes.push_back(std::move(n));
  } else if (shape.size() > 2 && std::all_of(shape.begin() + 2, shape.end(), [](int64_t d) { return d == 1; })) {
    // A CNN's pooled features [B, D, 1, 1].
    v = unique_tensor_name(g, s.name + "_flat");
    Node n = make_node(g, "Flatten", "", {y}, {v});
    n.attrs["axis"] = Attribute::of_int(1);
    g.nodes.push_back(std::move(n));
  } else if (shape.size() != 2) {
    throw InputError(str(g.source, ": --outputs embedding reads the model's output '", y, "' of shape ", shape_str(shape),
                         "; it needs [B, D] (a pooled vector), [B, D, 1, 1] or [B, T, D] (tokens: the first is taken)"),
                     "pick the output that holds the vector with --model-output");
  }
  if (!s.normalize) {
    g.nodes.push_back(make_node(g, "Identity", "", {v}, {out_f32}));
    return out_f32;
  }
  const std::string norm = unique_tensor_name(g, s.name + "_norm");
  Node r = make_node(g, "ReduceL2", "", {v}, {norm});
  r.attrs["keepdims"] = Attribute::of_int(1);
  // The axes moved from an attribute to an input at opset 18.
  if (g.opset >= 18) r.inputs.push_back(add_int64_constant(g, s.name + "_axes", {1}));
  else r.attrs["axes"] = Attribute::of_ints({1});
  g.nodes.push_back(std::move(r));
  const std::string safe = unique_tensor_name(g, s.name + "_norm_eps");
  g.nodes.push_back(make_node(g, "Max", "", {norm, add_float_constant(g, s.name + "_eps", {1e-12f}, true)}, {safe}));
  g.nodes.push_back(make_node(g, "Div", "", {v, safe}, {out_f32}));
  return out_f32;
}

// Detections: the layout is resolved here, from the shapes folding inferred, so the node reads only
// the outputs its format needs.
void add_detections(Graph& g, std::size_t source, const OutputSpec& s, const std::string& dets, const std::string& count) {
  const DetectionOptions& d = s.detection;
  if (d.max_detections < 1) throw UsageError(str("--max-detections must be at least 1, got ", d.max_detections));
  if (!(d.score_threshold >= 0.f && d.score_threshold < 1.f))
    throw UsageError(str("--score-threshold ", d.score_threshold, " is outside [0, 1)"));
  if (!(d.iou_threshold >= 0.f && d.iou_threshold <= 1.f))
    throw UsageError(str("--iou-threshold ", d.iou_threshold, " is outside [0, 1]"));
  std::vector<std::string> ins = {g.outputs[source].name};
  // DETR's pair: the chosen output is the class logits, the boxes the first other output.
  for (std::size_t i = 0; i < g.outputs.size() && ins.size() < 2; ++i)
    if (i != source && d.format != "yolo" && d.format != "yolov5" && d.format != "yolov10") ins.push_back(g.outputs[i].name);
  std::vector<Shape> shapes = {known_shape(g, ins[0], "detections")};
  const ValueInfo* second = ins.size() > 1 ? g.value(ins[1]) : nullptr;
  if (second && !second->shape.empty()) shapes.push_back(second->shape);
  else ins.resize(1);
  const DetectionLayout l = detection_layout(d.format, shapes);
  if (!l.pair()) ins.resize(1);  // detr, rtdetr: logits and boxes; yolo: one output
  const Shape& in = g.inputs.at(0).shape;  // [B, C, H, W]: DETR's boxes are fractions of it
  Node n = make_node(g, "Detections", "sluice", ins, {dets, count});
  n.attrs["format"] = Attribute::of_string(detection_kind_format(l.kind));
  n.attrs["score_threshold"] = Attribute::of_float(d.score_threshold);
  n.attrs["iou_threshold"] = Attribute::of_float(d.iou_threshold);
  n.attrs["max_detections"] = Attribute::of_int(d.max_detections);
  n.attrs["width"] = Attribute::of_int(in.size() == 4 ? in[3] : 1);
  n.attrs["height"] = Attribute::of_int(in.size() == 4 ? in[2] : 1);
  g.nodes.push_back(std::move(n));
}

void add_heads(Graph& g, const std::vector<OutputSpec>& specs, const std::string& model_output) {
  const std::size_t source = head_source(g, model_output);
  std::string y = g.outputs.at(source).name;
  for (const auto& s : specs) {
    const bool dets = s.kind == OutputSpec::Kind::Detections;
    const std::vector<std::string> stored = head_datasets(s);
    auto stores = [&](const std::string& name) { return std::find(stored.begin(), stored.end(), name) != stored.end(); };
    // A head's dataset named as the output it reads (as any of the model's outputs, for detections).
    bool clash = !dets && stores(y);
    for (const auto& o : g.outputs) clash = clash || (dets && stores(o.name));
    if (clash) {
      // The heads read the model's outputs under other names; remove_identities gives a name back when it can.
      for (auto& o : std::vector<ValueInfo>(g.outputs)) {
        if (o.name != y && !dets) continue;
        const std::string moved = unique_tensor_name(g, o.name + "_model");
        rename_tensor(g, o.name, moved);
        if (o.name == y) y = moved;
      }
      break;
    }
  }
  std::set<std::string> names;
  std::vector<ValueInfo> outputs;
  auto take = [&](const std::string& name) {
    if (name.empty() || !names.insert(name).second) throw UsageError(str("output name '", name, "' is empty or repeated"));
    claim_name(g, name);
    outputs.push_back(ValueInfo{name, DType::Undefined, {}});
  };
  for (const auto& s : specs) {
    switch (s.kind) {
      case OutputSpec::Kind::Logits:
        check_float_spec(s);
        take(s.name);
        if (s.dtype != DType::F32) cast_to(g, y, s.dtype, s.name);
        else g.nodes.push_back(make_node(g, "Identity", "", {y}, {s.name}));
        break;
      case OutputSpec::Kind::ArgMax: {
        DType t = s.dtype;
        if (t == DType::Undefined) {
          // Automatic: uint8 when the class axis fits in it, else int32.
          const ValueInfo* v = g.value(y);
          t = v && v->shape.size() >= 2 && v->shape[1] <= 256 ? DType::U8 : DType::I32;
        }
        if (t != DType::U8 && t != DType::I32)
          throw UsageError(str("output '", s.name, "' (argmax) can be uint8 or int32, not ", dtype_name(s.dtype)));
        take(s.name);
        Node n = make_node(g, "ArgMaxCast", "sluice", {y}, {s.name});
        n.attrs["axis"] = Attribute::of_int(1);
        n.attrs["to"] = Attribute::of_int(dtype_to_onnx(t));
        g.nodes.push_back(std::move(n));
        break;
      }
      case OutputSpec::Kind::Softmax: {
        check_float_spec(s);
        take(s.name);
        const std::string p = s.dtype == DType::F32 ? s.name : unique_tensor_name(g, s.name + "_f32");
        Node n = make_node(g, "Softmax", "", {y}, {p});
        n.attrs["axis"] = Attribute::of_int(1);
        g.nodes.push_back(std::move(n));
        if (p != s.name) cast_to(g, p, s.dtype, s.name);
        break;
      }
      case OutputSpec::Kind::TopK:
      case OutputSpec::Kind::TopKProbs: {
        check_float_spec(s);
        if (s.top_k < 1) throw UsageError(str("output '", s.name, "': top-k needs k >= 1, got ", s.top_k));
        const std::vector<std::string> names = head_datasets(s);
        const std::string vname = names.at(0), iname = names.at(1);
        take(vname);
        take(iname);
        std::string scores = y;
        if (s.kind == OutputSpec::Kind::TopKProbs) {
          // Probabilities over the whole class axis first: the top k of them are the top k logits'
          // classes, but their values need every class's exp in the denominator.
          scores = unique_tensor_name(g, s.name + "_softmax");
          Node sm = make_node(g, "Softmax", "", {y}, {scores});
          sm.attrs["axis"] = Attribute::of_int(1);
          g.nodes.push_back(std::move(sm));
        }
        const std::string k = add_int64_constant(g, s.name + "_k", {s.top_k});
        const std::string v = s.dtype == DType::F32 ? vname : unique_tensor_name(g, vname + "_f32");
        const std::string ix = unique_tensor_name(g, iname + "_i64");
        Node n = make_node(g, "TopK", "", {scores, k}, {v, ix});
        n.attrs["axis"] = Attribute::of_int(1);
        n.attrs["largest"] = Attribute::of_int(1);
        n.attrs["sorted"] = Attribute::of_int(1);
        g.nodes.push_back(std::move(n));
        if (v != vname) cast_to(g, v, s.dtype, vname);
        cast_to(g, ix, DType::I32, iname);
        break;
      }
      case OutputSpec::Kind::Embedding: {
        check_float_spec(s);
        take(s.name);
        const std::string e = s.dtype == DType::F32 ? s.name : unique_tensor_name(g, s.name + "_f32");
        add_embedding(g, y, s, e);
        if (e != s.name) cast_to(g, e, s.dtype, s.name);
        break;
      }
      case OutputSpec::Kind::Detections: {
        const std::vector<std::string> names = head_datasets(s);
        take(names.at(0));
        take(names.at(1));
        add_detections(g, source, s, names.at(0), names.at(1));
        break;
      }
    }
  }
  g.outputs = std::move(outputs);
}

// After folding, every op left must be one the engines run.
void check_ops(const Graph& g) {
  const auto& ops = supported_ops();
  const std::set<std::string> ok(ops.begin(), ops.end());
  for (const auto& n : g.nodes) {
    const bool sluice_op = n.domain == "sluice" && is_sluice_op(n.op);
    const bool onnx_op = n.domain.empty() && ok.count(n.op) && !is_sluice_op(n.op);
    if (sluice_op || onnx_op) continue;
    if (n.domain.empty() && is_fold_only_op(n.op))
      throw InputError(str(node_context(g, n), "op ", n.op, " is only supported in shape computations that fold to "
                           "constants once the input shape is fixed, and this one depends on the input data"));
    throw InputError(str(node_context(g, n), "unsupported op ", n.domain.empty() ? "" : n.domain + "::", n.op));
  }
}

}  // namespace

std::vector<std::string> head_datasets(const OutputSpec& spec) {
  switch (spec.kind) {
    case OutputSpec::Kind::TopK:
    case OutputSpec::Kind::TopKProbs:
      return {spec.name + "_values", spec.name + "_indices"};
    case OutputSpec::Kind::Detections:
      return {spec.name, spec.name + "_count"};
    default:
      return {spec.name};
  }
}

const std::vector<std::string>& supported_ops() {
  static const std::vector<std::string> ops = {
      "Conv", "ConvTranspose", "BatchNormalization", "Relu", "LeakyRelu", "Sigmoid", "Clip", "HardSigmoid",
      "HardSwish", "Add", "Sub", "Mul", "Div", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean",
      "Concat", "Resize", "Gemm", "MatMul", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Softmax",
      "ArgMax", "TopK", "Pad", "Identity", "Constant", "Shape", "Gather", "Slice", "Cast",
      // transformer-era models
      "LayerNormalization", "GroupNormalization", "InstanceNormalization", "Gelu", "Erf", "Tanh", "Split", "GatherND",
      "ScatterND", "Einsum", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
      "Xor", "IsNaN", "IsInf", "Cos", "Sin", "CumSum", "Expand", "Tile", "ConstantOfShape", "ReduceSum", "ReduceMax",
      "ReduceMin", "ReduceProd", "ReduceL2", "Trilu", "Sign", "Mod", "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal",
      "Floor", "Ceil", "Pow", "Min", "Max", "Softplus", "Elu", "LogSoftmax", "GlobalMaxPool", "ArgMin", "Round", "Col2Im",
      "DepthToSpace", "SpaceToDepth", "GatherElements", "ScatterElements", "GridSample",
      // domain "sluice" (model/graph.h)
      "FusedConv", "Normalize", "ArgMaxCast", "Attention", "Detections"};
  return ops;
}

Graph prepare_graph(Graph g, const PrepareOptions& o) {
  if (o.batch_size < 1) throw UsageError(str("batch size must be at least 1, got ", o.batch_size));
  if (o.sample_shape.empty()) throw UsageError("the sample shape is empty");
  for (int64_t d : o.sample_shape)
    if (d < 1) throw UsageError(str("the sample shape ", shape_str(o.sample_shape), " has a dimension below 1"));
  if (o.input_dtype != DType::F32 && o.input_dtype != DType::U8)
    throw UsageError(str("the input data type must be float32 or uint8, not ", dtype_name(o.input_dtype)));
  if (g.outputs.empty()) throw InputError(str(g.source, ": the model has no outputs"));

  const int64_t bound_batch = bind_input(g, o);
  g.topo_sort();
  // Folding first: the heads need the model output's shape (the class count picks argmax's type).
  fold_constants(g);
  if (!o.outputs.empty()) add_heads(g, o.outputs, o.model_output);
  remove_identities(g);
  respell_flat_gathers(g);  // torch.export's as_strided, which a fixed-batch model's batch trace cannot follow
  if (o.fuse) {
    fold_layer_scales(g);
    fold_batchnorm(g);
    fuse_convolutions(g);
    fuse_patch_convolutions(g);
    fuse_transformer_patterns(g);
    fuse_attention(g);
    push_transposes(g);     // before attention_layout, which reads the views the moved Transposes join
    attention_layout(g);
    drop_empty_pads(g);
    cancel_transposes(g);   // after the attention patterns, whose matchers read the exporters' transposes
    sequence_image_views(g);
    fuse_conv_gelu(g);
  }
  eliminate_dead_nodes(g);
  check_ops(g);
  if (bound_batch != o.batch_size) adapt_batch(g, bound_batch, o.batch_size, o.static_batch);
  infer_shapes(g);
  log_debug("prepared ", g.source, ": ", g.nodes.size(), " nodes, input ", shape_str(g.inputs[0].shape));
  return g;
}

}  // namespace sluice
