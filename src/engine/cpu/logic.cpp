// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), logic (And, Or, Xor, Not), Where,
// Mod, Min, Max, IsNaN and IsInf at run time, for any mix of float32, int64, int32, uint8 and bool
// operands with numpy broadcasting.  These run on masks and index tensors, rarely on the bulk of a
// model's data, so one general loop serves them all: integer operands are computed in int64 (exact),
// anything with a float operand in double (exact for float32 values).
#include <cmath>
#include <functional>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

constexpr std::size_t kMaxDims = 16;

bool is_int_type(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::U8 || t == DType::I8 || t == DType::Bool; }

template <typename T>
T load_as(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<T>(static_cast<const float*>(p)[i]);
    case DType::I64: return static_cast<T>(static_cast<const int64_t*>(p)[i]);
    case DType::I32: return static_cast<T>(static_cast<const int32_t*>(p)[i]);
    case DType::I8: return static_cast<T>(static_cast<const int8_t*>(p)[i]);
    default: return static_cast<T>(static_cast<const uint8_t*>(p)[i]);  // U8, Bool
  }
}

template <typename T>
void store_as(void* p, DType t, int64_t i, T v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != T(0) ? 1 : 0; break;
    default: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}

struct Plan {
  Shape out;
  std::vector<std::vector<int64_t>> strides;  // per input, per output axis (0: broadcast)
  std::vector<DType> types;
  DType out_type = DType::F32;
  int64_t total = 0;
  // Every input either has the output's shape or is one value (masks against a scalar, the
  // NaN guard after an attention softmax): element o reads element o, or element 0.
  bool flat = false;
  std::vector<int64_t> flat_step;  // per input: 1 or 0
};

Plan plan(const KernelInit& init) {
  Plan p;
  p.out = init.output(0).shape;
  p.out_type = init.output(0).dtype;
  p.total = shape_numel(p.out);
  const std::size_t r = p.out.size();
  if (r > kMaxDims) init.fail("rank ", r, " is not supported");
  for (std::size_t k = 0; k < init.num_inputs(); ++k) {
    const ValueInfo& v = init.input(k);
    const DType t = v.dtype;
    if (t != DType::F32 && !is_int_type(t)) init.fail("type ", dtype_name(t), " is not implemented");
    if (v.shape.size() > r) init.fail("input ", k, " has a higher rank than the output");
    std::vector<int64_t> st(r, 0);
    const std::vector<int64_t> s = strides_of(v.shape);
    const std::size_t off = r - v.shape.size();
    for (std::size_t d = 0; d < v.shape.size(); ++d) {
      if (v.shape[d] != 1 && v.shape[d] != p.out[off + d])
        init.fail("input ", k, " ", shape_str(v.shape), " does not broadcast to ", shape_str(p.out));
      st[off + d] = v.shape[d] == 1 ? 0 : s[d];
    }
    p.strides.push_back(std::move(st));
    p.types.push_back(t);
  }
  p.flat = true;
  for (std::size_t k = 0; k < init.num_inputs(); ++k) {
    const Shape& s = init.input(k).shape;
    const bool same = shape_numel(s) == p.total && (s.size() == r ? s == p.out : false);
    const bool scalar = shape_numel(s) == 1;
    p.flat = p.flat && (same || scalar);
    p.flat_step.push_back(same && !scalar ? 1 : 0);
  }
  return p;
}

// Runs f(values of the inputs at one output element) -> the output value, over the output.
template <typename T, typename F>
void run_plan(const Plan& p, const KernelArgs& a, F f) {
  const std::size_t r = p.out.size(), ni = p.types.size();
  if (p.flat) {
    for_chunks(a.pool, p.total, [&](int64_t begin, int64_t end) {
      T v[4];
      for (int64_t o = begin; o < end; ++o) {
        for (std::size_t k = 0; k < ni; ++k) v[k] = load_as<T>(a.in[k], p.types[k], o * p.flat_step[k]);
        store_as<T>(a.out[0], p.out_type, o, f(v));
      }
    }, 16384);
    return;
  }
  for_chunks(a.pool, p.total, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims] = {0};
    int64_t rem = begin;
    for (std::size_t d = r; d-- > 0;) {
      idx[d] = rem % p.out[d];
      rem /= p.out[d];
    }
    T v[4];
    for (int64_t o = begin; o < end; ++o) {
      for (std::size_t k = 0; k < ni; ++k) {
        int64_t off = 0;
        for (std::size_t d = 0; d < r; ++d) off += idx[d] * p.strides[k][d];
        v[k] = load_as<T>(a.in[k], p.types[k], off);
      }
      store_as<T>(a.out[0], p.out_type, o, f(v));
      for (std::size_t d = r; d-- > 0;) {
        if (++idx[d] < p.out[d]) break;
        idx[d] = 0;
      }
    }
  }, 4096);
}

// An op with one function for integer operands and one for float ones (nullptr: ints not allowed).
using IntFn = int64_t (*)(const int64_t*);
using FloatFn = double (*)(const double*);

