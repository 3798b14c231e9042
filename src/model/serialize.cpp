#include "model/serialize.h"

#include <cstring>

#include "core/error.h"

namespace sluice {

namespace {

class Writer {
 public:
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f32(float v) { raw(&v, sizeof v); }
  void s(const std::string& v) {
    u64(v.size());
    raw(v.data(), v.size());
  }
  void shape(const Shape& v) {
    u64(v.size());
    for (int64_t d : v) i64(d);
  }
  void value(const ValueInfo& v) {
    s(v.name);
    i64(static_cast<int64_t>(v.dtype));
    shape(v.shape);
  }
  void tensor(const Tensor& t) {
    i64(static_cast<int64_t>(t.dtype));
    shape(t.shape);
    s(std::string(t.bytes.begin(), t.bytes.end()));  // attribute tensors are small
  }
  std::string out;

 private:
  void raw(const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
};

class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  uint64_t u64() { return get<uint64_t>(); }
  int64_t i64() { return get<int64_t>(); }
  float f32() { return get<float>(); }
  std::string s() {
    const uint64_t n = u64();
    need(n);
    std::string v = b_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  Shape shape() {
    Shape v(count());
    for (auto& d : v) d = i64();
    return v;
  }
  ValueInfo value() {
    ValueInfo v;
    v.name = s();
    v.dtype = static_cast<DType>(i64());
    v.shape = shape();
    return v;
  }
  Tensor tensor() {
    Tensor t;
    t.dtype = static_cast<DType>(i64());
    t.shape = shape();
    const std::string bytes = s();
    t.bytes.assign(bytes.begin(), bytes.end());
    return t;
  }
  std::size_t count() {
    const uint64_t n = u64();
    if (n > b_.size()) SLUICE_THROW("malformed graph structure: count ", n);
    return static_cast<std::size_t>(n);
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  void need(std::size_t n) const {
    if (pos_ + n > b_.size()) SLUICE_THROW("malformed graph structure: truncated at byte ", pos_);
  }
  const std::string& b_;
  std::size_t pos_ = 0;
};

constexpr uint64_t kMagic = 0x534C554943454731ull;  // "SLUICEG1"

}  // namespace

std::string serialize_structure(const Graph& g) {
  Writer w;
  w.u64(kMagic);
  w.s(g.source);
  w.i64(g.opset);
  w.u64(g.inputs.size());
  for (const auto& v : g.inputs) w.value(v);
  w.u64(g.input_planes.size());
  for (const auto& p : g.input_planes) w.s(p);
  w.u64(g.outputs.size());
  for (const auto& v : g.outputs) w.value(v);
  w.u64(g.values.size());
  for (const auto& kv : g.values) w.value(kv.second);
  w.u64(g.nodes.size());
  for (const Node& n : g.nodes) {
    w.s(n.name);
    w.s(n.op);
    w.s(n.domain);
    w.u64(n.inputs.size());
    for (const auto& s : n.inputs) w.s(s);
    w.u64(n.outputs.size());
    for (const auto& s : n.outputs) w.s(s);
    w.u64(n.attrs.size());
    for (const auto& [key, a] : n.attrs) {
      w.s(key);
      w.i64(static_cast<int64_t>(a.kind));
      w.i64(a.i);
      w.f32(a.f);
      w.s(a.s);
      w.shape(a.ints);
      w.u64(a.floats.size());
      for (float f : a.floats) w.f32(f);
      w.u64(a.strings.size());
      for (const auto& s : a.strings) w.s(s);
      w.u64(a.t ? 1 : 0);
      if (a.t) w.tensor(*a.t);
    }
  }
  return w.out;
}

Graph deserialize_structure(const std::string& bytes) {
  Reader r(bytes);
  if (r.u64() != kMagic) SLUICE_THROW("malformed graph structure: bad magic");
  Graph g;
  g.source = r.s();
  g.opset = r.i64();
  for (std::size_t i = 0, n = r.count(); i < n; ++i) g.inputs.push_back(r.value());
  for (std::size_t i = 0, n = r.count(); i < n; ++i) g.input_planes.push_back(r.s());
  for (std::size_t i = 0, n = r.count(); i < n; ++i) g.outputs.push_back(r.value());
  for (std::size_t i = 0, n = r.count(); i < n; ++i) {
    ValueInfo v = r.value();
    g.values[v.name] = v;
  }
  for (std::size_t i = 0, n = r.count(); i < n; ++i) {
    Node node;
    node.name = r.s();
    node.op = r.s();
    node.domain = r.s();
    for (std::size_t k = 0, m = r.count(); k < m; ++k) node.inputs.push_back(r.s());
    for (std::size_t k = 0, m = r.count(); k < m; ++k) node.outputs.push_back(r.s());
    for (std::size_t k = 0, m = r.count(); k < m; ++k) {
      const std::string key = r.s();
      Attribute a;
      a.kind = static_cast<Attribute::Kind>(r.i64());
      a.i = r.i64();
      a.f = r.f32();
      a.s = r.s();
      a.ints = r.shape();
      for (std::size_t j = 0, c = r.count(); j < c; ++j) a.floats.push_back(r.f32());
      for (std::size_t j = 0, c = r.count(); j < c; ++j) a.strings.push_back(r.s());
      if (r.u64()) a.t = std::make_shared<Tensor>(r.tensor());
      node.attrs[key] = std::move(a);
    }
    g.nodes.push_back(std::move(node));
  }
  if (!r.done()) SLUICE_THROW("malformed graph structure: trailing bytes");
  return g;
}

}  // namespace sluice
