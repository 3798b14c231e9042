#include "model/const_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "core/axis_view.h"
#include "core/error.h"
#include "model/graph_util.h"
#include "model/canonicalize.h"
#include "model/op_arity.h"
#include "model/shape_inference.h"
#include "model/shape_math.h"

namespace sluice {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

// Whether a folded value of this shape would be too large to keep as a constant (the node is then
// left to the engine).  Overflowing shapes are an InputError (shape_numel).
bool too_big_to_fold(const Shape& s) { return shape_numel(s) > kMaxFoldedElements; }

// Integer arithmetic of shape computations wraps like the engines' two's-complement integers
// instead of being undefined on overflow; a crafted model may ask for INT64_MAX + 1.
int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }
int64_t wrap_add(int64_t a, int64_t b) { return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return wrap(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
int64_t wrap_neg(int64_t a) { return wrap(0 - static_cast<uint64_t>(a)); }

std::vector<double> to_double(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<std::size_t>(n));
  if (t.dtype == DType::F64) {
    for (int64_t i = 0; i < n; ++i) out[i] = t.data<double>()[i];
  } else if (is_float(t.dtype)) {
    const std::vector<float> f = t.as_float();
    for (int64_t i = 0; i < n; ++i) out[i] = f[i];
  } else {
    const std::vector<int64_t> v = t.as_int64();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(v[i]);
  }
  return out;
}

void store(Tensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::F32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::F64: t.data<double>()[i] = v; break;
    case DType::F16: t.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: t.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::I64: t.data<int64_t>()[i] = saturate_to_int64(v); break;
    case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(saturate_to_int64(v)); break;
    case DType::I8: t.data<int8_t>()[i] = static_cast<int8_t>(saturate_to_int64(v)); break;
    case DType::U8: t.data<uint8_t>()[i] = static_cast<uint8_t>(saturate_to_int64(v)); break;
    case DType::Bool: t.data<uint8_t>()[i] = v != 0.0 ? 1 : 0; break;
    default: throw InputError(str("cannot compute a ", dtype_name(t.dtype), " tensor"));
  }
}

void store_int(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype) {
    case DType::I64: t.data<int64_t>()[i] = v; break;
    case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::I8: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::U8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::Bool: t.data<uint8_t>()[i] = v != 0 ? 1 : 0; break;
    default: store(t, i, static_cast<double>(v));
  }
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// For every element of `out` in order, its flat index in a source whose index moves by
// `src_st[d]` per step along output dim d (0: the source repeats along d): a strided view.
std::vector<int64_t> strided_offsets(const Shape& out, const std::vector<int64_t>& src_st) {
  const std::size_t r = out.size();
  const int64_t n = shape_numel(out);
  std::vector<int64_t> offs(static_cast<std::size_t>(n));
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    offs[k] = off;
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) { off += src_st[d]; break; }
      off -= src_st[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return offs;
}

// For every element of `out`, the flat index of the element of a tensor of shape `in` that
// broadcasts onto it (numpy rules, shapes aligned on the right).
std::vector<int64_t> broadcast_offsets(const Shape& out, const Shape& in) {
  const std::size_t r = out.size();
  std::vector<int64_t> in_st(r, 0);
  const std::vector<int64_t> st = strides_of(in);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) in_st[r - in.size() + i] = st[i];
  return strided_offsets(out, in_st);
}

// Copies elements of `src` picked by `offsets` into a new tensor of `shape` (any dtype).
Tensor gather_elements(const Tensor& src, const Shape& shape, const std::vector<int64_t>& offsets) {
  Tensor out(src.dtype, shape);
  const std::size_t es = dtype_size(src.dtype);
  for (std::size_t k = 0; k < offsets.size(); ++k)
    std::memcpy(out.bytes.data() + k * es, src.bytes.data() + offsets[k] * es, es);
  return out;
}

// Evaluates an element-wise op over broadcast inputs; false when the result is too big to fold.
bool elementwise(const Graph& g, const Node& n, const std::vector<const Tensor*>& in, DType out_type,
                 const std::function<double(const std::vector<double>&)>& fd,
                 const std::function<int64_t(const std::vector<int64_t>&)>& fi, std::vector<Tensor>& result) {
  Shape shape = in[0]->shape;
  for (std::size_t i = 1; i < in.size(); ++i) shape = broadcast_shapes(shape, in[i]->shape, g, n);
  if (too_big_to_fold(shape)) return false;
  if (out_type == DType::Undefined) throw InputError(str(node_context(g, n), "the output type is undefined"));
  Tensor out(out_type, shape);
  const int64_t total = out.numel();
  std::vector<std::vector<int64_t>> offs;
  for (const Tensor* t : in) offs.push_back(broadcast_offsets(shape, t->shape));
  // Integer inputs keep exact integer arithmetic (shape values can exceed float precision).
  bool all_int = !!fi;
  for (const Tensor* t : in) all_int = all_int && !is_float(t->dtype);
  if (all_int) {
    std::vector<std::vector<int64_t>> vals;
    for (const Tensor* t : in) vals.push_back(t->as_int64());
    std::vector<int64_t> args(in.size());
    for (int64_t k = 0; k < total; ++k) {
      for (std::size_t i = 0; i < in.size(); ++i) args[i] = vals[i][offs[i][k]];
      store_int(out, k, fi(args));
    }
  } else {
    std::vector<std::vector<double>> vals;
    for (const Tensor* t : in) vals.push_back(to_double(*t));
    std::vector<double> args(in.size());
    for (int64_t k = 0; k < total; ++k) {
      for (std::size_t i = 0; i < in.size(); ++i) args[i] = vals[i][offs[i][k]];
      store(out, k, fd(args));
    }
  }
  result.push_back(std::move(out));
  return true;
}

