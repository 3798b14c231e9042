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
#include "model/shape_inference.h"

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

// A text model: its token inputs become planes of one int64 input [B, planes, L], each model input
// a Gather of its plane (and a Cast where the model takes another integer type).  Returns the batch
// it was bound at, as bind_input.
int64_t bind_token_inputs(Graph& g, const PrepareOptions& o, bool pooling_mask) {
  if (g.inputs.empty()) throw InputError(str(g.source, ": the model has no runtime inputs"));
  const std::string known = "input_ids, attention_mask, token_type_ids, position_ids";
  std::vector<ValueInfo> model_ins = g.inputs;
  std::vector<std::string> planes;
  int64_t length = o.tokens.length, batch = o.batch_size;
  bool static_batch = false;
  for (const ValueInfo& in : model_ins) {
    if (std::find(std::begin(kTokenPlanes), std::end(kTokenPlanes), in.name) == std::end(kTokenPlanes))
      throw InputError(str(g.source, ": the model's input '", in.name, "' is none that Sluice fills from text (it feeds ", known, ")"),
                       "re-export the encoder with inputs of those names (the transformers names), or with only the ones it needs");
    if (std::find(planes.begin(), planes.end(), in.name) != planes.end())
      throw InputError(str(g.source, ": the model has two inputs named '", in.name, "'"));
    if (!in.shape.empty() && in.shape.size() != 2)
      throw InputError(str(g.source, ": the model's token input '", in.name, "' has shape ", shape_str(in.shape),
                           "; token inputs are [batch, length]"));
    if (in.dtype != DType::Undefined && in.dtype != DType::I64 && in.dtype != DType::I32 && in.dtype != DType::F32 &&
        in.dtype != DType::Bool)
      throw InputError(str(g.source, ": the model's token input '", in.name, "' is ", dtype_name(in.dtype),
                           "; Sluice feeds int64, int32, float32 or bool token inputs"));
    if (in.shape.size() == 2 && in.shape[1] > 0) {
      if (length > 0 && length != in.shape[1])
        throw InputError(str(g.source, ": the model fixes the sequence length of '", in.name, "' at ", in.shape[1],
                             " tokens and the job asks for ", length),
                         str("drop --max-length (or give ", in.shape[1], "), or re-export the model with a dynamic length"));
      length = in.shape[1];
    }
    if (in.shape.size() == 2 && in.shape[0] > 0 && in.shape[0] != o.batch_size) {
      if (static_batch && batch != in.shape[0])
        throw InputError(str(g.source, ": the model's token inputs fix different batch sizes (", batch, ", ", in.shape[0], ")"));
      static_batch = true;
      batch = in.shape[0];
    }
    planes.push_back(in.name);
  }
  if (length < 1)
    throw UsageError(str(g.source, ": the model's sequence length is dynamic; the job must say how many tokens a passage "
                                   "may have"),
                     "give --max-length N (the model folder's sentence_bert_config.json max_seq_length sets it when present)");
  if (pooling_mask && std::find(planes.begin(), planes.end(), "attention_mask") == planes.end())
    planes.push_back("attention_mask");
  for (const ValueInfo& in : model_ins)
    if (in.name == "input") {
      claim_name(g, "input");
      break;
    }
  // The model's inputs were renamed if one was called "input": look them up by their new names.
  std::vector<std::string> current;
  for (const ValueInfo& in : g.inputs) current.push_back(in.name);
  const Shape shape = {batch, static_cast<int64_t>(planes.size()), length};
  g.inputs = {ValueInfo{"input", DType::I64, shape}};
  g.input_planes = planes;
  std::vector<Node> front;
  for (std::size_t k = 0; k < model_ins.size(); ++k) {
    const ValueInfo& in = model_ins[k];
    const DType want = in.dtype == DType::Undefined ? DType::I64 : in.dtype;
    const std::string idx = add_int64_constant(g, "sluice_plane_" + in.name, {static_cast<int64_t>(k)}, true);
    const std::string gathered = want == DType::I64 ? current[k] : unique_tensor_name(g, in.name + "_i64");
    Node n = make_node(g, "Gather", "", {"input", idx}, {gathered});
    n.attrs["axis"] = Attribute::of_int(1);
    front.push_back(std::move(n));
    if (want != DType::I64) {
      Node c = make_node(g, "Cast", "", {gathered}, {current[k]});
      c.attrs["to"] = Attribute::of_int(dtype_to_onnx(want));
      front.push_back(std::move(c));
    }
  }
  g.nodes.insert(g.nodes.begin(), std::make_move_iterator(front.begin()), std::make_move_iterator(front.end()));
  return batch;
}