std::unique_ptr<Kernel> make_nary(const KernelInit& init, IntFn fi, FloatFn fd, std::size_t max_inputs = 3) {
  if (init.num_inputs() < 1 || init.num_inputs() > max_inputs) init.fail("takes 1 to ", max_inputs, " inputs here");
  for (std::size_t k = 0; k < init.num_inputs(); ++k) init.input(k);  // all present
  const Plan p = plan(init);
  bool ints = true;
  // Where's condition does not decide the arithmetic; its branches do.
  for (std::size_t k = init.node.op == "Where" ? 1 : 0; k < p.types.size(); ++k) ints = ints && is_int_type(p.types[k]);
  if (ints && !fi) init.fail("integer operands are not supported");
  if (ints) return lambda_kernel([p, fi](const KernelArgs& a) { run_plan<int64_t>(p, a, fi); });
  return lambda_kernel([p, fd](const KernelArgs& a) { run_plan<double>(p, a, fd); });
}

// Min and Max of any number of operands: pairwise, through the output buffer.
std::unique_ptr<Kernel> make_minmax(const KernelInit& init, bool mx) {
  if (init.num_inputs() == 1)
    return make_nary(init, [](const int64_t* v) { return v[0]; }, [](const double* v) { return v[0]; }, 1);
  if (init.num_inputs() == 2) {
    if (mx) return make_nary(init, [](const int64_t* v) { return std::max(v[0], v[1]); },
                             [](const double* v) { return std::isnan(v[0]) || std::isnan(v[1]) ? NAN : std::max(v[0], v[1]); }, 2);
    return make_nary(init, [](const int64_t* v) { return std::min(v[0], v[1]); },
                     [](const double* v) { return std::isnan(v[0]) || std::isnan(v[1]) ? NAN : std::min(v[0], v[1]); }, 2);
  }
  init.fail("Min and Max take 1 or 2 operands here, got ", init.num_inputs());
}

}  // namespace

void add_logic_kernels(KernelTable& t) {
  t["Equal"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] == v[1]); }, [](const double* v) { return double(v[0] == v[1]); }, 2);
  };
  t["Less"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] < v[1]); }, [](const double* v) { return double(v[0] < v[1]); }, 2);
  };
  t["Greater"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] > v[1]); }, [](const double* v) { return double(v[0] > v[1]); }, 2);
  };
  t["LessOrEqual"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] <= v[1]); }, [](const double* v) { return double(v[0] <= v[1]); }, 2);
  };
  t["GreaterOrEqual"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] >= v[1]); }, [](const double* v) { return double(v[0] >= v[1]); }, 2);
  };
  t["And"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] && v[1]); }, nullptr, 2);
  };
  t["Or"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t(v[0] || v[1]); }, nullptr, 2);
  };
  t["Xor"] = [](const KernelInit& i) {
    return make_nary(i, [](const int64_t* v) { return int64_t((v[0] != 0) != (v[1] != 0)); }, nullptr, 2);
  };
  t["Not"] = [](const KernelInit& i) { return make_nary(i, [](const int64_t* v) { return int64_t(v[0] == 0); }, nullptr, 1); };
  t["Where"] = [](const KernelInit& i) {
    if (i.num_inputs() != 3) i.fail("Where takes 3 inputs");
    if (i.input(1).dtype != i.input(2).dtype || i.output(0).dtype != i.input(1).dtype) i.fail("X and Y must share one type");
    return make_nary(i, [](const int64_t* v) { return v[0] != 0 ? v[1] : v[2]; },
                     [](const double* v) { return v[0] != 0 ? v[1] : v[2]; }, 3);
  };
  t["IsNaN"] = [](const KernelInit& i) {
    i.require_float(0);
    return make_nary(i, nullptr, [](const double* v) { return double(std::isnan(v[0])); }, 1);
  };
  t["IsInf"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    i.require_float(0);
    const bool neg = i.node.get_int("detect_negative", 1) != 0, pos = i.node.get_int("detect_positive", 1) != 0;
    if (neg && pos) return make_nary(i, nullptr, [](const double* v) { return double(std::isinf(v[0])); }, 1);
    if (neg) return make_nary(i, nullptr, [](const double* v) { return double(std::isinf(v[0]) && v[0] < 0); }, 1);
    if (pos) return make_nary(i, nullptr, [](const double* v) { return double(std::isinf(v[0]) && v[0] > 0); }, 1);
    return make_nary(i, nullptr, [](const double*) { return 0.0; }, 1);
  };
  t["Mod"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    if (i.node.get_int("fmod", 0) != 0)
      return make_nary(i, [](const int64_t* v) { return v[1] == 0 || v[1] == -1 ? int64_t(0) : v[0] % v[1]; },
                       [](const double* v) { return std::fmod(v[0], v[1]); }, 2);
    if (!is_int_type(i.input(0).dtype)) i.fail("Mod of floats needs fmod=1");
    return make_nary(i, [](const int64_t* v) -> int64_t {
      if (v[1] == 0 || v[1] == -1) return 0;  // undefined in ONNX; MIN % -1 traps on x86
      int64_t m = v[0] % v[1];
      if (m != 0 && ((m < 0) != (v[1] < 0))) m += v[1];  // the sign of the divisor
      return m;
    }, nullptr, 2);
  };
  t["Min"] = [](const KernelInit& i) { return make_minmax(i, false); };
  t["Max"] = [](const KernelInit& i) { return make_minmax(i, true); };
}

}  // namespace sluice::cpu