std::vector<int64_t> int_input(const Graph& g, const Node& n, const Tensor* t, const char* what) {
  if (!t) throw InputError(str(node_context(g, n), "input '", what, "' is missing"));
  return t->as_int64();
}

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  const std::size_t r = x.shape.size();
  Shape out_shape(r);
  for (std::size_t i = 0; i < r; ++i) out_shape[i] = x.shape[perm[i]];
  const std::vector<int64_t> in_st = strides_of(x.shape);
  Shape src_st(r);
  for (std::size_t i = 0; i < r; ++i) src_st[i] = in_st[perm[i]];
  return gather_elements(x, out_shape, strided_offsets(out_shape, src_st));
}

Tensor reshaped(const Tensor& x, Shape shape) {
  checked_tensor_bytes(shape, x.dtype, "the reshaped tensor");  // [0] may become [0, 2^62, 2^62]
  Tensor out = x;
  out.shape = std::move(shape);
  return out;
}

}  // namespace

Tensor cast_tensor(const Tensor& t, DType to) {
  Tensor out(to, t.shape);
  if (is_float(t.dtype) || is_float(to)) {
    const std::vector<double> v = to_double(t);
    for (int64_t i = 0; i < t.numel(); ++i) store(out, i, v[i]);
  } else {
    const std::vector<int64_t> v = t.as_int64();
    for (int64_t i = 0; i < t.numel(); ++i) store_int(out, i, v[i]);
  }
  return out;
}

namespace {

// Output shapes of a node whose inputs are all constants, by the rules of shape inference.
bool constant_output_shapes(const Graph& g, const Node& n, const std::vector<const Tensor*>& in, std::vector<ValueInfo>& outs) {
  std::vector<ValueInfo> vals(in.size());
  std::vector<const ValueInfo*> vin(in.size(), nullptr);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i]) {
      vals[i] = ValueInfo{n.input(i), in[i]->dtype, in[i]->shape};
      vin[i] = &vals[i];
    }
  std::string why;
  if (!infer_node(g, n, vin, outs, why)) return false;
  for (const ValueInfo& v : outs)
    if (too_big_to_fold(v.shape)) return false;
  return true;
}

// Visits every index of `shape` in row-major order with its flat position.
template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  const int64_t total = shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    f(idx, k);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < shape[static_cast<std::size_t>(d)]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

using VD = std::vector<double>;
using VI = std::vector<int64_t>;

// What an evaluator sees: the node, its inputs' values (nullptr: absent, or computed at run time for
// the shapes-only ops) and static shapes, and the outputs it appends.
struct Eval {
  const Graph& g;
  const Node& n;
  const std::vector<const Tensor*>& in;
  const std::vector<const Shape*>& shapes;
  std::vector<Tensor>& out;

  const Tensor& need(std::size_t i) const {
    if (i >= in.size() || !in[i]) throw InputError(str(node_context(g, n), "input ", i, " is missing"));
    return *in[i];
  }
  const Tensor* optional(std::size_t i) const { return i < in.size() ? in[i] : nullptr; }
  [[noreturn]] void fail(const std::string& msg) const { throw InputError(node_context(g, n) + msg); }
  DType t0() const { return in.empty() || !in[0] ? DType::Undefined : in[0]->dtype; }
  // Element-wise over the broadcast inputs: fd on doubles, fi (when given) on integer inputs.
  bool ew(DType out_type, std::function<double(const VD&)> fd, std::function<int64_t(const VI&)> fi) {
    // The functions index their arguments blindly: hold the node to its op's input count (the
    // loader already did for model nodes; this covers nodes that passes or tests build).
    check_node_arity(g, n);
    std::vector<const Tensor*> args;
    for (std::size_t i = 0; i < in.size(); ++i) args.push_back(&need(i));
    return elementwise(g, n, args, out_type, fd, fi, out);
  }
};

// The evaluators below that compute from their outputs' shapes: input 0's value and the shapes shape
// inference gives the outputs; false when the node is not evaluable (a result too big to fold).
bool structured(const Eval& e, std::vector<ValueInfo>& outs) {
  if (e.in.empty() || !e.in[0]) return false;
  return constant_output_shapes(e.g, e.n, e.in, outs);
}

bool eval_shape(Eval& e) {
  if (e.shapes.empty() || !e.shapes[0]) return false;
  const Shape& s = *e.shapes[0];
  for (int64_t d : s) if (d < 0) return false;
  if (e.n.op == "Size") {
    e.out.push_back(Tensor::from(DType::I64, {}, std::vector<int64_t>{shape_numel(s)}));
    return true;
  }
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t b = e.n.get_int("start", 0), end = e.n.get_int("end", r);
  if (b < 0) b += r;
  if (end < 0) end += r;
  b = std::clamp<int64_t>(b, 0, r);
  end = std::clamp<int64_t>(end, b, r);
  std::vector<int64_t> v(s.begin() + b, s.begin() + end);
  e.out.push_back(Tensor::from(DType::I64, {static_cast<int64_t>(v.size())}, v));
  return true;
}

bool eval_cast(Eval& e) {
  const DType to = dtype_from_onnx(static_cast<int>(e.n.get_int("to", 0)));
  if (to == DType::Undefined) e.fail(str("Cast to an unsupported type ", e.n.get_int("to", 0)));
  e.out.push_back(cast_tensor(e.need(0), to));
  return true;
}

