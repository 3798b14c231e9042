#include "model/const_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

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

// Split, CumSum, Trilu, the reductions, GatherND, ScatterND, MatMul and Softmax on constants (the
// position tables and masks that models compute from constants).
bool evaluate_structured_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const std::string& op = n.op;
  static const char* ops[] = {"Split", "CumSum", "Trilu", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                              "ReduceProd", "ReduceL2", "GatherND", "ScatterND", "MatMul", "Softmax"};
  if (std::none_of(std::begin(ops), std::end(ops), [&](const char* o) { return op == o; })) return false;
  if (in.empty() || !in[0]) return false;
  std::vector<ValueInfo> outs;
  if (!constant_output_shapes(g, n, in, outs)) return false;
  const Tensor& x = *in[0];
  const Shape& xs = x.shape;
  const std::vector<int64_t> xst = strides_of(xs);
  const int64_t r = static_cast<int64_t>(xs.size());
  if (op == "Split") {
    const int64_t axis = normalize_axis(n.get_int("axis", 0), r, g, n);
    int64_t begin = 0;
    for (const ValueInfo& v : outs) {
      Shape src = xst;
      std::vector<int64_t> offs = strided_offsets(v.shape, src);
      for (auto& o : offs) o += begin * xst[static_cast<std::size_t>(axis)];
      out.push_back(gather_elements(x, v.shape, offs));
      begin += v.shape[static_cast<std::size_t>(axis)];
    }
    return true;
  }
  if (op == "GatherND") {
    const std::vector<int64_t> idx = in[1]->as_int64();
    const Shape& is = in[1]->shape;
    const int64_t b = n.get_int("batch_dims", 0), k = is.back();
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
          if (v < -dim || v >= dim) throw InputError(str(node_context(g, n), "index ", v, " is out of range for size ", dim));
          if (v < 0) v += dim;
          base += v * xst[static_cast<std::size_t>(b + j)];
        }
        for (int64_t e = 0; e < inner; ++e) offs.push_back(base + e);
      }
    out.push_back(gather_elements(x, outs[0].shape, offs));
    return true;
  }
  if (op == "ScatterND") {
    if (n.get_string("reduction", "none") != "none") return false;
    Tensor y = x;
    const std::vector<int64_t> idx = in[1]->as_int64();
    const Tensor& upd = *in[2];
    const int64_t k = in[1]->shape.back();
    int64_t inner = 1;
    for (int64_t d = k; d < r; ++d) inner *= xs[static_cast<std::size_t>(d)];
    const std::size_t es = dtype_size(x.dtype);
    const int64_t rows = static_cast<int64_t>(idx.size()) / k;
    for (int64_t p = 0; p < rows; ++p) {
      int64_t base = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = idx[static_cast<std::size_t>(p * k + j)];
        const int64_t dim = xs[static_cast<std::size_t>(j)];
        if (v < -dim || v >= dim) throw InputError(str(node_context(g, n), "index ", v, " is out of range for size ", dim));
        if (v < 0) v += dim;
        base += v * xst[static_cast<std::size_t>(j)];
      }
      std::memcpy(y.bytes.data() + base * es, upd.bytes.data() + p * inner * es, static_cast<std::size_t>(inner) * es);
    }
    out.push_back(std::move(y));
    return true;
  }
  if (op == "MatMul") {
    if (!is_float(x.dtype) || shape_numel(outs[0].shape) * std::max<int64_t>(1, xs.back()) > kMaxFoldedElements) return false;
    Shape as = xs, bs = in[1]->shape;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], kk = as.back(), nn = bs.back();
    const std::size_t rb = std::max(as.size(), bs.size()) - 2;
    Shape batch(rb);
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    batch = broadcast_shapes(ab, bb, g, n);
    const std::vector<int64_t> aoff = broadcast_offsets(batch, ab), boff = broadcast_offsets(batch, bb);
    const std::vector<double> A = to_double(x), B = to_double(*in[1]);
    Tensor y(x.dtype, outs[0].shape);
    for (std::size_t bi = 0; bi < aoff.size(); ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < nn; ++j) {
          double acc = 0;
          for (int64_t q = 0; q < kk; ++q) acc += A[aoff[bi] * m * kk + i * kk + q] * B[boff[bi] * kk * nn + q * nn + j];
          store(y, (static_cast<int64_t>(bi) * m + i) * nn + j, acc);
        }
    out.push_back(std::move(y));
    return true;
  }
  const std::vector<double> v = to_double(x);
  Tensor y(outs[0].dtype, outs[0].shape);
  if (op == "CumSum") {
    const int64_t axis = normalize_axis(in[1]->as_int64().at(0), r, g, n);
    const bool excl = n.get_int("exclusive", 0) != 0, rev = n.get_int("reverse", 0) != 0;
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
    out.push_back(std::move(y));
    return true;
  }
  if (op == "Trilu") {
    const int64_t k = in.size() > 1 && in[1] ? in[1]->as_int64().at(0) : 0;
    const bool upper = n.get_int("upper", 1) != 0;
    const std::size_t es = dtype_size(x.dtype);
    std::memset(y.bytes.data(), 0, y.bytes.size());
    for_each_index(xs, [&](const std::vector<int64_t>& idx, int64_t p) {
      const int64_t i = idx[static_cast<std::size_t>(r - 2)], j = idx[static_cast<std::size_t>(r - 1)];
      if (upper ? j - i >= k : j - i <= k) std::memcpy(y.bytes.data() + p * es, x.bytes.data() + p * es, es);
    });
    out.push_back(std::move(y));
    return true;
  }
  // Reductions and Softmax: each output element from the input elements that map onto it.
  std::vector<bool> red(static_cast<std::size_t>(r), false);
  if (op == "Softmax") {
    red[static_cast<std::size_t>(normalize_axis(n.get_int("axis", -1), r, g, n))] = true;
  } else {
    std::vector<int64_t> axes = in.size() > 1 && in[1] ? in[1]->as_int64() : std::vector<int64_t>{};
    for (int64_t a : axes) red[static_cast<std::size_t>(normalize_axis(a, r, g, n))] = true;
    if (axes.empty() && n.get_int("noop_with_empty_axes", 0) == 0) red.assign(static_cast<std::size_t>(r), true);
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
  std::vector<double> acc(static_cast<std::size_t>(groups), mx ? -HUGE_VAL : mn ? HUGE_VAL : prod ? 1.0 : 0.0);
  std::vector<double> cnt(static_cast<std::size_t>(groups), 0.0);
  for (std::size_t k = 0; k < v.size(); ++k) {
    double& a = acc[static_cast<std::size_t>(group[k])];
    if (mx) a = std::max(a, v[k]);
    else if (mn) a = std::min(a, v[k]);
    else if (prod) a *= v[k];
    else if (op == "ReduceL2") a += v[k] * v[k];
    else a += v[k];
    cnt[static_cast<std::size_t>(group[k])] += 1;
  }
  if (op == "Softmax") {
    std::vector<double> sum(static_cast<std::size_t>(groups), 0.0);
    for (std::size_t k = 0; k < v.size(); ++k) sum[static_cast<std::size_t>(group[k])] += std::exp(v[k] - acc[static_cast<std::size_t>(group[k])]);
    for (std::size_t k = 0; k < v.size(); ++k)
      store(y, static_cast<int64_t>(k), std::exp(v[k] - acc[static_cast<std::size_t>(group[k])]) / sum[static_cast<std::size_t>(group[k])]);
    out.push_back(std::move(y));
    return true;
  }
  for (int64_t k = 0; k < groups; ++k) {
    double a = acc[static_cast<std::size_t>(k)];
    if (op == "ReduceMean") a /= std::max(1.0, cnt[static_cast<std::size_t>(k)]);
    if (op == "ReduceL2") a = std::sqrt(a);
    if (is_float(y.dtype)) store(y, k, a);
    else store_int(y, k, saturate_to_int64(a));
  }
  out.push_back(std::move(y));
  return true;
}

}  // namespace

