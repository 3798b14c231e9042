// ONNX protobuf -> graph IR.  The whole file is read into memory and parsed with a raised total-bytes
// limit (protobuf's default would refuse the 160 MB TorchScript exports).  Weights become host
// tensors; external data (the dynamo exporter's side file) is read from files beside the model and
// may not leave its folder.  Old-opset spellings are rewritten to the opset-13+ forms in
// canonicalize.cpp, so the passes and the engines see one form per op.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "model/canonicalize.h"
#include "model/graph_util.h"
#include "model/onnx_loader.h"
#include "model/op_arity.h"
#include "model/prepare.h"

namespace fs = std::filesystem;

namespace sluice {

namespace {

constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 21;
constexpr int64_t kMaxElements = int64_t(1) << 40;  // far above any real tensor, far below overflow

// The hint of a refusal of ops whose output sizes depend on the data (a detector's post-processing).
const char* const kDataSizedHint =
    "Sluice runs one graph of fixed shapes, and these ops give each sample a number of results that depends on "
    "its data (a detector's post-processing: score thresholds, NMS, the boxes kept).  Export the model without "
    "its post-processing (its raw class scores and boxes: DETR, RT-DETR, Deformable DETR, YOLOv5/v8 with "
    "nms=False, YOLOv10) and pass --outputs detections, which decodes them, suppresses overlaps and stores up "
    "to K boxes and their count per sample; torchvision's anchor-based detectors (RetinaNet, SSD, Faster R-CNN) "
    "have no such export: store their head outputs instead";

struct LoadContext {
  std::string path;       // the model file, for messages
  fs::path folder;        // where external data must live (canonical)
};

// The element size of the ONNX types Sluice holds; others are refused by name.
const char* onnx_type_name(int t) {
  switch (t) {
    case onnx::TensorProto::UINT16: return "uint16";
    case onnx::TensorProto::INT16: return "int16";
    case onnx::TensorProto::UINT32: return "uint32";
    case onnx::TensorProto::UINT64: return "uint64";
    case onnx::TensorProto::STRING: return "string";
    case onnx::TensorProto::COMPLEX64: return "complex64";
    case onnx::TensorProto::COMPLEX128: return "complex128";
    default: return "unknown";
  }
}

// Resolves an external-data location against the model folder; refuses anything that leaves it.
fs::path resolve_external(const LoadContext& ctx, const std::string& location, const std::string& tensor) {
  const fs::path loc(location);
  if (location.empty() || loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
    throw InputError(str(ctx.path, ": initializer '", tensor, "' has external data at '", location,
                         "': only paths relative to the model's folder are allowed"));
  for (const auto& part : loc)
    if (part == "..")
      throw InputError(str(ctx.path, ": initializer '", tensor, "' has external data at '", location,
                           "', which leaves the model's folder ('..')"));
  const fs::path full = ctx.folder / loc;
  std::error_code ec;
  if (!fs::exists(full, ec))
    throw InputError(str(ctx.path, ": external data file '", full.string(), "' of initializer '", tensor,
                         "' does not exist"));
  const fs::path real = fs::canonical(full, ec);
  if (ec) throw InputError(str(ctx.path, ": cannot resolve external data file '", full.string(), "': ", ec.message()));
  // A symlink inside the folder may still point outside it: compare the resolved paths.
  auto r = real.begin();
  for (auto f = ctx.folder.begin(); f != ctx.folder.end(); ++f, ++r)
    if (r == real.end() || *r != *f)
      throw InputError(str(ctx.path, ": external data file '", location, "' of initializer '", tensor,
                           "' resolves to '", real.string(), "', outside the model's folder"));
  if (!fs::is_regular_file(real, ec))
    throw InputError(str(ctx.path, ": external data '", location, "' of initializer '", tensor, "' is not a file"));
  return real;
}

Tensor read_external(const LoadContext& ctx, const onnx::TensorProto& tp, DType dt, const Shape& shape) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw InputError(str(ctx.path, ": initializer '", tp.name(), "' has a malformed external-data ", kv.key(),
                           " '", kv.value(), "'"));
    }
  }
  const fs::path file = resolve_external(ctx, location, tp.name());
  const int64_t size = static_cast<int64_t>(fs::file_size(file));
  const int64_t need = shape_numel(shape) * static_cast<int64_t>(dtype_size(dt));
  if (length < 0) length = need;
  if (length != need)
    throw InputError(str(ctx.path, ": initializer '", tp.name(), "' ", shape_str(shape), " needs ", need,
                         " bytes but its external data length is ", length));
  if (offset < 0 || offset > size || length > size - offset)
    throw InputError(str(ctx.path, ": initializer '", tp.name(), "' reads ", length, " bytes at offset ", offset, " of '",
                         location, "', which has only ", size, " bytes"));
  Tensor t(dt, shape);
  std::ifstream f(file, std::ios::binary);
  f.seekg(offset);
  f.read(reinterpret_cast<char*>(t.bytes.data()), length);
  if (!f) throw InputError(str(ctx.path, ": cannot read external data '", location, "' of initializer '", tp.name(), "'"));
  return t;
}

