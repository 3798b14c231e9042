// Ops that move bytes without arithmetic: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout,
// Shape, Constant, ConstantOfShape, Cast, Concat and Transpose.  Shapes are static, so the shape
// operands of Reshape/Squeeze/Unsqueeze are not even read.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/axis_view.h"
#include "engine/cpu/index_map.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

void parallel_copy(ThreadPool& pool, const void* src, void* dst, std::size_t bytes) {
  const int64_t chunk = 1 << 20;
  pool.parallel_for(chunk_count(static_cast<int64_t>(bytes), chunk), [&](int64_t t, int) {
    const std::size_t b = static_cast<std::size_t>(t * chunk);
    std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, std::min<std::size_t>(chunk, bytes - b));
  });
}

// Output 0 is input 0's bytes under another shape.
std::unique_ptr<Kernel> make_copy(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& y = init.output(0);
  if (x.dtype != y.dtype || x.bytes() != y.bytes())
    init.fail("output ", dtype_name(y.dtype), shape_str(y.shape), " does not hold input ", dtype_name(x.dtype), shape_str(x.shape));
  if (init.node.op == "Dropout" && init.out.size() > 1 && init.out[1]) init.fail("the mask output is not supported");
  const std::size_t bytes = x.bytes();
  return lambda_kernel([bytes](const KernelArgs& a) { parallel_copy(a.pool, a.in[0], a.out[0], bytes); });
}

// Writes a value known when the engine is built (Shape, Constant, ConstantOfShape).
std::unique_ptr<Kernel> make_fixed(const KernelInit& init, std::vector<uint8_t> bytes) {
  if (bytes.size() != init.output(0).bytes()) init.fail("value does not fit the output ", shape_str(init.output(0).shape));
  return lambda_kernel([bytes](const KernelArgs& a) {
    if (!bytes.empty()) std::memcpy(a.out[0], bytes.data(), bytes.size());  // an empty vector's data() may be null
  });
}

std::unique_ptr<Kernel> make_shape(const KernelInit& init) {
  const Shape& s = init.input(0).shape;
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = init.node.get_int("start", 0), end = init.node.get_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::max<int64_t>(0, std::min(start, r));
  end = std::max<int64_t>(start, std::min(end, r));
  init.require_dtype(init.output(0), DType::I64);
  const std::vector<int64_t> dims(s.begin() + start, s.begin() + end);
  std::vector<uint8_t> bytes(dims.size() * sizeof(int64_t));
  if (!dims.empty()) std::memcpy(bytes.data(), dims.data(), bytes.size());
  return make_fixed(init, std::move(bytes));
}

std::unique_ptr<Kernel> make_constant(const KernelInit& init) {
  const auto it = init.node.attrs.find("value");
  if (it == init.node.attrs.end() || !it->second.t) init.fail("only the 'value' attribute is supported");
  if (it->second.t->dtype != init.output(0).dtype) init.fail("value type differs from the output's");
  return make_fixed(init, it->second.t->bytes);
}

std::unique_ptr<Kernel> make_constant_of_shape(const KernelInit& init) {
  const ValueInfo& y = init.output(0);
  std::vector<uint8_t> one(dtype_size(y.dtype), 0);
  const auto it = init.node.attrs.find("value");
  if (it != init.node.attrs.end() && it->second.t) {
    if (it->second.t->dtype != y.dtype || it->second.t->bytes.size() != one.size()) init.fail("value must be one ", dtype_name(y.dtype));
    one = it->second.t->bytes;
  }
  std::vector<uint8_t> bytes(y.bytes());
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = one[i % one.size()];
  return make_fixed(init, std::move(bytes));
}

// ---- Cast ----------------------------------------------------------------------------------------
// Floating sources go through double, integer sources through int64, so int64 stays exact.
template <typename T> struct Io;
template <> struct Io<float> { static double get(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; } };
template <> struct Io<double> { static double get(const void* p, int64_t i) { return static_cast<const double*>(p)[i]; } };
struct F16 {};
struct BF16 {};
struct Bool {};
template <> struct Io<F16> { static double get(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); } };
template <> struct Io<BF16> { static double get(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); } };
template <> struct Io<Bool> { static int64_t get(const void* p, int64_t i) { return static_cast<const uint8_t*>(p)[i] != 0; } };
template <> struct Io<uint8_t> { static int64_t get(const void* p, int64_t i) { return static_cast<const uint8_t*>(p)[i]; } };
template <> struct Io<int8_t> { static int64_t get(const void* p, int64_t i) { return static_cast<const int8_t*>(p)[i]; } };
template <> struct Io<int32_t> { static int64_t get(const void* p, int64_t i) { return static_cast<const int32_t*>(p)[i]; } };
template <> struct Io<int64_t> { static int64_t get(const void* p, int64_t i) { return static_cast<const int64_t*>(p)[i]; } };