bool evaluate_node(const Graph& g, const Node& n, const std::vector<const Tensor*>& in,
                   const std::vector<const Shape*>& in_shapes, std::vector<Tensor>& out) {
  const std::string& op = n.op;
  if (!n.domain.empty()) return false;
  auto need = [&](std::size_t i) -> const Tensor& {
    if (i >= in.size() || !in[i]) throw InputError(str(node_context(g, n), "input ", i, " is missing"));
    return *in[i];
  };
  out.clear();

  if (op == "Identity") { out.push_back(need(0)); return true; }
  if (op == "Shape" || op == "Size") {
    if (in_shapes.empty() || !in_shapes[0]) return false;
    const Shape& s = *in_shapes[0];
    for (int64_t d : s) if (d < 0) return false;
    if (op == "Size") { out.push_back(Tensor::from(DType::I64, {}, std::vector<int64_t>{shape_numel(s)})); return true; }
    const int64_t r = static_cast<int64_t>(s.size());
    int64_t b = n.get_int("start", 0), e = n.get_int("end", r);
    if (b < 0) b += r;
    if (e < 0) e += r;
    b = std::clamp<int64_t>(b, 0, r);
    e = std::clamp<int64_t>(e, b, r);
    std::vector<int64_t> v(s.begin() + b, s.begin() + e);
    out.push_back(Tensor::from(DType::I64, {static_cast<int64_t>(v.size())}, v));
    return true;
  }
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!in[i] && !n.input(i).empty()) return false;  // only Shape/Size fold with runtime inputs
  if (op == "Constant") { out.push_back(constant_node_value(g, n)); return true; }
  if (op == "Cast") {
    const DType to = dtype_from_onnx(static_cast<int>(n.get_int("to", 0)));
    if (to == DType::Undefined) throw InputError(str(node_context(g, n), "Cast to an unsupported type ", n.get_int("to", 0)));
    out.push_back(cast_tensor(need(0), to));
    return true;
  }
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    // The bytes stay; only the shape changes, by the same rules shape inference applies.
    ValueInfo xv{n.input(0), need(0).dtype, need(0).shape};
    std::vector<const ValueInfo*> vin(n.inputs.size(), nullptr);
    vin[0] = &xv;
    std::vector<ValueInfo> vout;
    std::string why;
    if (!infer_node(g, n, vin, vout, why)) return false;
    out.push_back(reshaped(need(0), vout.at(0).shape));
    return true;
  }
  if (op == "Gather") {
    const Tensor& x = need(0);
    const int64_t r = static_cast<int64_t>(x.shape.size());
    const int64_t axis = normalize_axis(n.get_int("axis", 0), r, g, n);
    std::vector<int64_t> idx = int_input(g, n, in.size() > 1 ? in[1] : nullptr, "indices");
    const Shape& ishape = need(1).shape;
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
        if (j < -dim || j >= dim) throw InputError(str(node_context(g, n), "index ", j, " is out of range for size ", dim));
        if (j < 0) j += dim;
        for (int64_t k = 0; k < inner; ++k) offs.push_back((o * dim + j) * inner + k);
      }
    out.push_back(gather_elements(x, shape, offs));
    return true;
  }
  if (op == "Slice") {
    const Tensor& x = need(0);
    const int64_t r = static_cast<int64_t>(x.shape.size());
    const std::vector<int64_t> starts = int_input(g, n, in.size() > 1 ? in[1] : nullptr, "starts");
    const std::vector<int64_t> ends = int_input(g, n, in.size() > 2 ? in[2] : nullptr, "ends");
    std::vector<int64_t> axes, steps;
    if (in.size() > 3 && in[3]) axes = in[3]->as_int64();
    else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (in.size() > 4 && in[4]) steps = in[4]->as_int64();
    else steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
      throw InputError(str(node_context(g, n), "starts, ends, axes and steps differ in length"));
    std::vector<int64_t> begin(r, 0), step(r, 1);
    Shape shape = x.shape;
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const int64_t a = normalize_axis(axes[i], r, g, n);
      if (steps[i] == 0) throw InputError(str(node_context(g, n), "step 0"));
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
    out.push_back(gather_elements(x, shape, offs));
    return true;
  }
  if (op == "Concat") {
    const Tensor& first = need(0);
    const int64_t r = static_cast<int64_t>(first.shape.size());
    const int64_t axis = normalize_axis(n.get_int("axis", 0), r, g, n);
    Shape shape = first.shape;
    shape[axis] = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const Tensor& t = need(i);
      bool same = t.dtype == first.dtype && static_cast<int64_t>(t.shape.size()) == r;
      for (int64_t d = 0; same && d < r; ++d) same = d == axis || t.shape[d] == first.shape[d];
      if (!same) throw InputError(str(node_context(g, n), "inputs differ in type, rank or a non-axis dimension"));
      shape[axis] = checked_add(shape[axis], t.shape[axis], "Concat");
    }
    if (too_big_to_fold(shape)) return false;
    Tensor o(first.dtype, shape);
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
    const std::size_t es = dtype_size(first.dtype);
    uint8_t* dst = o.bytes.data();
    for (int64_t k = 0; k < outer; ++k)
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::size_t chunk = static_cast<std::size_t>(in[i]->numel() / std::max<int64_t>(outer, 1)) * es;
        if (in[i]->numel() == 0) continue;
        std::memcpy(dst, in[i]->bytes.data() + k * chunk, chunk);
        dst += chunk;
      }
    out.push_back(std::move(o));
    return true;
  }
  if (op == "Transpose") {
    const Tensor& x = need(0);
    std::vector<int64_t> perm = n.get_ints("perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(x.shape.size()) - 1; i >= 0; --i) perm.push_back(i);
    std::vector<bool> seen(x.shape.size(), false);
    if (perm.size() != x.shape.size()) throw InputError(str(node_context(g, n), "perm has the wrong length"));
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
        throw InputError(str(node_context(g, n), "perm is not a permutation"));
      seen[p] = true;
    }
    out.push_back(transpose(x, perm));
    return true;
  }
  auto check_dims = [&](const std::vector<int64_t>& dims) {
    for (int64_t d : dims)
      if (d < 0) throw InputError(str(node_context(g, n), "negative dimension in ", shape_str(dims)));
  };
  if (op == "ConstantOfShape") {
    const std::vector<int64_t> shape = need(0).as_int64();
    check_dims(shape);
    if (shape_numel(shape) > kMaxFoldedElements) return false;
    Tensor v = n.has("value") && n.attrs.at("value").t ? *n.attrs.at("value").t : Tensor::from(DType::F32, {1}, std::vector<float>{0.f});
    if (v.numel() != 1)
      throw InputError(str(node_context(g, n), "the value attribute holds ", v.numel(), " elements instead of one"));
    Tensor o(v.dtype, shape);
    const std::size_t es = dtype_size(v.dtype);
    for (int64_t k = 0; k < o.numel(); ++k) std::memcpy(o.bytes.data() + k * es, v.bytes.data(), es);
    out.push_back(std::move(o));
    return true;
  }
  if (op == "Expand" || op == "Tile") {
    const Tensor& x = need(0);
    const std::vector<int64_t> arg = need(1).as_int64();
    check_dims(arg);
    if (op == "Expand") {
      const Shape shape = broadcast_shapes(x.shape, arg, g, n);
      if (shape_numel(shape) > kMaxFoldedElements) return false;
      out.push_back(gather_elements(x, shape, broadcast_offsets(shape, x.shape)));
      return true;
    }
    if (arg.size() != x.shape.size()) throw InputError(str(node_context(g, n), "repeats has the wrong length"));
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
    out.push_back(gather_elements(x, shape, offs));
    return true;
  }
  if (op == "Range") {
    const Tensor& s = need(0);
    const int64_t count = range_length(g, n, s, need(1), need(2));
    if (count < 0) return false;  // too long to keep as a constant
    const double start = to_double(s)[0], delta = to_double(need(2))[0];
    Tensor o(s.dtype, {count});
    for (int64_t k = 0; k < count; ++k) store(o, k, start + static_cast<double>(k) * delta);
    out.push_back(std::move(o));
    return true;
  }

  // Element-wise arithmetic and comparisons.
  using VD = std::vector<double>;
  using VI = std::vector<int64_t>;
  const DType t0 = in.empty() || !in[0] ? DType::Undefined : in[0]->dtype;
  auto ew = [&](DType ot, std::function<double(const VD&)> fd, std::function<int64_t(const VI&)> fi) {
    // The lambdas below index their arguments blindly: hold the node to its op's input count (the
    // loader already did for model nodes; this covers nodes that passes or tests build).
    check_node_arity(g, n);
    std::vector<const Tensor*> args;
    for (std::size_t i = 0; i < in.size(); ++i) args.push_back(&need(i));
    return elementwise(g, n, args, ot, fd, fi, out);
  };
  if (op == "Add") return ew(t0, [](const VD& a) { return a[0] + a[1]; }, [](const VI& a) { return wrap_add(a[0], a[1]); });
  if (op == "Sub") return ew(t0, [](const VD& a) { return a[0] - a[1]; }, [](const VI& a) { return wrap_sub(a[0], a[1]); });
  if (op == "Mul") return ew(t0, [](const VD& a) { return a[0] * a[1]; }, [](const VI& a) { return wrap_mul(a[0], a[1]); });
  if (op == "Div") {
    return ew(t0, [](const VD& a) { return a[0] / a[1]; }, [&](const VI& a) -> int64_t {
      if (a[1] == 0) throw InputError(str(node_context(g, n), "integer division by zero"));
      if (a[1] == -1) return wrap_neg(a[0]);  // INT64_MIN / -1 traps on x86
      return a[0] / a[1];
    });
  }
  if (op == "Mod") {
    const bool fmod_mode = n.get_int("fmod", 0) != 0;
    return ew(t0, [](const VD& a) { return std::fmod(a[0], a[1]); }, [&](const VI& a) -> int64_t {
      if (a[1] == 0) throw InputError(str(node_context(g, n), "integer modulo by zero"));
      if (a[1] == -1) return 0;  // INT64_MIN % -1 traps on x86
      int64_t m = a[0] % a[1];
      if (!fmod_mode && m != 0 && ((m < 0) != (a[1] < 0))) m += a[1];  // Python-style sign
      return m;
    });
  }
  if (op == "Pow") return ew(t0, [](const VD& a) { return std::pow(a[0], a[1]); }, nullptr);
  if (op == "Min" || op == "Max") {
    const bool mx = op == "Max";
    return ew(t0, [mx](const VD& a) { double m = a[0]; for (double v : a) m = mx ? std::max(m, v) : std::min(m, v); return m; },
              [mx](const VI& a) { int64_t m = a[0]; for (int64_t v : a) m = mx ? std::max(m, v) : std::min(m, v); return m; });
  }
  if (op == "Equal") return ew(DType::Bool, [](const VD& a) { return double(a[0] == a[1]); }, [](const VI& a) { return int64_t(a[0] == a[1]); });
  if (op == "Less") return ew(DType::Bool, [](const VD& a) { return double(a[0] < a[1]); }, [](const VI& a) { return int64_t(a[0] < a[1]); });
  if (op == "Greater") return ew(DType::Bool, [](const VD& a) { return double(a[0] > a[1]); }, [](const VI& a) { return int64_t(a[0] > a[1]); });
  if (op == "Where") {
    const DType ot = in.size() > 1 && in[1] ? in[1]->dtype : DType::Undefined;
    return ew(ot, [](const VD& a) { return a[0] != 0 ? a[1] : a[2]; }, [](const VI& a) { return a[0] != 0 ? a[1] : a[2]; });
  }
  if (op == "Not") return ew(DType::Bool, [](const VD& a) { return double(a[0] == 0); }, [](const VI& a) { return int64_t(a[0] == 0); });
  if (op == "Neg") return ew(t0, [](const VD& a) { return -a[0]; }, [](const VI& a) { return wrap_neg(a[0]); });
  if (op == "Abs") return ew(t0, [](const VD& a) { return std::fabs(a[0]); }, [](const VI& a) { return a[0] < 0 ? wrap_neg(a[0]) : a[0]; });
  if (op == "Floor") return ew(t0, [](const VD& a) { return std::floor(a[0]); }, nullptr);
  if (op == "Ceil") return ew(t0, [](const VD& a) { return std::ceil(a[0]); }, nullptr);
  if (op == "Sqrt") return ew(t0, [](const VD& a) { return std::sqrt(a[0]); }, nullptr);
  if (op == "Exp") return ew(t0, [](const VD& a) { return std::exp(a[0]); }, nullptr);
  if (op == "Log") return ew(t0, [](const VD& a) { return std::log(a[0]); }, nullptr);
  if (op == "Reciprocal") return ew(t0, [](const VD& a) { return 1.0 / a[0]; }, nullptr);
  if (op == "Relu") return ew(t0, [](const VD& a) { return a[0] > 0 ? a[0] : 0.0; }, [](const VI& a) { return a[0] > 0 ? a[0] : 0; });
  if (op == "Sigmoid") return ew(t0, [](const VD& a) { return 1.0 / (1.0 + std::exp(-a[0])); }, nullptr);
  if (op == "LessOrEqual") return ew(DType::Bool, [](const VD& a) { return double(a[0] <= a[1]); }, [](const VI& a) { return int64_t(a[0] <= a[1]); });
  if (op == "GreaterOrEqual") return ew(DType::Bool, [](const VD& a) { return double(a[0] >= a[1]); }, [](const VI& a) { return int64_t(a[0] >= a[1]); });
  if (op == "And") return ew(DType::Bool, [](const VD& a) { return double(a[0] != 0 && a[1] != 0); }, [](const VI& a) { return int64_t(a[0] != 0 && a[1] != 0); });
  if (op == "Or") return ew(DType::Bool, [](const VD& a) { return double(a[0] != 0 || a[1] != 0); }, [](const VI& a) { return int64_t(a[0] != 0 || a[1] != 0); });
  if (op == "Xor") return ew(DType::Bool, [](const VD& a) { return double((a[0] != 0) != (a[1] != 0)); }, [](const VI& a) { return int64_t((a[0] != 0) != (a[1] != 0)); });
  if (op == "IsNaN") return ew(DType::Bool, [](const VD& a) { return double(std::isnan(a[0])); }, [](const VI&) { return int64_t(0); });
  if (op == "IsInf") {
    const bool neg = n.get_int("detect_negative", 1) != 0, pos = n.get_int("detect_positive", 1) != 0;
    return ew(DType::Bool, [=](const VD& a) { return double(std::isinf(a[0]) && ((a[0] > 0 && pos) || (a[0] < 0 && neg))); },
              [](const VI&) { return int64_t(0); });
  }
  if (op == "Sign") return ew(t0, [](const VD& a) { return double((a[0] > 0) - (a[0] < 0)); }, [](const VI& a) { return int64_t((a[0] > 0) - (a[0] < 0)); });
  if (op == "Cos") return ew(t0, [](const VD& a) { return std::cos(a[0]); }, nullptr);
  if (op == "Sin") return ew(t0, [](const VD& a) { return std::sin(a[0]); }, nullptr);
  if (op == "Tanh") return ew(t0, [](const VD& a) { return std::tanh(a[0]); }, nullptr);
  if (op == "Erf") return ew(t0, [](const VD& a) { return std::erf(a[0]); }, nullptr);
  if (op == "Round") return ew(t0, [](const VD& a) { return std::nearbyint(a[0]); }, nullptr);
  if (op == "Gelu") {
    const bool tanh_form = n.get_string("approximate", "none") == "tanh";
    return ew(t0, [tanh_form](const VD& a) {
      const double x = a[0];
      if (tanh_form) return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
    }, nullptr);
  }
  return evaluate_structured_node(g, n, in, out);
}

}  // namespace sluice
