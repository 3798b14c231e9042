// Add, Sub, Mul, Div, Pow with numpy broadcasting, for float32, int64 and int32.
//
// Broadcasting becomes per-input strides over the output's index space (0 on a broadcast axis);
// adjacent axes that both inputs walk the same way are merged, so the common cases (same shape,
// per-channel bias, scalar) end up as one or two flat loops.
#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

enum class BinOp { Add, Sub, Mul, Div, Pow };

template <typename T>
inline T apply(BinOp op, T a, T b) {
  if constexpr (std::is_integral<T>::value) {
    // Two's-complement wrap-around (what the hardware does) instead of undefined overflow; and
    // MIN / -1, which traps on x86 like a division by zero, defined as its wrapped result.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case BinOp::Add: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case BinOp::Sub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case BinOp::Mul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case BinOp::Div: return b == 0 ? T(0) : b == T(-1) ? static_cast<T>(U(0) - static_cast<U>(a)) : a / b;
      case BinOp::Pow: {
        const double p = std::pow(static_cast<double>(a), static_cast<double>(b));
        if (!(p == p)) return T(0);
        if (p >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        if (p <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
        return static_cast<T>(p);
      }
    }
    return a;
  }
  switch (op) {
    case BinOp::Add: return a + b;
    case BinOp::Sub: return a - b;
    case BinOp::Mul: return a * b;
    case BinOp::Div: return a / b;
    case BinOp::Pow: return static_cast<T>(std::pow(a, b));
  }
  return a;
}

template <typename T, BinOp OP>
void inner_loop(const T* a, int64_t sa, const T* b, int64_t sb, T* y, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = apply<T>(OP, a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = apply<T>(OP, a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = apply<T>(OP, av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = apply<T>(OP, a[i * sa], b[i * sb]);
  }
}

struct Broadcast {
  std::vector<int64_t> dims, sa, sb;  // merged output dims and the inputs' strides over them
  int64_t total = 0;
};

Broadcast plan_broadcast(const KernelInit& init, const Shape& a, const Shape& b, const Shape& y) {
  const std::size_t r = y.size();
  if (a.size() > r || b.size() > r) init.fail("output rank is smaller than an input's");
  auto strides_for = [&](const Shape& s) {
    std::vector<int64_t> st(r, 0);
    const std::size_t off = r - s.size();
    int64_t acc = 1;
    for (std::size_t i = s.size(); i-- > 0;) {
      const int64_t d = s[i];
      if (d != y[off + i] && d != 1)
        init.fail("shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast to ", shape_str(y));
      st[off + i] = d == 1 ? 0 : acc;
      acc *= d;
    }
    return st;
  };
  const auto sa = strides_for(a), sb = strides_for(b);
  for (std::size_t i = 0; i < r; ++i)
    if (y[i] != std::max(i + a.size() >= r ? a[i + a.size() - r] : 1, i + b.size() >= r ? b[i + b.size() - r] : 1) &&
        y[i] != 0)
      init.fail("output ", shape_str(y), " is not the broadcast of ", shape_str(a), " and ", shape_str(b));
  Broadcast p;
  p.total = shape_numel(y);
  for (std::size_t i = 0; i < r; ++i) {
    if (y[i] == 1) continue;
    if (!p.dims.empty() && p.sa.back() == sa[i] * y[i] && p.sb.back() == sb[i] * y[i]) {
      p.dims.back() *= y[i];  // the previous axis continues this one for both inputs
      p.sa.back() = sa[i];
      p.sb.back() = sb[i];
    } else {
      p.dims.push_back(y[i]);
      p.sa.push_back(sa[i]);
      p.sb.push_back(sb[i]);
    }
  }
  if (p.dims.empty()) {
    p.dims = {1};
    p.sa = {0};
    p.sb = {0};
  }
  return p;
}

template <typename T, BinOp OP>
void run_broadcast(const Broadcast& p, const T* a, const T* b, T* y, ThreadPool& pool) {
  const int64_t k = static_cast<int64_t>(p.dims.size());
  const int64_t inner = p.dims[k - 1];
  for_chunks(pool, p.total, [&](int64_t begin, int64_t end) {
    int64_t idx[16] = {0};
    int64_t rem = begin;
    for (int64_t d = k - 1; d >= 0; --d) {
      idx[d] = rem % p.dims[d];
      rem /= p.dims[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t oa = 0, ob = 0;
      for (int64_t d = 0; d < k; ++d) {
        oa += idx[d] * p.sa[d];
        ob += idx[d] * p.sb[d];
      }
      const int64_t n = std::min(end - pos, inner - idx[k - 1]);
      inner_loop<T, OP>(a + oa, p.sa[k - 1], b + ob, p.sb[k - 1], y + pos, n);
      pos += n;
      idx[k - 1] += n;
      for (int64_t d = k - 1; d > 0 && idx[d] >= p.dims[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

template <BinOp OP>
std::unique_ptr<Kernel> make_binary(const KernelInit& init) {
  const ValueInfo& a = init.input(0);
  const ValueInfo& b = init.input(1);
  const ValueInfo& y = init.output(0);
  if (a.dtype != b.dtype || y.dtype != a.dtype) init.fail("inputs and output must share one type");
  if (a.dtype != DType::F32 && a.dtype != DType::I64 && a.dtype != DType::I32)
    init.fail("type ", dtype_name(a.dtype), " is not implemented (float32, int64, int32)");
  if (OP == BinOp::Pow && a.dtype != DType::F32) init.fail("Pow is implemented for float32 only");
  const Broadcast p = plan_broadcast(init, a.shape, b.shape, y.shape);
  if (p.dims.size() > 16) init.fail("too many dimensions");
  const DType t = a.dtype;
  return lambda_kernel([p, t](const KernelArgs& k) {
    switch (t) {
      case DType::F32:
        run_broadcast<float, OP>(p, static_cast<const float*>(k.in[0]), static_cast<const float*>(k.in[1]),
                                 static_cast<float*>(k.out[0]), k.pool);
        break;
      case DType::I64:
        run_broadcast<int64_t, OP>(p, static_cast<const int64_t*>(k.in[0]), static_cast<const int64_t*>(k.in[1]),
                                   static_cast<int64_t*>(k.out[0]), k.pool);
        break;
      default:
        run_broadcast<int32_t, OP>(p, static_cast<const int32_t*>(k.in[0]), static_cast<const int32_t*>(k.in[1]),
                                   static_cast<int32_t*>(k.out[0]), k.pool);
        break;
    }
  });
}

}  // namespace

void add_binary_kernels(KernelTable& t) {
  t["Add"] = make_binary<BinOp::Add>;
  t["Sub"] = make_binary<BinOp::Sub>;
  t["Mul"] = make_binary<BinOp::Mul>;
  t["Div"] = make_binary<BinOp::Div>;
  t["Pow"] = make_binary<BinOp::Pow>;
}

}  // namespace sluice::cpu