// Copies one typed repeated field into the tensor, converting to the element type.
template <typename Dst, typename Field>
void copy_field(const Field& field, Tensor& t, const LoadContext& ctx, const std::string& name) {
  if (static_cast<int64_t>(field.size()) != t.numel())
    throw InputError(str(ctx.path, ": initializer '", name, "' ", shape_str(t.shape), " holds ", field.size(),
                         " values instead of ", t.numel()));
  Dst* out = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

Tensor tensor_from_proto(const onnx::TensorProto& tp, const LoadContext& ctx) {
  const DType dt = dtype_from_onnx(tp.data_type());
  if (dt == DType::Undefined)
    throw InputError(str(ctx.path, ": tensor '", tp.name(), "' has element type ", onnx_type_name(tp.data_type()),
                         " (", tp.data_type(), "), which Sluice does not support"));
  if (tp.has_segment()) throw InputError(str(ctx.path, ": tensor '", tp.name(), "' is segmented, which Sluice does not support"));
  Shape shape(tp.dims().begin(), tp.dims().end());
  for (int64_t d : shape)
    if (d < 0) throw InputError(str(ctx.path, ": tensor '", tp.name(), "' has a negative dimension ", shape_str(shape)));
  // Sizes are checked against the data before anything is allocated: a corrupt file must not turn
  // into a huge allocation.
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d > 0 && numel > kMaxElements / d)
      throw InputError(str(ctx.path, ": tensor '", tp.name(), "' has an absurd shape ", shape_str(shape)));
    numel *= d;
  }
  const std::size_t need = static_cast<std::size_t>(numel) * dtype_size(dt);
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) return read_external(ctx, tp, dt, shape);
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != need)
      throw InputError(str(ctx.path, ": tensor '", tp.name(), "' ", shape_str(shape), " of ", dtype_name(dt), " has ",
                           tp.raw_data().size(), " bytes of raw data instead of ", need));
    Tensor t(dt, shape);
    if (need) std::memcpy(t.bytes.data(), tp.raw_data().data(), need);
    return t;
  }
  int64_t given = 0;
  switch (dt) {
    case DType::F32: given = tp.float_data_size(); break;
    case DType::F64: given = tp.double_data_size(); break;
    case DType::I64: given = tp.int64_data_size(); break;
    default: given = tp.int32_data_size(); break;
  }
  if (given != numel)
    throw InputError(str(ctx.path, ": tensor '", tp.name(), "' ", shape_str(shape), " holds ", given,
                         " values instead of ", numel));
  Tensor t(dt, shape);
  switch (dt) {
    case DType::F32: copy_field<float>(tp.float_data(), t, ctx, tp.name()); break;
    case DType::F64: copy_field<double>(tp.double_data(), t, ctx, tp.name()); break;
    case DType::I64: copy_field<int64_t>(tp.int64_data(), t, ctx, tp.name()); break;
    case DType::I32: copy_field<int32_t>(tp.int32_data(), t, ctx, tp.name()); break;
    case DType::U8: case DType::Bool: copy_field<uint8_t>(tp.int32_data(), t, ctx, tp.name()); break;
    case DType::I8: copy_field<int8_t>(tp.int32_data(), t, ctx, tp.name()); break;
    // float16 and bfloat16 travel as their bit patterns in int32_data.
    case DType::F16: case DType::BF16: copy_field<uint16_t>(tp.int32_data(), t, ctx, tp.name()); break;
    default: throw InputError(str(ctx.path, ": tensor '", tp.name(), "' has an unsupported element type"));
  }
  return t;
}

