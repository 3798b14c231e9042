// load_onnx and sha256_file on small ONNX files written here with the protobuf classes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "core/error.h"
#include "core/sha256.h"
#include "model/onnx_loader.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::TempDir;

namespace {

onnx::ModelProto base_model(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

void add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, int elem,
               const std::vector<int64_t>& dims, const std::string& dynamic_first = "") {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto* d = shape->add_dim();
    if (i == 0 && !dynamic_first.empty()) d->set_dim_param(dynamic_first);
    else d->set_dim_value(dims[i]);
  }
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& s : in) n->add_input(s);
  for (auto& s : out) n->add_output(s);
  return n;
}

// x [N,4] float -> Relu -> y
onnx::ModelProto relu_model() {
  onnx::ModelProto m = base_model();
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 4}, "batch_size");
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {1, 4}, "batch_size");
  add_node(m, "Relu", {"x"}, {"y"}, "relu");
  return m;
}

std::string save(const TempDir& dir, const std::string& name, const onnx::ModelProto& m) {
  const std::string path = dir.file(name);
  std::ofstream f(path, std::ios::binary);
  m.SerializeToOstream(&f);
  return path;
}

// The message of the InputError `fn` throws ("" when it throws none).
template <typename F>
std::string input_error(F fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

}  // namespace

TEST(OnnxLoader, ReadsInputsOutputsNodesAndSymbolicBatch) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  const Graph g = load_onnx(save(dir, "relu.onnx", m));
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.inputs[0].dtype, DType::F32);
  EXPECT_EQ(g.inputs[0].shape, (Shape{-1, 4}));  // dim_param 'batch_size' is dynamic
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0].name, "y");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "Relu");
  EXPECT_EQ(g.nodes[0].name, "relu");
  EXPECT_EQ(g.opset, 18);  // 17 is canonicalized to the opset-18 spellings
}

TEST(OnnxLoader, InitializersOfEveryDtypeAndEncodingBecomeConstants) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  auto* gp = m.mutable_graph();
  auto add_init = [&](const std::string& name, int type, std::vector<int64_t> dims) {
    auto* t = gp->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (auto d : dims) t->add_dims(d);
    return t;
  };
  add_init("f_typed", onnx::TensorProto::FLOAT, {2})->add_float_data(1.5f);
  gp->mutable_initializer(0)->add_float_data(-2.f);
  const float raw[3] = {0.25f, 8.f, -1.f};
  add_init("f_raw", onnx::TensorProto::FLOAT, {3})->set_raw_data(std::string(reinterpret_cast<const char*>(raw), 12));
  auto* i64 = add_init("i64", onnx::TensorProto::INT64, {2});
  i64->add_int64_data(-7);
  i64->add_int64_data(1ll << 40);
  auto* h = add_init("f16", onnx::TensorProto::FLOAT16, {2});
  h->add_int32_data(0x3C00);  // 1.0
  h->add_int32_data(0xC000);  // -2.0
  auto* bf = add_init("bf16", onnx::TensorProto::BFLOAT16, {1});
  bf->add_int32_data(0x4040);  // 3.0
  auto* u8 = add_init("u8", onnx::TensorProto::UINT8, {2});
  u8->add_int32_data(200);
  u8->add_int32_data(3);
  auto* d = add_init("f64", onnx::TensorProto::DOUBLE, {1});
  d->add_double_data(0.125);
  add_init("i32", onnx::TensorProto::INT32, {})->add_int32_data(-5);
  // An initializer listed among the graph inputs (old exporters do this) is not a runtime input.
  add_value(gp->mutable_input(), "f_raw", onnx::TensorProto::FLOAT, {3});

  const Graph g = load_onnx(save(dir, "inits.onnx", m));
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.constant("f_typed")->as_float(), (std::vector<float>{1.5f, -2.f}));
  EXPECT_EQ(g.constant("f_raw")->as_float(), (std::vector<float>{0.25f, 8.f, -1.f}));
  EXPECT_EQ(g.constant("i64")->as_int64(), (std::vector<int64_t>{-7, 1ll << 40}));
  EXPECT_EQ(g.constant("f16")->dtype, DType::F16);
  EXPECT_EQ(g.constant("f16")->as_float(), (std::vector<float>{1.f, -2.f}));
  EXPECT_EQ(g.constant("bf16")->as_float(), (std::vector<float>{3.f}));
  EXPECT_EQ(g.constant("u8")->as_int64(), (std::vector<int64_t>{200, 3}));
  EXPECT_EQ(g.constant("f64")->as_float(), (std::vector<float>{0.125f}));
  EXPECT_EQ(g.constant("i32")->shape, Shape{});
  EXPECT_EQ(g.constant("i32")->as_int64(), (std::vector<int64_t>{-5}));
}