// Reshape, Flatten, Squeeze, Unsqueeze: the bytes stay; only the shape changes, by the same rules
// shape inference applies.
bool eval_reshape(Eval& e) {
  const Tensor& x = e.need(0);
  ValueInfo xv{e.n.input(0), x.dtype, x.shape};
  std::vector<const ValueInfo*> vin(e.n.inputs.size(), nullptr);
  vin[0] = &xv;
  std::vector<ValueInfo> vout;
  std::string why;
  if (!infer_node(e.g, e.n, vin, vout, why)) return false;
  e.out.push_back(reshaped(x, vout.at(0).shape));
  return true;
}

bool eval_gather(Eval& e) {
  const Graph& g = e.g;
  const Node& n = e.n;
  const Tensor& x = e.need(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(n.get_int("axis", 0), r, g, n);
  std::vector<int64_t> idx = int_input(g, n, e.optional(1), "indices");
  const Shape& ishape = e.need(1).shape;
  Shape shape(x.shape.begin(), x.shape.begin() + axis);
  shape.insert(shape.end(), ishape.begin(), ishape.end());
  shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  if (too_big_to_fold(shape)) return false;
  const AxisView view = axis_view(x.shape, axis);
  const int64_t outer = view.outer, inner = view.inner, dim = view.n;
  std::vector<int64_t> offs;
  offs.reserve(static_cast<std::size_t>(shape_numel(shape)));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j : idx) {
      if (j < -dim || j >= dim) e.fail(str("index ", j, " is out of range for size ", dim));
      if (j < 0) j += dim;
      for (int64_t k = 0; k < inner; ++k) offs.push_back((o * dim + j) * inner + k);
    }
  e.out.push_back(gather_elements(x, shape, offs));
  return true;
}

bool eval_slice(Eval& e) {
  const Graph& g = e.g;
  const Node& n = e.n;
  const Tensor& x = e.need(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const std::vector<int64_t> starts = int_input(g, n, e.optional(1), "starts");
  const std::vector<int64_t> ends = int_input(g, n, e.optional(2), "ends");
  std::vector<int64_t> axes, steps;
  if (e.optional(3)) axes = e.optional(3)->as_int64();
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (e.optional(4)) steps = e.optional(4)->as_int64();
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    e.fail("starts, ends, axes and steps differ in length");
  std::vector<int64_t> begin(r, 0), step(r, 1);
  Shape shape = x.shape;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = normalize_axis(axes[i], r, g, n);
    if (steps[i] == 0) e.fail("step 0");
    begin[a] = starts[i];
    shape[a] = slice_length(x.shape[a], begin[a], ends[i], steps[i]);
    // A step longer than the axis takes at most one element; 1 keeps the stride product small.
    step[a] = shape[a] > 1 ? steps[i] : 1;
  }
  // A strided view: from the first picked element, `step` elements of x per output step.
  const std::vector<int64_t> st = strides_of(x.shape);
  std::vector<int64_t> src_st(static_cast<std::size_t>(r));
  int64_t first = 0;
  for (int64_t d = 0; d < r; ++d) {
    first += begin[d] * st[d];
    src_st[d] = step[d] * st[d];
  }
  std::vector<int64_t> offs = strided_offsets(shape, src_st);
  for (auto& o : offs) o += first;
  e.out.push_back(gather_elements(x, shape, offs));
  return true;
}

bool eval_concat(Eval& e) {
  const Tensor& first = e.need(0);
  const int64_t r = static_cast<int64_t>(first.shape.size());
  const int64_t axis = normalize_axis(e.n.get_int("axis", 0), r, e.g, e.n);
  Shape shape = first.shape;
  shape[axis] = 0;
  for (std::size_t i = 0; i < e.in.size(); ++i) {
    const Tensor& t = e.need(i);
    bool same = t.dtype == first.dtype && static_cast<int64_t>(t.shape.size()) == r;
    for (int64_t d = 0; same && d < r; ++d) same = d == axis || t.shape[d] == first.shape[d];
    if (!same) e.fail("inputs differ in type, rank or a non-axis dimension");
    shape[axis] = checked_add(shape[axis], t.shape[axis], "Concat");
  }
  if (too_big_to_fold(shape)) return false;
  Tensor o(first.dtype, shape);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  const std::size_t es = dtype_size(first.dtype);
  uint8_t* dst = o.bytes.data();
  for (int64_t k = 0; k < outer; ++k)
    for (const Tensor* t : e.in) {
      const std::size_t chunk = static_cast<std::size_t>(t->numel() / std::max<int64_t>(outer, 1)) * es;
      if (t->numel() == 0) continue;
      std::memcpy(dst, t->bytes.data() + k * chunk, chunk);
      dst += chunk;
    }
  e.out.push_back(std::move(o));
  return true;
}

bool eval_transpose(Eval& e) {
  const Tensor& x = e.need(0);
  std::vector<int64_t> perm = e.n.get_ints("perm");
  if (perm.empty())
    for (int64_t i = static_cast<int64_t>(x.shape.size()) - 1; i >= 0; --i) perm.push_back(i);
  std::vector<bool> seen(x.shape.size(), false);
  if (perm.size() != x.shape.size()) e.fail("perm has the wrong length");
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p]) e.fail("perm is not a permutation");
    seen[p] = true;
  }
  e.out.push_back(transpose(x, perm));
  return true;
}