// Float to integer: truncation toward zero; NaN becomes 0 and the int64 range saturates, so the
// conversion is defined (C++ leaves it undefined) and then wraps to narrower types like C casts do.
inline int64_t to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

template <typename D> void put(void* p, int64_t i, double v);
template <typename D> void put(void* p, int64_t i, int64_t v);
template <> void put<float>(void* p, int64_t i, double v) { static_cast<float*>(p)[i] = static_cast<float>(v); }
template <> void put<float>(void* p, int64_t i, int64_t v) { static_cast<float*>(p)[i] = static_cast<float>(v); }
template <> void put<double>(void* p, int64_t i, double v) { static_cast<double*>(p)[i] = v; }
template <> void put<double>(void* p, int64_t i, int64_t v) { static_cast<double*>(p)[i] = static_cast<double>(v); }
template <> void put<F16>(void* p, int64_t i, double v) { static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); }
template <> void put<F16>(void* p, int64_t i, int64_t v) { static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); }
template <> void put<BF16>(void* p, int64_t i, double v) { static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); }
template <> void put<BF16>(void* p, int64_t i, int64_t v) { static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); }
template <> void put<Bool>(void* p, int64_t i, double v) { static_cast<uint8_t*>(p)[i] = v != 0.0; }
template <> void put<Bool>(void* p, int64_t i, int64_t v) { static_cast<uint8_t*>(p)[i] = v != 0; }
#define SLUICE_PUT_INT(T)                                                                              \
  template <> void put<T>(void* p, int64_t i, double v) { static_cast<T*>(p)[i] = static_cast<T>(to_int(v)); } \
  template <> void put<T>(void* p, int64_t i, int64_t v) { static_cast<T*>(p)[i] = static_cast<T>(v); }
SLUICE_PUT_INT(uint8_t)
SLUICE_PUT_INT(int8_t)
SLUICE_PUT_INT(int32_t)
SLUICE_PUT_INT(int64_t)
#undef SLUICE_PUT_INT

using CastFn = void (*)(const void*, void*, int64_t, int64_t);

template <typename S, typename D>
void cast_range(const void* x, void* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) put<D>(y, i, Io<S>::get(x, i));
}

template <typename S>
CastFn cast_to(DType d) {
  switch (d) {
    case DType::F32: return cast_range<S, float>;
    case DType::F64: return cast_range<S, double>;
    case DType::F16: return cast_range<S, F16>;
    case DType::BF16: return cast_range<S, BF16>;
    case DType::Bool: return cast_range<S, Bool>;
    case DType::U8: return cast_range<S, uint8_t>;
    case DType::I8: return cast_range<S, int8_t>;
    case DType::I32: return cast_range<S, int32_t>;
    case DType::I64: return cast_range<S, int64_t>;
    default: return nullptr;
  }
}

CastFn cast_fn(DType s, DType d) {
  switch (s) {
    case DType::F32: return cast_to<float>(d);
    case DType::F64: return cast_to<double>(d);
    case DType::F16: return cast_to<F16>(d);
    case DType::BF16: return cast_to<BF16>(d);
    case DType::Bool: return cast_to<Bool>(d);
    case DType::U8: return cast_to<uint8_t>(d);
    case DType::I8: return cast_to<int8_t>(d);
    case DType::I32: return cast_to<int32_t>(d);
    case DType::I64: return cast_to<int64_t>(d);
    default: return nullptr;
  }
}