Attribute attribute_from_proto(const onnx::AttributeProto& ap, const Node& n, const LoadContext& ctx) {
  switch (ap.type()) {
    case onnx::AttributeProto::INT: return Attribute::of_int(ap.i());
    case onnx::AttributeProto::FLOAT: return Attribute::of_float(ap.f());
    case onnx::AttributeProto::STRING: return Attribute::of_string(ap.s());
    case onnx::AttributeProto::INTS: return Attribute::of_ints({ap.ints().begin(), ap.ints().end()});
    case onnx::AttributeProto::FLOATS: return Attribute::of_floats({ap.floats().begin(), ap.floats().end()});
    case onnx::AttributeProto::STRINGS: {
      Attribute a;
      a.kind = Attribute::Kind::Strings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      return a;
    }
    case onnx::AttributeProto::TENSOR: {
      Attribute a;
      a.kind = Attribute::Kind::Tensor;
      a.t = std::make_shared<Tensor>(tensor_from_proto(ap.t(), ctx));
      return a;
    }
    default:
      throw InputError(str(ctx.path, ": ", n.describe(), ": attribute '", ap.name(), "' has a type (",
                           ap.type(), ") that Sluice does not support (subgraphs, sparse tensors)"));
  }
}

ValueInfo value_from_proto(const onnx::ValueInfoProto& vp, const LoadContext& ctx) {
  ValueInfo v;
  v.name = vp.name();
  if (!vp.type().has_tensor_type())
    throw InputError(str(ctx.path, ": graph input/output '", vp.name(), "' is not a tensor"));
  const auto& tt = vp.type().tensor_type();
  v.dtype = dtype_from_onnx(tt.elem_type());
  if (v.dtype == DType::Undefined && tt.elem_type() != 0)
    throw InputError(str(ctx.path, ": graph input/output '", vp.name(), "' has element type ",
                         onnx_type_name(tt.elem_type()), ", which Sluice does not support"));
  // Symbolic dimensions ('batch_size', 'N') and missing ones are -1 until the job fixes them.
  if (tt.has_shape())
    for (const auto& d : tt.shape().dim()) v.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return v;
}

// An If's branch: its initializers and Constant nodes as constants, its nodes (canonicalized at the
// model's opset, nested Ifs' branches parsed the same way), and its outputs.  Any op may appear in
// a branch: the branch that is not taken is dropped, and what the taken one brings in is checked
// like every other node once the If is folded.
Graph subgraph_from_proto(const onnx::GraphProto& gp, const Node& owner, int64_t opset, const LoadContext& ctx, int depth);

// The names a branch reads from the scopes around it: read by its nodes (or by the branches of its
// nested Ifs, which list theirs as inputs) and defined by none of its nodes and constants.
std::vector<std::string> outer_names(const Graph& sg) {
  std::set<std::string> defined;
  for (const auto& kv : sg.constants) defined.insert(kv.first);
  for (const Node& n : sg.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  std::vector<std::string> outer;
  std::set<std::string> seen;
  auto read = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) outer.push_back(name);
  };
  for (const Node& n : sg.nodes)
    for (const auto& in : n.inputs) read(in);
  for (const auto& o : sg.outputs) read(o.name);
  return outer;
}

// Parses node proto `np` into n (op, names, attributes); an If's branches become Graph attributes
// and the outer names they read become its inputs after the condition (so that the order of nodes
// and the dead-node pass see them).
void node_from_proto(const onnx::NodeProto& np, Node& n, int64_t opset, const LoadContext& ctx, int depth) {
  for (const auto& ap : np.attribute()) {
    if (ap.type() == onnx::AttributeProto::GRAPH && n.op == "If" && n.domain.empty()) {
      if (depth > 32) throw InputError(str(ctx.path, ": ", n.describe(), ": Ifs nested more than 32 deep"));
      Attribute a;
      a.kind = Attribute::Kind::Graph;
      a.g = std::make_shared<Graph>(subgraph_from_proto(ap.g(), n, opset, ctx, depth + 1));
      n.attrs[ap.name()] = std::move(a);
      continue;
    }
    n.attrs[ap.name()] = attribute_from_proto(ap, n, ctx);
  }
  if (n.op != "If" || !n.domain.empty()) return;
  for (const char* branch : {"then_branch", "else_branch"}) {
    const auto it = n.attrs.find(branch);
    if (it == n.attrs.end() || it->second.kind != Attribute::Kind::Graph)
      throw InputError(str(ctx.path, ": ", n.describe(), ": the If has no ", branch, " graph"));
    if (it->second.g->outputs.size() != n.outputs.size())
      throw InputError(str(ctx.path, ": ", n.describe(), ": its ", branch, " has ", it->second.g->outputs.size(),
                           " outputs for the If's ", n.outputs.size()));
  }
  // The branches' outer names as the If's inputs 1.. (passes may rename those inputs; folding maps
  // the branch's names onto them by position: attribute "outer_names").
  Attribute outer;
  outer.kind = Attribute::Kind::Strings;
  std::set<std::string> have;
  for (const char* branch : {"then_branch", "else_branch"})
    for (const auto& name : outer_names(*n.attrs.at(branch).g))
      if (have.insert(name).second) outer.strings.push_back(name);
  n.inputs.resize(1);
  for (const auto& name : outer.strings) n.inputs.push_back(name);
  n.attrs["outer_names"] = std::move(outer);
}