void check_dims(const Eval& e, const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d < 0) e.fail(str("negative dimension in ", shape_str(dims)));
}

bool eval_constant_of_shape(Eval& e) {
  const std::vector<int64_t> shape = e.need(0).as_int64();
  check_dims(e, shape);
  if (shape_numel(shape) > kMaxFoldedElements) return false;
  const Node& n = e.n;
  Tensor v = n.has("value") && n.attrs.at("value").t ? *n.attrs.at("value").t : Tensor::from(DType::F32, {1}, std::vector<float>{0.f});
  if (v.numel() != 1) e.fail(str("the value attribute holds ", v.numel(), " elements instead of one"));
  Tensor o(v.dtype, shape);
  const std::size_t es = dtype_size(v.dtype);
  for (int64_t k = 0; k < o.numel(); ++k) std::memcpy(o.bytes.data() + k * es, v.bytes.data(), es);
  e.out.push_back(std::move(o));
  return true;
}

bool eval_expand(Eval& e) {
  const Tensor& x = e.need(0);
  const std::vector<int64_t> arg = e.need(1).as_int64();
  check_dims(e, arg);
  const Shape shape = broadcast_shapes(x.shape, arg, e.g, e.n);
  if (shape_numel(shape) > kMaxFoldedElements) return false;
  e.out.push_back(gather_elements(x, shape, broadcast_offsets(shape, x.shape)));
  return true;
}

bool eval_tile(Eval& e) {
  const Tensor& x = e.need(0);
  const std::vector<int64_t> arg = e.need(1).as_int64();
  check_dims(e, arg);
  if (arg.size() != x.shape.size()) e.fail("repeats has the wrong length");
  Shape shape = x.shape;
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = checked_mul(shape[i], arg[i], "Tile repeats");
  if (shape_numel(shape) > kMaxFoldedElements) return false;
  const std::vector<int64_t> st = strides_of(x.shape);
  std::vector<int64_t> offs(static_cast<std::size_t>(shape_numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  for (std::size_t k = 0; k < offs.size(); ++k) {
    int64_t off = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) off += (idx[d] % x.shape[d]) * st[d];
    offs[k] = off;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  e.out.push_back(gather_elements(x, shape, offs));
  return true;
}

bool eval_range(Eval& e) {
  const Tensor& s = e.need(0);
  const int64_t count = range_length(e.g, e.n, s, e.need(1), e.need(2));
  if (count < 0) return false;  // too long to keep as a constant
  const double start = to_double(s)[0], delta = to_double(e.need(2))[0];
  Tensor o(s.dtype, {count});
  for (int64_t k = 0; k < count; ++k) store(o, k, start + static_cast<double>(k) * delta);
  e.out.push_back(std::move(o));
  return true;
}

bool eval_split(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const std::vector<int64_t> xst = strides_of(x.shape);
  const int64_t axis = normalize_axis(e.n.get_int("axis", 0), static_cast<int64_t>(x.shape.size()), e.g, e.n);
  int64_t begin = 0;
  for (const ValueInfo& v : outs) {
    std::vector<int64_t> offs = strided_offsets(v.shape, xst);
    for (auto& o : offs) o += begin * xst[static_cast<std::size_t>(axis)];
    e.out.push_back(gather_elements(x, v.shape, offs));
    begin += v.shape[static_cast<std::size_t>(axis)];
  }
  return true;
}

bool eval_gather_nd(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const Shape& xs = x.shape;
  const std::vector<int64_t> xst = strides_of(xs);
  const int64_t r = static_cast<int64_t>(xs.size());
  const std::vector<int64_t> idx = e.need(1).as_int64();
  const Shape& is = e.need(1).shape;
  const int64_t b = e.n.get_int("batch_dims", 0), k = is.back();
  int64_t inner = 1;
  for (int64_t d = b + k; d < r; ++d) inner *= xs[static_cast<std::size_t>(d)];
  int64_t batch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= xs[static_cast<std::size_t>(d)];
  const int64_t per_batch = shape_numel(is) / std::max<int64_t>(1, batch * k);
  const int64_t batch_stride = b > 0 ? xst[static_cast<std::size_t>(b - 1)] : 0;
  std::vector<int64_t> offs;
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t p = 0; p < per_batch; ++p) {
      int64_t base = bi * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = idx[static_cast<std::size_t>((bi * per_batch + p) * k + j)];
        const int64_t dim = xs[static_cast<std::size_t>(b + j)];
        if (v < -dim || v >= dim) e.fail(str("index ", v, " is out of range for size ", dim));
        if (v < 0) v += dim;
        base += v * xst[static_cast<std::size_t>(b + j)];
      }
      for (int64_t q = 0; q < inner; ++q) offs.push_back(base + q);
    }
  e.out.push_back(gather_elements(x, outs[0].shape, offs));
  return true;
}

