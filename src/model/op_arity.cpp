#include "model/op_arity.h"

#include <unordered_map>

#include "core/error.h"
#include "model/graph_util.h"

namespace sluice {

namespace {

const std::unordered_map<std::string, OpArity>& onnx_table() {
  // {min_in, max_in, min_out, max_out}, in the canonical spellings (opset 13+ forms).
  static const std::unordered_map<std::string, OpArity> table = [] {
    std::unordered_map<std::string, OpArity> t;
    for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Identity", "Softmax", "Floor",
                           "Ceil", "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Not", "AveragePool",
                           "GlobalAveragePool", "Flatten", "Transpose", "ArgMax", "Shape", "Size", "Cast",
                           "ConstantOfShape", "Gelu", "Erf", "Tanh", "Sign", "Cos", "Sin", "Softplus", "Elu",
                           "LogSoftmax", "Round", "Selu", "Mish", "Softsign", "Tan", "Atan", "IsNaN", "IsInf",
                           "GlobalMaxPool", "ArgMin"})
      t[op] = {1, 1, 1, 1};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "MatMul", "Reshape",
                           "Gather", "Expand", "Tile", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor",
                           "GatherND", "CumSum"})
      t[op] = {2, 2, 1, 1};
    t["Conv"] = {2, 3, 1, 1};
    t["ConvTranspose"] = {2, 3, 1, 1};
    t["Gemm"] = {2, 3, 1, 1};
    t["BatchNormalization"] = {5, 5, 1, 5};  // training outputs (older opsets had up to 5) must stay unused
    t["Clip"] = {1, 3, 1, 1};
    t["Min"] = {1, kVariadic, 1, 1};
    t["Max"] = {1, kVariadic, 1, 1};
    t["Concat"] = {1, kVariadic, 1, 1};
    t["Where"] = {3, 3, 1, 1};
    t["MaxPool"] = {1, 1, 1, 2};
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1",
                           "ReduceSumSquare", "ReduceLogSumExp"})
      t[op] = {1, 2, 1, 1};
    t["LayerNormalization"] = {2, 3, 1, 3};
    t["GroupNormalization"] = {3, 3, 1, 1};
    t["InstanceNormalization"] = {3, 3, 1, 1};
    t["Split"] = {1, 2, 1, kVariadic};
    t["ScatterND"] = {3, 3, 1, 1};
    t["Einsum"] = {1, kVariadic, 1, 1};
    t["Trilu"] = {1, 2, 1, 1};
    t["Col2Im"] = {3, 3, 1, 1};
    t["Resize"] = {1, 4, 1, 1};
    t["Squeeze"] = {1, 2, 1, 1};
    t["Unsqueeze"] = {1, 2, 1, 1};
    t["TopK"] = {2, 2, 2, 2};
    t["Pad"] = {1, 4, 1, 1};
    t["Constant"] = {0, 0, 1, 1};
    t["Slice"] = {3, 5, 1, 1};
    t["Range"] = {3, 3, 1, 1};
    t["DepthToSpace"] = {1, 1, 1, 1};
    t["SpaceToDepth"] = {1, 1, 1, 1};
    t["GatherElements"] = {2, 2, 1, 1};
    t["ScatterElements"] = {3, 3, 1, 1};
    t["GridSample"] = {2, 2, 1, 1};
    t["If"] = {1, kVariadic, 1, kVariadic};  // the condition, then the outer values its branches read
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, OpArity>& sluice_table() {
  static const std::unordered_map<std::string, OpArity> table = {
      {"FusedConv", {2, 4, 1, 1}}, {"Normalize", {1, 1, 1, 1}}, {"ArgMaxCast", {1, 1, 1, 1}}, {"Attention", {3, 4, 1, 1}},
      {"Detections", {1, 2, 2, 2}}};
  return table;
}

// "1 input", "2 inputs", "2 to 3 inputs", "at least 1 input"
std::string count_text(std::size_t lo, std::size_t hi, const char* what) {
  const std::string one(what), many = one + "s";
  if (lo == hi) return str(lo, " ", lo == 1 ? one : many);
  if (hi == kVariadic) return str("at least ", lo, " ", lo == 1 ? one : many);
  return str(lo, " to ", hi, " ", many);
}

}  // namespace

const OpArity* op_arity(const std::string& domain, const std::string& op) {
  if (!domain.empty() && domain != "sluice") return nullptr;
  const auto& table = domain.empty() ? onnx_table() : sluice_table();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

void check_node_has_output(const Graph& g, const Node& n) {
  if (n.outputs.empty() || n.outputs[0].empty())
    throw InputError(str(node_context(g, n), "the node has no (named) output"));
}

void check_node_arity(const Graph& g, const Node& n) {
  const OpArity* a = op_arity(n.domain, n.op);
  if (!a) return;
  const std::size_t ni = n.inputs.size(), no = n.outputs.size();
  if (ni < a->min_in || ni > a->max_in)
    throw InputError(str(node_context(g, n), "has ", ni, " input", ni == 1 ? "" : "s", "; ", n.op, " takes ",
                         count_text(a->min_in, a->max_in, "input")));
  for (std::size_t i = 0; i < a->min_in; ++i)
    if (n.inputs[i].empty())
      throw InputError(str(node_context(g, n), "input ", i, " is required but left empty"));
  if (no < a->min_out || no > a->max_out)
    throw InputError(str(node_context(g, n), "has ", no, " output", no == 1 ? "" : "s", "; ", n.op, " gives ",
                         count_text(a->min_out, a->max_out, "output")));
  check_node_has_output(g, n);
}

}  // namespace sluice