// The attention mask plane of a text model as float32 [B, L, 1], for pooling.
std::string pooling_mask(Graph& g, const std::string& base) {
  const auto& planes = g.input_planes;
  const auto it = std::find(planes.begin(), planes.end(), "attention_mask");
  if (it == planes.end()) SLUICE_THROW("pooling without an attention_mask plane");
  const std::string idx = add_int64_constant(g, base + "_mask_plane", {static_cast<int64_t>(it - planes.begin())}, true);
  const std::string m64 = unique_tensor_name(g, base + "_mask_i64");
  Node n = make_node(g, "Gather", "", {"input", idx}, {m64});
  n.attrs["axis"] = Attribute::of_int(1);
  g.nodes.push_back(std::move(n));
  const std::string mf = unique_tensor_name(g, base + "_mask_f32");
  Node c = make_node(g, "Cast", "", {m64}, {mf});
  c.attrs["to"] = Attribute::of_int(dtype_to_onnx(DType::F32));
  g.nodes.push_back(std::move(c));
  const std::string m3 = unique_tensor_name(g, base + "_mask");
  g.nodes.push_back(make_node(g, "Unsqueeze", "", {mf, add_int64_constant(g, base + "_mask_axis", {2})}, {m3}));
  return m3;
}

// A reduction over axis 1 (keepdims as given), its axes an input from opset 18 (13 for ReduceSum).
std::string reduce_axis1(Graph& g, const std::string& op, const std::string& x, bool keepdims, const std::string& base) {
  const std::string y = unique_tensor_name(g, base);
  Node r = make_node(g, op, "", {x}, {y});
  r.attrs["keepdims"] = Attribute::of_int(keepdims ? 1 : 0);
  if (g.opset >= (op == "ReduceSum" ? 13 : 18)) r.inputs.push_back(add_int64_constant(g, base + "_axes", {1}));
  else r.attrs["axes"] = Attribute::of_ints({1});
  g.nodes.push_back(std::move(r));
  return y;
}

std::string binary(Graph& g, const std::string& op, const std::string& a, const std::string& b, const std::string& base) {
  const std::string y = unique_tensor_name(g, base);
  g.nodes.push_back(make_node(g, op, "", {a, b}, {y}));
  return y;
}