bool eval_scatter_nd(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  if (e.n.get_string("reduction", "none") != "none") return false;
  const Tensor& x = *e.in[0];
  const Shape& xs = x.shape;
  const std::vector<int64_t> xst = strides_of(xs);
  const int64_t r = static_cast<int64_t>(xs.size());
  Tensor y = x;
  const std::vector<int64_t> idx = e.need(1).as_int64();
  const Tensor& upd = e.need(2);
  const int64_t k = e.need(1).shape.back();
  int64_t inner = 1;
  for (int64_t d = k; d < r; ++d) inner *= xs[static_cast<std::size_t>(d)];
  const std::size_t es = dtype_size(x.dtype);
  const int64_t rows = static_cast<int64_t>(idx.size()) / k;
  for (int64_t p = 0; p < rows; ++p) {
    int64_t base = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t v = idx[static_cast<std::size_t>(p * k + j)];
      const int64_t dim = xs[static_cast<std::size_t>(j)];
      if (v < -dim || v >= dim) e.fail(str("index ", v, " is out of range for size ", dim));
      if (v < 0) v += dim;
      base += v * xst[static_cast<std::size_t>(j)];
    }
    std::memcpy(y.bytes.data() + base * es, upd.bytes.data() + p * inner * es, static_cast<std::size_t>(inner) * es);
  }
  e.out.push_back(std::move(y));
  return true;
}

bool eval_matmul(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const Shape& xs = x.shape;
  if (!is_float(x.dtype) || shape_numel(outs[0].shape) * std::max<int64_t>(1, xs.back()) > kMaxFoldedElements) return false;
  const Tensor& w = e.need(1);
  Shape as = xs, bs = w.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], kk = as.back(), nn = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, e.g, e.n);
  const std::vector<int64_t> aoff = broadcast_offsets(batch, ab), boff = broadcast_offsets(batch, bb);
  const std::vector<double> A = to_double(x), B = to_double(w);
  Tensor y(x.dtype, outs[0].shape);
  for (std::size_t bi = 0; bi < aoff.size(); ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < nn; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < kk; ++q) acc += A[aoff[bi] * m * kk + i * kk + q] * B[boff[bi] * kk * nn + q * nn + j];
        store(y, (static_cast<int64_t>(bi) * m + i) * nn + j, acc);
      }
  e.out.push_back(std::move(y));
  return true;
}

bool eval_cumsum(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const Shape& xs = x.shape;
  const std::vector<int64_t> xst = strides_of(xs);
  const int64_t r = static_cast<int64_t>(xs.size());
  const std::vector<double> v = to_double(x);
  Tensor y(outs[0].dtype, outs[0].shape);
  const int64_t axis = normalize_axis(e.need(1).as_int64().at(0), r, e.g, e.n);
  const bool excl = e.n.get_int("exclusive", 0) != 0, rev = e.n.get_int("reverse", 0) != 0;
  const int64_t len = xs[static_cast<std::size_t>(axis)], st = xst[static_cast<std::size_t>(axis)];
  const bool ints = !is_float(x.dtype);
  const std::vector<int64_t> vi = ints ? x.as_int64() : std::vector<int64_t>{};
  for_each_index(xs, [&](const std::vector<int64_t>& idx, int64_t k) {
    if (idx[static_cast<std::size_t>(axis)] != 0) return;
    double acc = 0;
    int64_t iacc = 0;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t p = k + (rev ? len - 1 - t : t) * st;
      if (excl) { if (ints) store_int(y, p, iacc); else store(y, p, acc); }
      if (ints) iacc = wrap_add(iacc, vi[static_cast<std::size_t>(p)]);
      else acc += v[static_cast<std::size_t>(p)];
      if (!excl) { if (ints) store_int(y, p, iacc); else store(y, p, acc); }
    }
  });
  e.out.push_back(std::move(y));
  return true;
}

bool eval_trilu(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const int64_t r = static_cast<int64_t>(x.shape.size());
  Tensor y(outs[0].dtype, outs[0].shape);
  const int64_t k = e.optional(1) ? e.optional(1)->as_int64().at(0) : 0;
  const bool upper = e.n.get_int("upper", 1) != 0;
  const std::size_t es = dtype_size(x.dtype);
  std::memset(y.bytes.data(), 0, y.bytes.size());
  for_each_index(x.shape, [&](const std::vector<int64_t>& idx, int64_t p) {
    const int64_t i = idx[static_cast<std::size_t>(r - 2)], j = idx[static_cast<std::size_t>(r - 1)];
    if (upper ? j - i >= k : j - i <= k) std::memcpy(y.bytes.data() + p * es, x.bytes.data() + p * es, es);
  });
  e.out.push_back(std::move(y));
  return true;
}