Graph subgraph_from_proto(const onnx::GraphProto& gp, const Node& owner, int64_t opset, const LoadContext& ctx, int depth) {
  Graph sg;
  sg.source = ctx.path;
  sg.opset = opset;
  if (gp.input_size() > 0)
    throw InputError(str(ctx.path, ": ", owner.describe(), ": a branch graph with inputs (", gp.input(0).name(), ") is not an If's"));
  if (gp.sparse_initializer_size() > 0) throw InputError(str(ctx.path, ": sparse initializers are not supported"));
  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) throw InputError(str(ctx.path, ": an initializer of ", owner.describe(), " has no name"));
    sg.constants[init.name()] = tensor_from_proto(init, ctx);
  }
  int index = 0;
  for (const auto& np : gp.node()) {
    Node n;
    n.op = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? std::string() : np.domain();
    n.name = np.name().empty() ? str(owner.name, "/", n.op, "_", index) : np.name();
    ++index;
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    node_from_proto(np, n, opset, ctx, depth);
    check_node_has_output(sg, n);
    if (n.op == "Constant" && n.domain.empty() && n.outputs.size() == 1) {
      sg.constants[n.outputs[0]] = constant_node_value(sg, n);
      continue;
    }
    sg.nodes.push_back(std::move(n));
  }
  for (const auto& out : gp.output()) {
    ValueInfo v;
    v.name = out.name();
    sg.outputs.push_back(v);
  }
  canonicalize_graph(sg);
  return sg;
}

std::string read_whole_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(str(path, ": model file does not exist"));
  if (fs::is_directory(path, ec)) throw InputError(str(path, ": is a folder, not an ONNX model file"));
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw InputError(str(path, ": cannot open the model file"));
  const std::streamoff size = f.tellg();
  if (size > static_cast<std::streamoff>(INT_MAX))
    throw InputError(str(path, ": the model is ", size, " bytes, over protobuf's 2 GiB limit; export it with external data"));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  f.seekg(0);
  f.read(bytes.data(), size);
  if (!f) throw InputError(str(path, ": cannot read the model file"));
  return bytes;
}

}  // namespace

Graph load_onnx(const std::string& path) { return load_onnx_bytes(read_whole_file(path), path); }

namespace {

void parse_model(const std::string& bytes, const std::string& path, onnx::ModelProto& model) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw InputError(str(path, ": the model is ", bytes.size(), " bytes, over protobuf's 2 GiB limit; export it with external data"));
  {
    google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
    google::protobuf::io::CodedInputStream coded(&raw);
    coded.SetTotalBytesLimit(INT_MAX);
    if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
      throw InputError(str(path, ": not a valid ONNX model (the protobuf does not parse; corrupt or truncated file?)"),
                       "--model takes an ONNX file, as torch.onnx.export writes it (data_tools/export_model.py exports torchvision models)");
  }
  if (model.ir_version() <= 0 || !model.has_graph() || model.graph().node_size() == 0 ||
      model.graph().output_size() == 0)
    throw InputError(str(path, ": not a valid ONNX model (no IR version, no nodes or no outputs)"), "--model takes an ONNX file, as torch.onnx.export writes it (data_tools/export_model.py exports torchvision models)");
}

}  // namespace

ModelOps read_model_ops(const std::string& path) {
  onnx::ModelProto model;
  parse_model(read_whole_file(path), path, model);
  LoadContext ctx;
  ctx.path = path;
  ModelOps m;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") m.opset = op.version();
  std::set<std::string> inits;
  for (const auto& init : model.graph().initializer()) inits.insert(init.name());
  for (const auto& in : model.graph().input())
    if (!inits.count(in.name())) m.inputs.push_back(value_from_proto(in, ctx));
  int index = 0;
  for (const auto& np : model.graph().node()) {
    const bool onnx_domain = np.domain().empty() || np.domain() == "ai.onnx";
    m.nodes.push_back({onnx_domain ? np.op_type() : str(np.domain(), "::", np.op_type()),
                       np.name().empty() ? str(np.op_type(), "_", index) : np.name()});
    ++index;
  }
  return m;
}