std::unique_ptr<Kernel> make_cast(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& y = init.output(0);
  const DType to = dtype_from_onnx(static_cast<int>(init.node.get_int("to", 0)));
  if (to != y.dtype) init.fail("attribute 'to' (", dtype_name(to), ") differs from the output type ", dtype_name(y.dtype));
  if (shape_numel(x.shape) != shape_numel(y.shape)) init.fail("output and input sizes differ");
  const CastFn fn = cast_fn(x.dtype, y.dtype);
  if (!fn) init.fail("cast from ", dtype_name(x.dtype), " to ", dtype_name(y.dtype), " is not implemented");
  const int64_t n = shape_numel(x.shape);
  return lambda_kernel([fn, n](const KernelArgs& a) {
    for_chunks(a.pool, n, [&](int64_t b, int64_t e) { fn(a.in[0], a.out[0], b, e); });
  });
}

// ---- Concat and Transpose ------------------------------------------------------------------------
std::unique_ptr<Kernel> make_concat(const KernelInit& init) {
  const ValueInfo& y = init.output(0);
  const int64_t r = static_cast<int64_t>(y.shape.size());
  const int64_t axis = init.axis(init.node.get_int("axis", 0), r);
  const std::size_t es = dtype_size(y.dtype);
  const AxisView view = axis_view(y.shape, axis);
  const int64_t outer = view.outer, inner = view.inner;
  std::vector<std::size_t> block;  // bytes each input contributes per outer index
  int64_t total = 0;
  for (std::size_t i = 0; i < init.num_inputs(); ++i) {
    const ValueInfo& x = init.input(i);
    if (x.dtype != y.dtype || static_cast<int64_t>(x.shape.size()) != r) init.fail("input ", i, " does not match the output");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && x.shape[d] != y.shape[d]) init.fail("input ", i, " ", shape_str(x.shape), " does not match output ", shape_str(y.shape));
    block.push_back(static_cast<std::size_t>(x.shape[axis] * inner) * es);
    total += x.shape[axis];
  }
  if (total != y.shape[axis]) init.fail("inputs add up to ", total, " along axis ", axis, ", output has ", y.shape[axis]);
  const std::size_t row = static_cast<std::size_t>(total * inner) * es;
  return lambda_kernel([block, outer, row](const KernelArgs& a) {
    const int64_t per_task = std::max<int64_t>(1, static_cast<int64_t>((1 << 18) / std::max<std::size_t>(row, 1)));
    a.pool.parallel_for(chunk_count(outer, per_task), [&](int64_t t, int) {
      const int64_t end = std::min(outer, (t + 1) * per_task);
      for (int64_t o = t * per_task; o < end; ++o) {
        char* dst = static_cast<char*>(a.out[0]) + o * row;
        for (std::size_t i = 0; i < block.size(); ++i) {
          if (block[i]) std::memcpy(dst, static_cast<const char*>(a.in[i]) + o * block[i], block[i]);  // empty: no buffer
          dst += block[i];
        }
      }
    });
  });
}

std::unique_ptr<Kernel> make_transpose(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& y = init.output(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> perm = init.node.get_ints("perm");
  if (perm.empty())
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != r || y.dtype != x.dtype || r > static_cast<int64_t>(kMaxRank))
    init.fail("perm ", shape_str(perm), " does not fit input ", shape_str(x.shape));
  std::vector<bool> seen(r, false);
  const auto st = strides_of(x.shape);
  // A transpose is a gather whose per-axis offsets are the permuted input strides.
  IndexMap m;
  m.elem = dtype_size(x.dtype);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t p = init.axis(perm[d], r);
    if (seen[p]) init.fail("perm repeats axis ", p);
    seen[p] = true;
    m.out.push_back(x.shape[p]);
    std::vector<int64_t> offs(static_cast<std::size_t>(x.shape[p]));
    for (int64_t i = 0; i < x.shape[p]; ++i) offs[i] = i * st[p];
    m.offsets.push_back(std::move(offs));
  }
  if (m.out != y.shape) init.fail("output ", shape_str(y.shape), " should be ", shape_str(m.out));
  return lambda_kernel([m](const KernelArgs& a) { gather_by_map(m, a.in[0], a.out[0], a.pool); });
}

}  // namespace

void add_shape_kernels(KernelTable& t) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}) t[op] = make_copy;
  t["Shape"] = make_shape;
  t["Constant"] = make_constant;
  t["ConstantOfShape"] = make_constant_of_shape;
  t["Cast"] = make_cast;
  t["Concat"] = make_concat;
  t["Transpose"] = make_transpose;
}

}  // namespace sluice::cpu