// The reductions and Softmax: each output element from the input elements that map onto it.
bool eval_reduce(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const std::string& op = e.n.op;
  const Tensor& x = *e.in[0];
  const Shape& xs = x.shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  const std::vector<double> v = to_double(x);
  Tensor y(outs[0].dtype, outs[0].shape);
  std::vector<bool> red(static_cast<std::size_t>(r), false);
  if (op == "Softmax") {
    red[static_cast<std::size_t>(normalize_axis(e.n.get_int("axis", -1), r, e.g, e.n))] = true;
  } else {
    std::vector<int64_t> axes = e.optional(1) ? e.optional(1)->as_int64() : std::vector<int64_t>{};
    for (int64_t a : axes) red[static_cast<std::size_t>(normalize_axis(a, r, e.g, e.n))] = true;
    if (axes.empty() && e.n.get_int("noop_with_empty_axes", 0) == 0) red.assign(static_cast<std::size_t>(r), true);
  }
  // Flat index of the reduced group each element belongs to.
  Shape kept;
  for (int64_t d = 0; d < r; ++d) kept.push_back(red[static_cast<std::size_t>(d)] ? 1 : xs[static_cast<std::size_t>(d)]);
  const std::vector<int64_t> kst = strides_of(kept);
  std::vector<int64_t> group(static_cast<std::size_t>(x.numel()));
  for_each_index(xs, [&](const std::vector<int64_t>& idx, int64_t k) {
    int64_t o = 0;
    for (int64_t d = 0; d < r; ++d)
      if (!red[static_cast<std::size_t>(d)]) o += idx[static_cast<std::size_t>(d)] * kst[static_cast<std::size_t>(d)];
    group[static_cast<std::size_t>(k)] = o;
  });
  const int64_t groups = shape_numel(kept);
  const bool mx = op == "ReduceMax" || op == "Softmax", mn = op == "ReduceMin", prod = op == "ReduceProd";
  const bool squares = op == "ReduceL2" || op == "ReduceSumSquare";
  std::vector<double> acc(static_cast<std::size_t>(groups), mx ? -HUGE_VAL : mn ? HUGE_VAL : prod ? 1.0 : 0.0);
  std::vector<double> cnt(static_cast<std::size_t>(groups), 0.0);
  for (std::size_t k = 0; k < v.size(); ++k) {
    double& a = acc[static_cast<std::size_t>(group[k])];
    if (mx) a = std::max(a, v[k]);
    else if (mn) a = std::min(a, v[k]);
    else if (prod) a *= v[k];
    else if (squares) a += v[k] * v[k];
    else if (op == "ReduceL1") a += std::fabs(v[k]);
    else a += v[k];
    cnt[static_cast<std::size_t>(group[k])] += 1;
  }
  if (op == "Softmax") {
    std::vector<double> sum(static_cast<std::size_t>(groups), 0.0);
    for (std::size_t k = 0; k < v.size(); ++k) sum[static_cast<std::size_t>(group[k])] += std::exp(v[k] - acc[static_cast<std::size_t>(group[k])]);
    for (std::size_t k = 0; k < v.size(); ++k)
      store(y, static_cast<int64_t>(k), std::exp(v[k] - acc[static_cast<std::size_t>(group[k])]) / sum[static_cast<std::size_t>(group[k])]);
    e.out.push_back(std::move(y));
    return true;
  }
  for (int64_t k = 0; k < groups; ++k) {
    double a = acc[static_cast<std::size_t>(k)];
    if (op == "ReduceMean") a /= std::max(1.0, cnt[static_cast<std::size_t>(k)]);
    if (op == "ReduceL2") a = std::sqrt(a);
    if (is_float(y.dtype)) store(y, k, a);
    else store_int(y, k, saturate_to_int64(a));
  }
  e.out.push_back(std::move(y));
  return true;
}

// DepthToSpace (DCR, CRD) and SpaceToDepth: each output element is one input element.  The depth
// side [N, dc, dh, dw] and the space side [N, dc / b^2, dh b, dw b]: depth channel (i b + j) sc + s
// (DCR, and SpaceToDepth) or s b b + i b + j (CRD) holds space pixel (y b + i, x b + j) of channel s.
bool eval_depth_space(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const Shape& ys = outs[0].shape;
  const bool to_space = e.n.op == "DepthToSpace";
  const bool crd = to_space && e.n.get_string("mode", "DCR") == "CRD";
  const int64_t b = e.n.get_int("blocksize", 0);
  const Shape& depth = to_space ? x.shape : ys;
  const int64_t dc = depth[1], dh = depth[2], dw = depth[3], sc = dc / (b * b);
  std::vector<int64_t> offs(static_cast<std::size_t>(shape_numel(ys)));
  for (int64_t ni = 0; ni < depth[0]; ++ni)
    for (int64_t ch = 0; ch < dc; ++ch) {
      const int64_t s = crd ? ch / (b * b) : ch % sc, ij = crd ? ch % (b * b) : ch / sc, i = ij / b, j = ij % b;
      for (int64_t yy = 0; yy < dh; ++yy)
        for (int64_t xx = 0; xx < dw; ++xx) {
          const int64_t d = ((ni * dc + ch) * dh + yy) * dw + xx;
          const int64_t sp = ((ni * sc + s) * dh * b + yy * b + i) * dw * b + xx * b + j;
          offs[static_cast<std::size_t>(to_space ? sp : d)] = to_space ? d : sp;
        }
    }
  e.out.push_back(gather_elements(x, ys, offs));
  return true;
}

// GatherElements and ScatterElements: the data element that index position p (row-major over the
// indices' shape) addresses: p's coordinates with the one on `axis` replaced by the index there.
std::vector<int64_t> element_offsets(const Eval& e, const Tensor& data, const Tensor& indices) {
  const int64_t r = static_cast<int64_t>(data.shape.size());
  const std::size_t axis = static_cast<std::size_t>(normalize_axis(e.n.get_int("axis", 0), r, e.g, e.n));
  const int64_t dim = data.shape[axis];
  const std::vector<int64_t> v = indices.as_int64(), st = strides_of(data.shape);
  std::vector<int64_t> offs(v.size());
  for_each_index(indices.shape, [&](const std::vector<int64_t>& idx, int64_t p) {
    int64_t j = v[static_cast<std::size_t>(p)];
    if (j < -dim || j >= dim) e.fail(str("index ", j, " is out of range for an axis of size ", dim));
    if (j < 0) j += dim;
    int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += (d == axis ? j : idx[d]) * st[d];
    offs[static_cast<std::size_t>(p)] = off;
  });
  return offs;
}

bool eval_gather_elements(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  e.out.push_back(gather_elements(*e.in[0], outs[0].shape, element_offsets(e, *e.in[0], e.need(1))));
  return true;
}

