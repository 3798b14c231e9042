// Fuzz target (a'), structure-aware: the bytes are a recipe for an ONNX model instead of the model
// itself.  Random protobuf bytes rarely parse into a graph whose shapes mean anything, so the
// `onnx` target spends its time in the parser; here every byte picks something (an op, an input, an
// attribute, a value from a list of edge cases), the recipe is written out as a real ModelProto
// and goes through exactly what the `onnx` target runs: load_onnx_bytes, prepare_graph, the CPU
// engine.  Many ops get the wrong number of inputs or absurd attributes on purpose.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "model_check.h"

namespace {

// Reads choices from the input; past its end every choice is 0 (the recipe just ends).
class Recipe {
 public:
  Recipe(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool more() const { return i_ < n_; }
  unsigned byte() { return i_ < n_ ? d_[i_++] : 0; }
  unsigned pick(unsigned count) { return count ? byte() % count : 0; }
  template <typename T, size_t N>
  const T& pick_of(const T (&list)[N]) { return list[pick(N)]; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

const char* const kOps[] = {
    "Conv", "ConvTranspose", "BatchNormalization", "Relu", "LeakyRelu", "Sigmoid", "Clip", "HardSigmoid",
    "HardSwish", "Add", "Sub", "Mul", "Div", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Concat",
    "Resize", "Gemm", "MatMul", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Softmax", "ArgMax",
    "TopK", "Pad", "Identity", "Constant", "Shape", "Gather", "Slice", "Cast", "Floor", "Ceil", "ConstantOfShape",
    "Range", "Expand", "Equal", "Where", "Neg", "Abs", "Sqrt", "Reciprocal", "Size", "Less", "Greater", "Not", "Min",
    "Max", "Tile", "Exp", "Log", "Pow", "Mod", "Upsample", "Dropout"};

const int64_t kInts[] = {0, 1, 1, 1, 2, 2, 3, 4, -1, -1, -2, 5, 7, 64, 255, 256, int64_t(1) << 31, int64_t(1) << 62,
                         std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
const float kFloats[] = {0.f, 1.f, -1.f, 0.5f, 2.f, 3.f, 1e-5f, 1e30f, -1e30f, std::nanf(""),
                         std::numeric_limits<float>::infinity()};
const char* const kStrings[] = {"nearest", "linear", "cubic", "constant", "reflect", "edge", "SAME_UPPER",
                                "SAME_LOWER", "VALID", "NOTSET", "half_pixel", "asymmetric", "align_corners",
                                "pytorch_half_pixel", "floor", "round_prefer_floor", "stretch", ""};
const int kTypes[] = {onnx::TensorProto::FLOAT, onnx::TensorProto::INT64, onnx::TensorProto::INT32,
                      onnx::TensorProto::UINT8, onnx::TensorProto::BOOL, onnx::TensorProto::FLOAT16,
                      onnx::TensorProto::DOUBLE, onnx::TensorProto::INT8, onnx::TensorProto::BFLOAT16,
                      onnx::TensorProto::STRING};

enum class Kind { Int, Ints, Float, Floats, String, Tensor };
struct AttrSpec {
  const char* name;
  Kind kind;
};
const AttrSpec kAttrs[] = {
    {"axis", Kind::Int}, {"axes", Kind::Ints}, {"perm", Kind::Ints}, {"pads", Kind::Ints}, {"strides", Kind::Ints},
    {"kernel_shape", Kind::Ints}, {"dilations", Kind::Ints}, {"group", Kind::Int}, {"keepdims", Kind::Int},
    {"to", Kind::Int}, {"allowzero", Kind::Int}, {"transA", Kind::Int}, {"transB", Kind::Int}, {"alpha", Kind::Float},
    {"beta", Kind::Float}, {"epsilon", Kind::Float}, {"mode", Kind::String},
    {"coordinate_transformation_mode", Kind::String}, {"nearest_mode", Kind::String}, {"auto_pad", Kind::String},
    {"ceil_mode", Kind::Int}, {"largest", Kind::Int}, {"sorted", Kind::Int}, {"fmod", Kind::Int}, {"start", Kind::Int},
    {"end", Kind::Int}, {"value", Kind::Tensor}, {"value_int", Kind::Int}, {"value_ints", Kind::Ints},
    {"value_float", Kind::Float}, {"output_padding", Kind::Ints}, {"output_shape", Kind::Ints}, {"min", Kind::Float},
    {"max", Kind::Float}, {"k", Kind::Int}, {"scales", Kind::Floats}, {"starts", Kind::Ints}, {"ends", Kind::Ints},
    {"spatial", Kind::Int}, {"noop_with_empty_axes", Kind::Int}, {"keep_aspect_ratio_policy", Kind::String},
    {"select_last_index", Kind::Int}, {"exclude_outside", Kind::Int}, {"cubic_coeff_a", Kind::Float}};

// A small tensor: an int64 vector of edge-case values (the usual shape, axes or index operand), or
// a float tensor of a small shape.
void fill_tensor(Recipe& r, onnx::TensorProto& t, const std::string& name) {
  t.set_name(name);
  const unsigned form = r.pick(4);
  if (form < 2) {
    t.set_data_type(onnx::TensorProto::INT64);
    const unsigned n = r.pick(6);
    if (form == 1 || n != 1) t.add_dims(n);  // form 0 with one value: a scalar
    for (unsigned i = 0; i < n; ++i) t.add_int64_data(r.pick_of(kInts));
    return;
  }
  t.set_data_type(form == 2 ? onnx::TensorProto::FLOAT : r.pick_of(kTypes));
  const unsigned rank = r.pick(5);
  int64_t numel = 1;
  for (unsigned i = 0; i < rank; ++i) {
    const int64_t d = r.pick(5);
    t.add_dims(d);
    numel *= d;
  }
  const int type = t.data_type();
  // Raw bytes of the declared size (a few times out of eight, a wrong size on purpose).
  const int64_t elem = type == onnx::TensorProto::DOUBLE || type == onnx::TensorProto::INT64 ? 8
                       : type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::INT32 ? 4
                       : type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::BFLOAT16 ? 2 : 1;
  std::string raw(static_cast<size_t>(numel * elem) + (r.pick(8) == 0 ? 1 : 0), '\0');
  for (size_t i = 0; i < raw.size(); i += 4) {
    const float f = r.pick_of(kFloats);
    std::memcpy(&raw[i], &f, std::min<size_t>(4, raw.size() - i));
  }
  t.set_raw_data(raw);
}

void add_attribute(Recipe& r, onnx::NodeProto& n) {
  const AttrSpec& spec = r.pick_of(kAttrs);
  auto* a = n.add_attribute();
  a->set_name(spec.name);
  switch (spec.kind) {
    case Kind::Int:
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(spec.name == std::string("to") ? r.pick_of(kTypes) : r.pick_of(kInts));
      break;
    case Kind::Ints: {
      a->set_type(onnx::AttributeProto::INTS);
      const unsigned len = r.pick(7);
      for (unsigned i = 0; i < len; ++i) a->add_ints(r.pick_of(kInts));
      break;
    }
    case Kind::Float:
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(r.pick_of(kFloats));
      break;
    case Kind::Floats: {
      a->set_type(onnx::AttributeProto::FLOATS);
      const unsigned len = r.pick(5);
      for (unsigned i = 0; i < len; ++i) a->add_floats(r.pick_of(kFloats));
      break;
    }
    case Kind::String:
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(r.pick_of(kStrings));
      break;
    case Kind::Tensor:
      a->set_type(onnx::AttributeProto::TENSOR);
      fill_tensor(r, *a->mutable_t(), "");
      break;
  }
}

// The usual input and output counts of an op (any count, now and then).
void counts(Recipe& r, const std::string& op, unsigned& ins, unsigned& outs) {
  outs = op == "TopK" ? 2 : op == "MaxPool" || op == "BatchNormalization" || op == "Dropout" ? 1 + r.pick(2) : 1;
  if (op == "BatchNormalization") ins = 5;
  else if (op == "Slice" || op == "Resize" || op == "Pad") ins = 1 + r.pick(5);
  else if (op == "Where" || op == "Range" || op == "Clip" || op == "Conv" || op == "ConvTranspose" || op == "Gemm") ins = 3;
  else if (op == "Constant") ins = 0;
  else if (op == "Relu" || op == "Sigmoid" || op == "Softmax" || op == "Identity" || op == "Shape" || op == "Size" ||
           op == "Cast" || op == "Flatten" || op == "Transpose" || op == "ArgMax" || op == "Not" || op == "Neg" ||
           op == "Abs" || op == "Sqrt" || op == "Exp" || op == "Log" || op == "Floor" || op == "Ceil" ||
           op == "Reciprocal" || op == "LeakyRelu" || op == "HardSigmoid" || op == "HardSwish" ||
           op == "GlobalAveragePool" || op == "AveragePool" || op == "MaxPool" || op == "ConstantOfShape" ||
           op == "Upsample" || op == "Dropout")
    ins = 1;
  else ins = 2;
  if (r.pick(16) == 0) ins = r.pick(5);
  if (r.pick(32) == 0) outs = r.pick(3);
}

std::string build_model(Recipe& r) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  const int64_t opsets[] = {7, 9, 11, 13, 17, 18, 21};
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(r.pick_of(opsets));
  auto* g = m.mutable_graph();
  g->set_name("fuzz");
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(r.pick(8) ? onnx::TensorProto::FLOAT : onnx::TensorProto::UINT8);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  for (int i = 0; i < 3; ++i) tt->mutable_shape()->add_dim()->set_dim_value(4);  // the job feeds [2, 3|4, 4, 4]

  std::vector<std::string> tensors = {"x"};
  const unsigned nodes = 1 + r.pick(10);
  for (unsigned k = 0; k < nodes && r.more(); ++k) {
    auto* n = g->add_node();
    const std::string type = r.pick_of(kOps);
    n->set_op_type(type);
    n->set_name("n" + std::to_string(k));
    unsigned ins = 0, outs = 0;
    counts(r, type, ins, outs);
    for (unsigned i = 0; i < ins; ++i) {
      const unsigned how = r.pick(8);
      if (how == 0) {
        n->add_input("");  // an absent optional input
      } else if (how <= 3) {
        const std::string name = "c" + std::to_string(k) + "_" + std::to_string(i);
        fill_tensor(r, *g->add_initializer(), name);
        n->add_input(name);
      } else {
        n->add_input(tensors[r.pick(static_cast<unsigned>(tensors.size()))]);
      }
    }
    const unsigned attrs = r.pick(4);
    for (unsigned i = 0; i < attrs; ++i) add_attribute(r, *n);
    for (unsigned o = 0; o < outs; ++o) {
      const std::string name = "t" + std::to_string(k) + "_" + std::to_string(o);
      n->add_output(name);
      tensors.push_back(name);
    }
  }
  auto* y = g->add_output();
  y->set_name(tensors.back());
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m.SerializeAsString();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Recipe r(data, size);
  const unsigned heads = r.byte();
  const std::string model = build_model(r);
  // To look at a finding: SLUICE_FUZZ_DUMP=model.onnx build-fuzz/fuzz/fuzz_graph crash-...
  if (const char* dump = std::getenv("SLUICE_FUZZ_DUMP")) std::ofstream(dump, std::ios::binary) << model;
  sluice::fuzz::check_model(model, heads);
  return 0;
}