TEST(OnnxLoader, RawDataOfTheWrongSizeIsAnInputError) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_raw_data(std::string(12, '\0'));
  const std::string msg = input_error([&] { load_onnx(save(dir, "bad.onnx", m)); });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("instead of 16"), std::string::npos) << msg;
}

TEST(OnnxLoader, ConstantNodesBecomeConstants) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  auto* c = add_node(m, "Constant", {}, {"k"});
  auto* a = c->add_attribute();
  a->set_name("value_ints");
  a->set_type(onnx::AttributeProto::INTS);
  a->add_ints(3);
  a->add_ints(4);
  auto* c2 = add_node(m, "Constant", {}, {"t"});
  auto* a2 = c2->add_attribute();
  a2->set_name("value");
  a2->set_type(onnx::AttributeProto::TENSOR);
  a2->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a2->mutable_t()->add_float_data(2.5f);
  const Graph g = load_onnx(save(dir, "const.onnx", m));
  EXPECT_EQ(g.nodes.size(), 1u);  // only the Relu is left
  EXPECT_EQ(g.constant("k")->as_int64(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(g.constant("t")->as_float(), (std::vector<float>{2.5f}));
  EXPECT_EQ(g.constant("t")->shape, Shape{});
}

TEST(OnnxLoader, OldOpsetSpellingsAreRewritten) {
  TempDir dir;
  onnx::ModelProto m = base_model(11);
  add_value(m.mutable_graph()->mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 3, 1, 4});
  add_value(m.mutable_graph()->mutable_output(), "y", onnx::TensorProto::FLOAT, {3, 4});
  auto* sq = add_node(m, "Squeeze", {"x"}, {"s"}, "sq");
  auto* ax = sq->add_attribute();
  ax->set_name("axes");
  ax->set_type(onnx::AttributeProto::INTS);
  ax->add_ints(0);
  ax->add_ints(2);
  add_node(m, "Dropout", {"s"}, {"d"}, "drop");
  auto* sm = add_node(m, "Softmax", {"d"}, {"y"}, "sm");
  auto* a = sm->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  const Graph g = load_onnx(save(dir, "old.onnx", m));
  EXPECT_GE(g.opset, 18);
  const Node* s = test::find_op(g, "Squeeze");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->has("axes"));
  ASSERT_EQ(s->inputs.size(), 2u);
  EXPECT_EQ(g.constant(s->inputs[1])->as_int64(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(test::count_ops(g, "Dropout"), 0);
  EXPECT_EQ(test::count_ops(g, "Identity"), 1);
  // Softmax-11 over axis 1 = Flatten(1), Softmax(-1), Reshape back to the input's shape.
  EXPECT_EQ(test::count_ops(g, "Flatten"), 1);
  EXPECT_EQ(test::count_ops(g, "Reshape"), 1);
  EXPECT_EQ(test::find_op(g, "Softmax")->get_int("axis", 0), -1);
  EXPECT_EQ(test::find_op(g, "Reshape")->outputs[0], "y");
}

TEST(OnnxLoader, ExternalDataHonoursLocationOffsetAndLength) {
  TempDir dir;
  const float w[4] = {1.f, 2.f, 3.f, 4.f};
  write_bytes(dir.file("model.onnx.data"), std::string("PADDING!") + std::string(reinterpret_cast<const char*>(w), 16));
  onnx::ModelProto m = relu_model();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->add_dims(2);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto kv = [&](const std::string& k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "model.onnx.data");
  kv("offset", "8");
  kv("length", "16");
  const Graph g = load_onnx(save(dir, "model.onnx", m));
  EXPECT_EQ(g.constant("w")->shape, (Shape{2, 2}));
  EXPECT_EQ(g.constant("w")->as_float(), (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
}

namespace {
onnx::ModelProto external_model(const std::string& location) {
  onnx::ModelProto m = relu_model();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(1);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  return m;
}
}  // namespace

TEST(OnnxLoader, ExternalDataOutsideTheModelFolderIsRefused) {
  TempDir outer;
  std::filesystem::create_directories(outer.path() / "models");
  write_bytes(outer.file("secret.bin"), std::string(4, 'x'));
  const std::string models = (outer.path() / "models").string();
  auto check = [&](const std::string& location, const std::string& expect) {
    onnx::ModelProto m = external_model(location);
    const std::string path = models + "/m.onnx";
    std::ofstream f(path, std::ios::binary);
    m.SerializeToOstream(&f);
    f.close();
    const std::string msg = input_error([&] { load_onnx(path); });
    EXPECT_NE(msg.find(expect), std::string::npos) << location << ": " << msg;
    EXPECT_NE(msg.find("m.onnx"), std::string::npos) << msg;
  };
  check("../secret.bin", "leaves the model's folder");
  check(outer.file("secret.bin"), "only paths relative");
  std::filesystem::create_symlink(outer.file("secret.bin"), models + "/link.bin");
  check("link.bin", "outside the model's folder");
  check("missing.bin", "does not exist");
}

TEST(OnnxLoader, CorruptFileIsAnInputErrorNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file("corrupt.onnx");
  const char garbage[] = "\x08\x07\x12\xff\xff\xff\xff\x0f garbage";
  write_bytes(path, std::string(garbage, sizeof garbage - 1));
  const std::string msg = input_error([&] { load_onnx(path); });
  EXPECT_NE(msg.find("corrupt.onnx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a valid ONNX model"), std::string::npos) << msg;
  // A truncated real model is refused as well.
  std::string bytes;
  relu_model().SerializeToString(&bytes);
  write_bytes(path, bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(input_error([&] { load_onnx(path); }).find("not a valid ONNX model"), std::string::npos);
  EXPECT_NE(input_error([&] { load_onnx(dir.file("absent.onnx")); }).find("does not exist"), std::string::npos);
}

TEST(OnnxLoader, UnsupportedOpsetAndOpsAreNamed) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  m.mutable_opset_import(0)->set_version(6);
  std::string msg = input_error([&] { load_onnx(save(dir, "old.onnx", m)); });
  EXPECT_NE(msg.find("opset 6"), std::string::npos) << msg;
  m.mutable_opset_import(0)->set_version(22);
  msg = input_error([&] { load_onnx(save(dir, "new.onnx", m)); });
  EXPECT_NE(msg.find("opset 22"), std::string::npos) << msg;

  onnx::ModelProto u = relu_model();
  add_node(u, "NonMaxSuppression", {"y"}, {"z"}, "nms");
  auto* custom = add_node(u, "MyOp", {"y"}, {"q"}, "mine");
  custom->set_domain("com.example");
  msg = input_error([&] { load_onnx(save(dir, "ops.onnx", u)); });
  EXPECT_NE(msg.find("ops.onnx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NonMaxSuppression (node 'nms')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("com.example::MyOp"), std::string::npos) << msg;
  // A sluice-domain op name in the default domain is not an ONNX op either.
  onnx::ModelProto s = relu_model();
  add_node(s, "FusedConv", {"y"}, {"z"}, "f");
  EXPECT_NE(input_error([&] { load_onnx(save(dir, "s.onnx", s)); }).find("FusedConv"), std::string::npos);
}

TEST(Sha256, MatchesKnownDigests) {
  TempDir dir;
  write_bytes(dir.file("empty"), "");
  write_bytes(dir.file("abc"), "abc");
  // 1,000,000 'a': crosses many blocks and the 1 MiB read buffer.
  write_bytes(dir.file("million"), std::string(1000000, 'a'));
  write_bytes(dir.file("two-blocks"), "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(sha256_file(dir.file("empty")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_file(dir.file("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_file(dir.file("two-blocks")), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_file(dir.file("million")), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_THROW(sha256_file(dir.file("absent")), InputError);
}

TEST(OnnxLoader, HugeDeclaredShapesAndDoubleDefinitionsAreInputErrorsNotCrashes) {
  TempDir dir;
  onnx::ModelProto m = relu_model();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("huge");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(1ll << 30);
  t->add_dims(1ll << 30);
  t->add_float_data(1.f);
  std::string msg = input_error([&] { load_onnx(save(dir, "huge.onnx", m)); });
  EXPECT_NE(msg.find("'huge'"), std::string::npos) << msg;

  onnx::ModelProto few = relu_model();
  auto* f = few.mutable_graph()->add_initializer();
  f->set_name("few");
  f->set_data_type(onnx::TensorProto::INT64);
  f->add_dims(1ll << 20);  // a million values declared, one given
  f->add_int64_data(3);
  msg = input_error([&] { load_onnx(save(dir, "few.onnx", few)); });
  EXPECT_NE(msg.find("holds 1 values instead of 1048576"), std::string::npos) << msg;

  onnx::ModelProto dup = relu_model();
  add_node(dup, "Sigmoid", {"x"}, {"y"}, "again");
  msg = input_error([&] { load_onnx(save(dir, "dup.onnx", dup)); });
  EXPECT_NE(msg.find("tensor 'y'"), std::string::npos) << msg;
}