// In index order, as both engines' CPU-side reference does: with duplicate indices the last update
// wins (reduction none); add, mul, max and min combine every one.
bool eval_scatter_elements(Eval& e) {
  std::vector<ValueInfo> outs;
  if (!structured(e, outs)) return false;
  const Tensor& x = *e.in[0];
  const Tensor& upd = e.need(2);
  const std::vector<int64_t> offs = element_offsets(e, x, e.need(1));
  const std::string red = e.n.get_string("reduction", "none");
  Tensor y = x;
  if (red == "none") {
    const std::size_t es = dtype_size(x.dtype);
    for (std::size_t p = 0; p < offs.size(); ++p)
      std::memcpy(y.bytes.data() + offs[p] * static_cast<int64_t>(es), upd.bytes.data() + p * es, es);
  } else if (is_float(x.dtype)) {
    std::vector<double> yv = to_double(x);
    const std::vector<double> u = to_double(upd);
    for (std::size_t p = 0; p < offs.size(); ++p) {
      double& a = yv[static_cast<std::size_t>(offs[p])];
      a = red == "add" ? a + u[p] : red == "mul" ? a * u[p] : red == "max" ? std::max(a, u[p]) : std::min(a, u[p]);
    }
    for (std::size_t k = 0; k < yv.size(); ++k) store(y, static_cast<int64_t>(k), yv[k]);
  } else {
    std::vector<int64_t> yv = x.as_int64();
    const std::vector<int64_t> u = upd.as_int64();
    for (std::size_t p = 0; p < offs.size(); ++p) {
      int64_t& a = yv[static_cast<std::size_t>(offs[p])];
      a = red == "add" ? wrap_add(a, u[p]) : red == "mul" ? wrap_mul(a, u[p]) : red == "max" ? std::max(a, u[p]) : std::min(a, u[p]);
    }
    for (std::size_t k = 0; k < yv.size(); ++k) store_int(y, static_cast<int64_t>(k), yv[k]);
  }
  e.out.push_back(std::move(y));
  return true;
}

using Evaluator = bool (*)(Eval&);

struct EvalRow {
  Evaluator eval;
  bool shapes_only = false;  // Shape and Size read their input's static shape, not its value
};