// Tokens [B, L, D] (float32) pooled over the attention mask the sentence-transformers way
// (OutputSpec::pooling): [B, D * modes].
std::string pool_tokens(Graph& g, const std::string& y, const Shape& shape, const OutputSpec& s) {
  static const char* order[] = {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"};
  for (const auto& m : s.pooling)
    if (std::find_if(std::begin(order), std::end(order), [&](const char* o) { return m == o; }) == std::end(order))
      throw UsageError(str("pooling '", m, "' is not one of cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken"));
  const std::string base = s.name + "_pool";
  const std::string m = pooling_mask(g, base);  // [B, L, 1]
  const int64_t length = shape[1];
  std::string sum, count;  // the masked sum [B, D] and the token count [B, 1], shared by the means
  auto masked_sum = [&]() {
    if (sum.empty()) sum = reduce_axis1(g, "ReduceSum", binary(g, "Mul", y, m, base + "_masked"), false, base + "_sum");
    if (count.empty())
      count = binary(g, "Max", reduce_axis1(g, "ReduceSum", m, false, base + "_count"),
                     add_float_constant(g, base + "_min_count", {1e-9f}, true), base + "_count_safe");
  };
  std::vector<std::string> parts;
  for (const char* mode : order) {
    if (std::find(s.pooling.begin(), s.pooling.end(), mode) == s.pooling.end()) continue;
    const std::string name(mode);
    if (name == "cls") {
      const std::string v = unique_tensor_name(g, base + "_cls");
      Node n = make_node(g, "Gather", "", {y, add_int64_constant(g, base + "_first", {0}, true)}, {v});
      n.attrs["axis"] = Attribute::of_int(1);
      g.nodes.push_back(std::move(n));
      parts.push_back(v);
    } else if (name == "max") {
      // Masked tokens become -1e9 exactly (y * 0 + (0 - 1) * 1e9), kept ones y exactly.
      const std::string off = binary(g, "Mul", binary(g, "Sub", m, add_float_constant(g, base + "_one", {1.f}, true), base + "_m1"),
                                     add_float_constant(g, base + "_big", {1e9f}, true), base + "_off");
      parts.push_back(reduce_axis1(g, "ReduceMax", binary(g, "Add", binary(g, "Mul", y, m, base + "_ym"), off, base + "_ymax"),
                                   false, base + "_max"));
    } else if (name == "mean") {
      masked_sum();
      parts.push_back(binary(g, "Div", sum, count, base + "_mean"));
    } else if (name == "mean_sqrt_len_tokens") {
      masked_sum();
      const std::string root = unique_tensor_name(g, base + "_sqrt_count");
      g.nodes.push_back(make_node(g, "Sqrt", "", {count}, {root}));
      parts.push_back(binary(g, "Div", sum, root, base + "_mean_sqrt"));
    } else if (name == "weightedmean") {
      std::vector<float> w(static_cast<std::size_t>(length));
      for (int64_t i = 0; i < length; ++i) w[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
      const std::string wt = add_float_constant(g, base + "_weights", w);
      const std::string wt3 = unique_tensor_name(g, base + "_weights_3d");
      g.nodes.push_back(make_node(g, "Reshape", "", {wt, add_int64_constant(g, base + "_weights_shape", {1, length, 1})}, {wt3}));
      const std::string mw = binary(g, "Mul", m, wt3, base + "_mw");
      const std::string wsum = reduce_axis1(g, "ReduceSum", binary(g, "Mul", y, mw, base + "_wy"), false, base + "_wsum");
      const std::string wcount = binary(g, "Max", reduce_axis1(g, "ReduceSum", mw, false, base + "_wcount"),
                                        add_float_constant(g, base + "_min_wcount", {1e-9f}, true), base + "_wcount_safe");
      parts.push_back(binary(g, "Div", wsum, wcount, base + "_weighted"));
    } else {  // lasttoken: the last position whose mask is set (0 when none), picked by a one-hot
      std::vector<float> pos(static_cast<std::size_t>(length));
      for (int64_t i = 0; i < length; ++i) pos[static_cast<std::size_t>(i)] = static_cast<float>(i);
      const std::string p = unique_tensor_name(g, base + "_positions_3d");
      g.nodes.push_back(make_node(g, "Reshape", "", {add_float_constant(g, base + "_positions", pos),
                                                     add_int64_constant(g, base + "_positions_shape", {1, length, 1})}, {p}));
      const std::string last = reduce_axis1(g, "ReduceMax", binary(g, "Mul", m, p, base + "_mp"), true, base + "_last");
      const std::string hit = binary(g, "Equal", p, last, base + "_is_last");
      const std::string onehot = unique_tensor_name(g, base + "_onehot");
      Node c = make_node(g, "Cast", "", {hit}, {onehot});
      c.attrs["to"] = Attribute::of_int(dtype_to_onnx(DType::F32));
      g.nodes.push_back(std::move(c));
      parts.push_back(reduce_axis1(g, "ReduceSum", binary(g, "Mul", y, onehot, base + "_ylast"), false, base + "_lasttoken"));
    }
  }
  if (parts.size() == 1) return parts[0];
  const std::string v = unique_tensor_name(g, base + "_concat");
  Node n = make_node(g, "Concat", "", parts, {v});
  n.attrs["axis"] = Attribute::of_int(1);
  g.nodes.push_back(std::move(n));
  return v;
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
  if (shape.size() == 3 && !s.pooling.empty()) {
    if (g.input_planes.empty())
      throw UsageError(str("--pooling pools a text model's tokens; '", y, "' of ", g.source, " is not a text model's output"),
                       "leave --pooling out (the first token is taken)");
    std::string t = y;
    const ValueInfo* info = g.value(y);
    if (info && info->dtype != DType::F32 && info->dtype != DType::Undefined) {
      t = unique_tensor_name(g, s.name + "_tokens_f32");
      Node c = make_node(g, "Cast", "", {y}, {t});
      c.attrs["to"] = Attribute::of_int(dtype_to_onnx(DType::F32));
      g.nodes.push_back(std::move(c));
    }
    v = pool_tokens(g, t, shape, s);
  } else if (shape.size() == 3) {
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
  // The model layer's op table (model/shape_inference.h) less the ops that only fold, sluice ones
  // by their bare names.
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (const std::string& key : shape_rule_ops()) {
      const std::string op = key.rfind("sluice.", 0) == 0 ? key.substr(7) : key;
      if (!is_fold_only_op(op)) v.push_back(op);
    }
    return v;
  }();
  return ops;
}

Graph prepare_graph(Graph g, const PrepareOptions& o) {
  if (o.batch_size < 1) throw UsageError(str("batch size must be at least 1, got ", o.batch_size));
  if (!o.tokens.enabled) {
    if (o.sample_shape.empty()) throw UsageError("the sample shape is empty");
    for (int64_t d : o.sample_shape)
      if (d < 1) throw UsageError(str("the sample shape ", shape_str(o.sample_shape), " has a dimension below 1"));
    if (o.input_dtype != DType::F32 && o.input_dtype != DType::U8)
      throw UsageError(str("the input data type must be float32 or uint8, not ", dtype_name(o.input_dtype)));
  }
  if (g.outputs.empty()) throw InputError(str(g.source, ": the model has no outputs"));

  bool pools = false;
  for (const auto& s : o.outputs) pools = pools || (s.kind == OutputSpec::Kind::Embedding && !s.pooling.empty());
  const int64_t bound_batch = o.tokens.enabled ? bind_token_inputs(g, o, pools) : bind_input(g, o);
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