Graph load_onnx_bytes(const std::string& bytes, const std::string& path) {
  onnx::ModelProto model;
  parse_model(bytes, path, model);

  LoadContext ctx;
  ctx.path = path;
  std::error_code ec;
  ctx.folder = fs::canonical(fs::absolute(path).parent_path(), ec);
  if (ec) throw InputError(str(path, ": cannot resolve the model's folder: ", ec.message()));

  Graph g;
  g.source = path;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") g.opset = op.version();
  if (g.opset == 0) throw InputError(str(path, ": the model imports no default-domain (ai.onnx) opset"));
  if (g.opset < kMinOpset || g.opset > kMaxOpset)
    throw InputError(str(path, ": opset ", g.opset, " is not supported (Sluice reads ai.onnx opsets ", kMinOpset,
                         " to ", kMaxOpset, ")"));

  const auto& gp = model.graph();
  if (gp.sparse_initializer_size() > 0)
    throw InputError(str(path, ": sparse initializers are not supported"));
  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) throw InputError(str(path, ": an initializer has no name"));
    g.constants[init.name()] = tensor_from_proto(init, ctx);
  }
  for (const auto& in : gp.input())
    if (!g.is_constant(in.name())) g.inputs.push_back(value_from_proto(in, ctx));
  for (const auto& out : gp.output()) g.outputs.push_back(value_from_proto(out, ctx));

  const auto& ops = supported_ops();
  const std::set<std::string> supported(ops.begin(), ops.end());
  std::map<std::string, std::string> unsupported;  // "op (domain)" -> first node using it
  int index = 0;
  for (const auto& np : gp.node()) {
    Node n;
    n.op = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? std::string() : np.domain();
    n.name = np.name().empty() ? str(n.op, "_", index) : np.name();
    ++index;
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    const bool known = n.domain.empty() && (is_fold_only_op(n.op) || is_convertible_op(n.op) ||
                                            (supported.count(n.op) && !is_sluice_op(n.op)));
    if (!known) {
      const std::string key = n.domain.empty() ? n.op : str(n.domain, "::", n.op);
      unsupported.emplace(key, n.name);
      continue;
    }
    node_from_proto(np, n, g.opset, ctx, 0);
    check_node_has_output(g, n);
    if (n.op == "Constant" && n.outputs.size() == 1) {
      g.constants[n.outputs[0]] = constant_node_value(g, n);
      continue;
    }
    g.nodes.push_back(std::move(n));
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& kv : unsupported) list += str(list.empty() ? "" : ", ", kv.first, " (node '", kv.second, "')");
    // Ops whose output sizes depend on the data: the detectors' post-processing.
    static const std::set<std::string> data_sized = {"NonZero", "NonMaxSuppression", "RoiAlign", "Loop", "Unique",
                                                     "Compress"};
    bool post = false;
    for (const auto& kv : unsupported) post = post || data_sized.count(kv.first) != 0;
    throw InputError(str(path, ": unsupported op", unsupported.size() > 1 ? "s " : " ", list),
                     post ? kDataSizedHint : "");
  }
  // Every tensor has one producer (a node, an initializer or a graph input).
  std::set<std::string> produced;
  for (const auto& in : g.inputs) produced.insert(in.name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && (!produced.insert(o).second || g.is_constant(o)))
        throw InputError(str(path, ": tensor '", o, "' written by ", n.describe(), " is also defined elsewhere"));
  // A graph output that is an initializer or a Constant needs a producer for the engines.
  for (const auto& o : g.outputs)
    if (g.is_constant(o.name))
      throw InputError(str(path, ": graph output '", o.name, "' is a constant, which Sluice does not support"));
  canonicalize_graph(g);
  for (const Node& n : g.nodes) check_node_arity(g, n);
  g.topo_sort();
  log_debug("loaded ", path, ": opset ", g.opset, ", ", g.nodes.size(), " nodes, ", g.constants.size(),
            " constants (", g.constant_bytes(), " bytes)");
  return g;
}

}  // namespace sluice