// The folder's table: the default-domain ops it evaluates.  Heavy ops (Conv, MatMul beyond small
// sizes, pools, Resize, GridSample) stay with the engines; an op here has a row in the model
// layer's op table too (tests/unit/test_op_registry.cpp).
const std::map<std::string, EvalRow>& evaluators() {
  static const std::map<std::string, EvalRow> table = [] {
    std::map<std::string, EvalRow> t;
    t["Identity"] = {[](Eval& e) { e.out.push_back(e.need(0)); return true; }};
    t["Shape"] = t["Size"] = {eval_shape, true};
    t["Constant"] = {[](Eval& e) { e.out.push_back(constant_node_value(e.g, e.n)); return true; }};
    t["Cast"] = {eval_cast};
    t["Reshape"] = t["Flatten"] = t["Squeeze"] = t["Unsqueeze"] = {eval_reshape};
    t["Gather"] = {eval_gather};
    t["Slice"] = {eval_slice};
    t["Concat"] = {eval_concat};
    t["Transpose"] = {eval_transpose};
    t["ConstantOfShape"] = {eval_constant_of_shape};
    t["Expand"] = {eval_expand};
    t["Tile"] = {eval_tile};
    t["Range"] = {eval_range};
    t["Split"] = {eval_split};
    t["GatherND"] = {eval_gather_nd};
    t["ScatterND"] = {eval_scatter_nd};
    t["MatMul"] = {eval_matmul};
    t["CumSum"] = {eval_cumsum};
    t["Trilu"] = {eval_trilu};
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1",
                           "ReduceSumSquare", "Softmax"})
      t[op] = {eval_reduce};
    t["DepthToSpace"] = t["SpaceToDepth"] = {eval_depth_space};
    t["GatherElements"] = {eval_gather_elements};
    t["ScatterElements"] = {eval_scatter_elements};

    // Element-wise arithmetic and comparisons; integer inputs keep exact integer arithmetic.
    t["Add"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return a[0] + a[1]; }, [](const VI& a) { return wrap_add(a[0], a[1]); }); }};
    t["Sub"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return a[0] - a[1]; }, [](const VI& a) { return wrap_sub(a[0], a[1]); }); }};
    t["Mul"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return a[0] * a[1]; }, [](const VI& a) { return wrap_mul(a[0], a[1]); }); }};
    t["Div"] = {[](Eval& e) {
      return e.ew(e.t0(), [](const VD& a) { return a[0] / a[1]; }, [&e](const VI& a) -> int64_t {
        if (a[1] == 0) e.fail("integer division by zero");
        if (a[1] == -1) return wrap_neg(a[0]);  // INT64_MIN / -1 traps on x86
        return a[0] / a[1];
      });
    }};
    t["Mod"] = {[](Eval& e) {
      const bool fmod_mode = e.n.get_int("fmod", 0) != 0;
      return e.ew(e.t0(), [](const VD& a) { return std::fmod(a[0], a[1]); }, [&e, fmod_mode](const VI& a) -> int64_t {
        if (a[1] == 0) e.fail("integer modulo by zero");
        if (a[1] == -1) return 0;  // INT64_MIN % -1 traps on x86
        int64_t m = a[0] % a[1];
        if (!fmod_mode && m != 0 && ((m < 0) != (a[1] < 0))) m += a[1];  // Python-style sign
        return m;
      });
    }};
    t["Pow"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::pow(a[0], a[1]); }, nullptr); }};
    t["Max"] = {[](Eval& e) {
      return e.ew(e.t0(), [](const VD& a) { double m = a[0]; for (double v : a) m = std::max(m, v); return m; },
                  [](const VI& a) { int64_t m = a[0]; for (int64_t v : a) m = std::max(m, v); return m; });
    }};
    t["Min"] = {[](Eval& e) {
      return e.ew(e.t0(), [](const VD& a) { double m = a[0]; for (double v : a) m = std::min(m, v); return m; },
                  [](const VI& a) { int64_t m = a[0]; for (int64_t v : a) m = std::min(m, v); return m; });
    }};
    t["Equal"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] == a[1]); }, [](const VI& a) { return int64_t(a[0] == a[1]); }); }};
    t["Less"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] < a[1]); }, [](const VI& a) { return int64_t(a[0] < a[1]); }); }};
    t["Greater"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] > a[1]); }, [](const VI& a) { return int64_t(a[0] > a[1]); }); }};
    t["LessOrEqual"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] <= a[1]); }, [](const VI& a) { return int64_t(a[0] <= a[1]); }); }};
    t["GreaterOrEqual"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] >= a[1]); }, [](const VI& a) { return int64_t(a[0] >= a[1]); }); }};
    t["And"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] != 0 && a[1] != 0); }, [](const VI& a) { return int64_t(a[0] != 0 && a[1] != 0); }); }};
    t["Or"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] != 0 || a[1] != 0); }, [](const VI& a) { return int64_t(a[0] != 0 || a[1] != 0); }); }};
    t["Xor"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double((a[0] != 0) != (a[1] != 0)); }, [](const VI& a) { return int64_t((a[0] != 0) != (a[1] != 0)); }); }};
    t["Not"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(a[0] == 0); }, [](const VI& a) { return int64_t(a[0] == 0); }); }};
    t["Where"] = {[](Eval& e) {
      const DType ot = e.in.size() > 1 && e.in[1] ? e.in[1]->dtype : DType::Undefined;
      return e.ew(ot, [](const VD& a) { return a[0] != 0 ? a[1] : a[2]; }, [](const VI& a) { return a[0] != 0 ? a[1] : a[2]; });
    }};
    t["IsNaN"] = {[](Eval& e) { return e.ew(DType::Bool, [](const VD& a) { return double(std::isnan(a[0])); }, [](const VI&) { return int64_t(0); }); }};
    t["IsInf"] = {[](Eval& e) {
      const bool neg = e.n.get_int("detect_negative", 1) != 0, pos = e.n.get_int("detect_positive", 1) != 0;
      return e.ew(DType::Bool, [=](const VD& a) { return double(std::isinf(a[0]) && ((a[0] > 0 && pos) || (a[0] < 0 && neg))); },
                  [](const VI&) { return int64_t(0); });
    }};
    t["Neg"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return -a[0]; }, [](const VI& a) { return wrap_neg(a[0]); }); }};
    t["Abs"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::fabs(a[0]); }, [](const VI& a) { return a[0] < 0 ? wrap_neg(a[0]) : a[0]; }); }};
    t["Sign"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return double((a[0] > 0) - (a[0] < 0)); }, [](const VI& a) { return int64_t((a[0] > 0) - (a[0] < 0)); }); }};
    t["Relu"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return a[0] > 0 ? a[0] : 0.0; }, [](const VI& a) { return a[0] > 0 ? a[0] : 0; }); }};
    t["Floor"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::floor(a[0]); }, nullptr); }};
    t["Ceil"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::ceil(a[0]); }, nullptr); }};
    t["Round"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::nearbyint(a[0]); }, nullptr); }};
    t["Sqrt"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::sqrt(a[0]); }, nullptr); }};
    t["Exp"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::exp(a[0]); }, nullptr); }};
    t["Log"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::log(a[0]); }, nullptr); }};
    t["Reciprocal"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return 1.0 / a[0]; }, nullptr); }};
    t["Sigmoid"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return 1.0 / (1.0 + std::exp(-a[0])); }, nullptr); }};
    t["Cos"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::cos(a[0]); }, nullptr); }};
    t["Sin"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::sin(a[0]); }, nullptr); }};
    t["Tanh"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::tanh(a[0]); }, nullptr); }};
    t["Erf"] = {[](Eval& e) { return e.ew(e.t0(), [](const VD& a) { return std::erf(a[0]); }, nullptr); }};
    t["Gelu"] = {[](Eval& e) {
      const bool tanh_form = e.n.get_string("approximate", "none") == "tanh";
      return e.ew(e.t0(), [tanh_form](const VD& a) {
        const double x = a[0];
        if (tanh_form) return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
      }, nullptr);
    }};
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> evaluated_ops() {
  std::vector<std::string> ops;
  for (const auto& kv : evaluators()) ops.push_back(kv.first);
  return ops;
}

bool evaluate_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& in,
                   const std::vector<const Shape*>& in_shapes, std::vector<Tensor>& out) {
  out.clear();
  if (!n.domain.empty()) return false;
  const auto it = evaluators().find(n.op);
  if (it == evaluators().end()) return false;
  if (!it->second.shapes_only)
    for (std::size_t i = 0; i < in.size(); ++i)
      if (!in[i] && !n.input(i).empty()) return false;  // only Shape and Size fold with run-time inputs
  Eval e{g, n, in, in_shapes, out};
  return it->second.eval(e);
}

}  // namespace sluice
