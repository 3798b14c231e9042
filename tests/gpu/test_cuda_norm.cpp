// The vectorized LayerNorm and residual Add of kernels_residual.cu against float64 host references,
// called directly on device buffers: odd widths (1, 31, 97, 769, 1025) that take the one-element
// path or the warp-per-row fallback, widths that fill 8-element accesses (384, 2000: 4 and 8 chunks a
// lane), each input type (f32, f16, bf16, and an fp32 running sum plus a 16-bit branch), fp32 and
// bf16 outputs, with and without the add, the affine tables and the statistics outputs, pointers
// one element off 16-byte alignment, a position embedding repeating over the rows, both kernels
// (vectorized and SLUICE_CUDA_NORM_VEC=0's), and nothing written past the last row.  Then the Swish
// step (x * sigmoid(a x): CLIP's quick GELU, SiLU) that ops_elementwise.cpp makes of the exporters'
// Mul, Sigmoid, Mul chains: the steps the builder makes, and its output against float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/kernels.h"
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

// Host copies of device values of any float type.
std::vector<uint8_t> encode(DType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    if (t == DType::F32) std::memcpy(out.data() + 4 * i, &f, 4);
    else {
      const uint16_t h = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}
double decode_one(DType t, const uint8_t* p) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}
// v as type t stores it (what the kernel reads).
std::vector<double> stored(DType t, const std::vector<double>& v) {
  const std::vector<uint8_t> b = encode(t, v);
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = decode_one(t, b.data() + i * dtype_size(t));
  return out;
}

std::vector<double> random_doubles(std::size_t n, uint32_t seed, double lo, double hi) {
  std::vector<double> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<double>(s >> 8) / static_cast<double>(1u << 24);
  }
  return v;
}

// A device buffer holding `count` elements of t starting `offset` elements in, filled with 0xff
// bytes (NaN in every float type) around them.
struct Region {
  DType t;
  int64_t offset, count;
  cuda::DeviceBuffer buf;
  Region(DType type, int64_t off, int64_t n)
      : t(type), offset(off), count(n), buf(static_cast<std::size_t>(off + n + 64) * dtype_size(type)) {
    CUDA_CHECK(cudaMemset(buf.get(), 0xff, buf.bytes()));
  }
  void* ptr() const { return static_cast<char*>(buf.get()) + offset * static_cast<int64_t>(dtype_size(t)); }
  void upload(const std::vector<double>& v) const {
    const std::vector<uint8_t> b = encode(t, v);
    CUDA_CHECK(cudaMemcpy(ptr(), b.data(), b.size(), cudaMemcpyHostToDevice));
  }
  // Every element from the start of the data to the end of the buffer, as doubles.
  std::vector<double> download_all() const {
    std::vector<uint8_t> b(buf.bytes() - static_cast<std::size_t>(offset) * dtype_size(t));
    CUDA_CHECK(cudaMemcpy(b.data(), ptr(), b.size(), cudaMemcpyDeviceToHost));
    std::vector<double> out(b.size() / dtype_size(t));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = decode_one(t, b.data() + i * dtype_size(t));
    return out;
  }
};

// Largest |got - ref| allowed for a value computed in fp32 from fp32-exact inputs and rounded once to
// t: half an ulp of t (2^-8 relative for bf16's 8 significant bits, 2^-11 for fp16's 11, 2^-24 for
// fp32) plus `slack` for the fp32 arithmetic before the rounding.
double allowed(DType t, double ref, double slack) {
  const double half_ulp = t == DType::BF16 ? std::ldexp(1.0, -8) : t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
  return half_ulp * std::fabs(ref) + slack * (1 + std::fabs(ref));
}

struct NormCase {
  int64_t rows, cols;
  DType ta, tb;        // tb ignored without add
  bool add, affine, stats;
  DType ty, tsum;      // the sum is written when add
  int64_t offset;      // elements off the buffers' 256-byte alignment, every pointer
  int64_t b_rows;      // rows of b, repeated over the output's (0: as many)
  bool vectorized;
};

std::string describe(const NormCase& c) {
  return str(c.rows, "x", c.cols, " a ", dtype_name(c.ta), c.add ? str(" + b ", dtype_name(c.tb)) : std::string(),
             c.b_rows ? str(" (", c.b_rows, " rows repeated)") : std::string(), c.affine ? " affine" : "",
             c.stats ? " stats" : "", " -> y ", dtype_name(c.ty), c.add ? str(", sum ", dtype_name(c.tsum)) : std::string(),
             " offset ", c.offset, c.vectorized ? " vectorized" : " scalar kernel");
}

void check_norm(const NormCase& c) {
  SCOPED_TRACE(describe(c));
  const int64_t n = c.rows * c.cols, nb = (c.b_rows ? c.b_rows : c.rows) * c.cols;
  const uint32_t seed = static_cast<uint32_t>(c.cols * 131 + c.rows);
  // A mean well away from 0 next to a spread of 1 (the two-pass variance's case).
  const std::vector<double> a = stored(c.ta, random_doubles(static_cast<std::size_t>(n), seed, 1.0, 3.0));
  const std::vector<double> b = stored(c.tb, random_doubles(static_cast<std::size_t>(nb), seed + 1, -1.0, 1.0));
  // gamma and beta are fp32 tables.
  const std::vector<double> gamma = stored(DType::F32, random_doubles(static_cast<std::size_t>(c.cols), seed + 2, 0.5, 1.5));
  const std::vector<double> beta = stored(DType::F32, random_doubles(static_cast<std::size_t>(c.cols), seed + 3, -0.5, 0.5));
  const double eps = 1e-5;

  Region ra(c.ta, c.offset, n), rb(c.tb, c.offset, nb), rs(c.tsum, c.offset, n), ry(c.ty, c.offset, n);
  Region rg(DType::F32, c.offset, c.cols), rbe(DType::F32, c.offset, c.cols);
  Region rmean(DType::F32, c.offset, c.rows), rinv(DType::F32, c.offset, c.rows);
  ra.upload(a);
  if (c.add) rb.upload(b);
  rg.upload(gamma);
  rbe.upload(beta);

  cuda::ResidualNorm r;
  r.a = {ra.ptr(), c.ta, n};
  if (c.add) {
    r.b = {rb.ptr(), c.tb, nb};
    r.sum = rs.ptr();
    r.tsum = c.tsum;
  }
  r.y = ry.ptr();
  r.ty = c.ty;
  if (c.stats) {
    r.mean = rmean.ptr();
    r.inv = rinv.ptr();
  }
  r.rows = c.rows;
  r.cols = c.cols;
  r.eps = static_cast<float>(eps);
  if (c.affine) {
    r.gamma = static_cast<const float*>(rg.ptr());
    r.beta = static_cast<const float*>(rbe.ptr());
  }
  r.vectorized = c.vectorized;
  cuda::residual_norm(r, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<double> y = ry.download_all(), sum = rs.download_all(), mean = rmean.download_all(),
                            inv = rinv.download_all();
  const std::size_t cols = static_cast<std::size_t>(c.cols);
  int bad = 0;
  for (std::size_t row = 0; row < static_cast<std::size_t>(c.rows); ++row) {
    std::vector<double> x(cols);
    double m = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      const std::size_t i = row * cols + j;
      const std::size_t ib = (row % static_cast<std::size_t>(nb / c.cols)) * cols + j;
      // Exact in double; the kernel's fp32 sum is within 2^-24 of it, its sum output one
      // rounding of that to tsum.
      x[j] = c.add ? a[i] + b[ib] : a[i];
      m += x[j];
    }
    m /= static_cast<double>(cols);
    double var = 0;
    for (double v : x) var += (v - m) * (v - m);
    var /= static_cast<double>(cols);
    const double is = 1 / std::sqrt(var + eps);
    // fp32 statistics over up to 2,000 values: the mean within ~1e-6 of the values' scale (3), the
    // normalized value within ~1e-5 of 1 once scaled by inv (up to ~1.7 here) and gamma.
    const double slack = 2e-5;
    for (std::size_t j = 0; j < cols; ++j) {
      const std::size_t i = row * cols + j;
      double want = (x[j] - m) * is;
      if (c.affine) want = want * gamma[j] + beta[j];
      if (!(std::fabs(y[i] - want) <= allowed(c.ty, want, slack)) && bad++ < 5)
        ADD_FAILURE() << "y[" << row << ", " << j << "] = " << y[i] << ", want " << want;
      if (c.add && !(std::fabs(sum[i] - x[j]) <= allowed(c.tsum, x[j], 1e-7)) && bad++ < 5)
        ADD_FAILURE() << "sum[" << row << ", " << j << "] = " << sum[i] << ", want " << x[j];
    }
    if (c.stats) {
      if (!(std::fabs(mean[row] - m) <= 1e-5) && bad++ < 5) ADD_FAILURE() << "mean[" << row << "] = " << mean[row] << ", want " << m;
      if (!(std::fabs(inv[row] - is) <= 1e-4 * is) && bad++ < 5) ADD_FAILURE() << "inv[" << row << "] = " << inv[row] << ", want " << is;
    }
  }
  // Nothing written past the last row (the buffers' 0xff bytes are NaN in every type).
  for (std::size_t i = static_cast<std::size_t>(n); i < y.size(); ++i)
    if (!std::isnan(y[i]) && bad++ < 5) ADD_FAILURE() << "y written past its end at " << i;
  if (c.add)
    for (std::size_t i = static_cast<std::size_t>(n); i < sum.size(); ++i)
      if (!std::isnan(sum[i]) && bad++ < 5) ADD_FAILURE() << "sum written past its end at " << i;
  if (c.stats)
    for (std::size_t i = static_cast<std::size_t>(c.rows); i < mean.size(); ++i)
      if ((!std::isnan(mean[i]) || !std::isnan(inv[i])) && bad++ < 5) ADD_FAILURE() << "statistics written past their end at " << i;
  EXPECT_EQ(bad, 0);
}

TEST(CudaNorm, LayerNormOfEveryWidthTypeAndAlignmentMatchesFloat64) {
  SLUICE_REQUIRE_GPU();
  struct Types {
    DType ta, tb;
    bool add;
  };
  const Types types[] = {{DType::F32, DType::F32, false}, {DType::F16, DType::F16, false}, {DType::BF16, DType::BF16, false},
                         {DType::F32, DType::F32, true},  {DType::F16, DType::F16, true},  {DType::BF16, DType::BF16, true},
                         {DType::F32, DType::BF16, true}, {DType::F32, DType::F16, true}};
  for (int64_t cols : {1, 31, 97, 384, 769, 1025, 2000})
    for (const Types& t : types)
      for (DType ty : {DType::F32, DType::BF16})
        for (bool affine : {false, true})
          for (int64_t offset : {0, 1})
            for (bool vec : {true, false}) {
              NormCase c{37, cols, t.ta, t.tb, t.add, affine, affine, ty, DType::F32, offset, 0, vec};
              check_norm(c);
              if (HasFailure()) return;
            }
}

// The sum stored in the output's type (SLUICE_CUDA_RESIDUAL_FP32=0 keeps the stream in the compute
// type), and many rows: more blocks than the GPU holds at once.
TEST(CudaNorm, AResidualSumInTheOutputTypeAndManyRowsMatchFloat64) {
  SLUICE_REQUIRE_GPU();
  for (int64_t cols : {96, 384, 768, 1024})
    for (bool vec : {true, false}) {
      check_norm({4099, cols, DType::BF16, DType::BF16, true, true, false, DType::BF16, DType::BF16, 0, 0, vec});
      check_norm({4099, cols, DType::F32, DType::BF16, true, true, false, DType::BF16, DType::F32, 0, 0, vec});
      if (HasFailure()) return;
    }
}

// A position embedding [1, N, C] added to [B, N, C] and normalized: b repeats whole rows.
TEST(CudaNorm, AnOperandRepeatingOverTheRowsMatchesFloat64) {
  SLUICE_REQUIRE_GPU();
  for (int64_t cols : {32, 97, 384, 2000})
    for (int64_t offset : {0, 1})
      for (bool vec : {true, false}) {
        check_norm({3 * 13, cols, DType::F32, DType::F32, true, true, true, DType::BF16, DType::F32, offset, 13, vec});
        check_norm({3 * 13, cols, DType::BF16, DType::F32, true, false, false, DType::F32, DType::F32, offset, 13, vec});
        if (HasFailure()) return;
      }
}

// The residual Add (and the LayerScale Mul) in 8-element accesses, operands repeating or not, types
// mixed, against the same fp32 arithmetic on the host (a + b or a * b, rounded to fp32, then to the
// output's type: exact agreement).
TEST(CudaNorm, TheResidualAddMatchesFp32ArithmeticExactly) {
  SLUICE_REQUIRE_GPU();
  const int64_t n = 3 * 5 * 384;
  for (DType ta : {DType::F32, DType::BF16, DType::F16})
    for (DType tb : {DType::F32, DType::BF16})
      for (DType ty : {DType::F32, DType::BF16})
        for (int64_t count_b : {n, int64_t{5 * 384}, int64_t{384}, int64_t{1}, int64_t{3}})
          for (int64_t offset : {0, 1})
            for (bool multiply : {false, true})
              for (bool vec : {true, false}) {
                if (n % count_b != 0) continue;
                SCOPED_TRACE(str(dtype_name(ta), (multiply ? " * " : " + "), dtype_name(tb), " of ", count_b, " -> ",
                                 dtype_name(ty), " offset ", offset, vec ? " vectorized" : " scalar"));
                const std::vector<double> a = stored(ta, random_doubles(static_cast<std::size_t>(n), 7, -4, 4));
                const std::vector<double> b = stored(tb, random_doubles(static_cast<std::size_t>(count_b), 8, -4, 4));
                Region ra(ta, offset, n), rb(tb, offset, count_b), ry(ty, offset, n);
                ra.upload(a);
                rb.upload(b);
                cuda::residual_add({ra.ptr(), ta, n}, {rb.ptr(), tb, count_b}, ry.ptr(), ty, n, nullptr, multiply, vec);
                CUDA_CHECK(cudaDeviceSynchronize());
                const std::vector<double> y = ry.download_all();
                int bad = 0;
                for (int64_t i = 0; i < n; ++i) {
                  const float fa = static_cast<float>(a[static_cast<std::size_t>(i)]);
                  const float fb = static_cast<float>(b[static_cast<std::size_t>(i % count_b)]);
                  const double want = stored(ty, {static_cast<double>(multiply ? fa * fb : fa + fb)})[0];
                  if (y[static_cast<std::size_t>(i)] != want && bad++ < 5)
                    ADD_FAILURE() << "y[" << i << "] = " << y[static_cast<std::size_t>(i)] << ", want " << want;
                }
                for (std::size_t i = static_cast<std::size_t>(n); i < y.size(); ++i)
                  if (!std::isnan(y[i]) && bad++ < 5) ADD_FAILURE() << "y written past its end at " << i;
                ASSERT_EQ(bad, 0);
              }
}

// ---- Swish: x * sigmoid(a x) as one step -----------------------------------------------------------

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

enum class Chain { QuickGelu, QuickGeluConstantFirst, Silu, SiluGateFirst };

// x [2, 37, 29] -> the chain -> y.
Graph swish_graph(Chain c) {
  const Shape s = {2, 37, 29};
  GraphBuilder b(s);
  if (c == Chain::QuickGelu || c == Chain::QuickGeluConstantFirst) {
    b.constant_f("k", {}, {1.702f});
    b.node("Mul", c == Chain::QuickGelu ? std::vector<std::string>{"x", "k"} : std::vector<std::string>{"k", "x"}, {f32("t", s)});
    b.node("Sigmoid", {"t"}, {f32("u", s)});
    b.node("Mul", {"x", "u"}, {f32("y", s)});
  } else {
    b.node("Sigmoid", {"x"}, {f32("u", s)});
    b.node("Mul", c == Chain::Silu ? std::vector<std::string>{"x", "u"} : std::vector<std::string>{"u", "x"}, {f32("y", s)});
  }
  b.output("y");
  return b.g;
}

TEST(CudaSwish, QuickGeluAndSiluChainsAreOneStepUnlessTurnedOff) {
  for (Chain c : {Chain::QuickGelu, Chain::QuickGeluConstantFirst, Chain::Silu, Chain::SiluGateFirst}) {
    SCOPED_TRACE(static_cast<int>(c));
    const Graph g = swish_graph(c);
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      const auto kinds = step_kinds(g, p);
      EXPECT_EQ(count(kinds, "Swish"), 1);
      EXPECT_EQ(count(kinds, "Sigmoid"), 0);
      EXPECT_EQ(count(kinds, "Mul"), 0);
    }
    ScopedEnv off("SLUICE_CUDA_FUSE_SWISH", "0");
    const auto kinds = step_kinds(g, Precision::BF16);
    EXPECT_EQ(count(kinds, "Swish"), 0);
    EXPECT_EQ(count(kinds, "Sigmoid"), 1);
  }
  ScopedEnv bad("SLUICE_CUDA_FUSE_SWISH", "yes");
  EXPECT_THROW(step_kinds(swish_graph(Chain::Silu), Precision::BF16), UsageError);
}

TEST(CudaSwish, AChainWhoseGateIsReadElsewhereStaysSeparate) {
  const Shape s = {2, 37, 29};
  GraphBuilder b(s);
  b.node("Sigmoid", {"x"}, {f32("u", s)});
  b.node("Mul", {"x", "u"}, {f32("y", s)});
  b.output("y").output("u");   // the gate is an output too
  const auto kinds = step_kinds(b.g, Precision::BF16);
  EXPECT_EQ(count(kinds, "Swish"), 0);
  EXPECT_EQ(count(kinds, "Sigmoid"), 1);
  // x * sigmoid(x) with a different x: not a swish.
  GraphBuilder c(s);
  c.random_f("w", s, 5);
  c.node("Sigmoid", {"x"}, {f32("u", s)});
  c.node("Mul", {"w", "u"}, {f32("y", s)});
  c.output("y");
  EXPECT_EQ(count(step_kinds(c.g, Precision::BF16), "Swish"), 0);
  expect_matches_cpu(c.g, Precision::BF16);
}

// The fused step computes in fp32 and rounds once: within half an ulp of the compute type (plus
// expf's few fp32 ulps) of x * sigmoid(a x) in float64 on the input as the engine holds it.
TEST(CudaSwish, TheFusedStepIsWithinOneRoundingOfFloat64) {
  for (Chain c : {Chain::QuickGelu, Chain::SiluGateFirst}) {
    const double a = c == Chain::QuickGelu ? static_cast<double>(1.702f) : 1.0;
    for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(str(static_cast<int>(c), " at ", precision_name(p)));
      CompareOptions o;
      o.lo = -6.f;
      o.hi = 6.f;
      o.tol = p == Precision::BF16 ? std::ldexp(1.0, -8) : p == Precision::FP16 ? std::ldexp(1.0, -11) : 1e-6;
      expect_matches_reference(swish_graph(c), p, [&](const Tensor& x) {
        std::vector<float> v = x.as_float();
        for (auto& f : v) {
          const double xv = round_to(p, f);
          f = static_cast<float>(xv / (1 + std::exp(-a * xv)));
        }
        return std::vector<Tensor>{Tensor::from(DType::F32, x.shape, v)};
      }, o);
    }
  }
}

// CLIP's MLP as transformers exports it: fc1 MatMul, bias Add, Mul by 1.702, Sigmoid, Mul, fc2.
TEST(CudaSwish, ClipsMlpIsAProductWithItsBiasThenOneSwishStep) {
  const Shape s = {2, 37, 32}, h = {2, 37, 64};
  GraphBuilder b(s);
  b.random_f("w1", {32, 64}, 11, -0.3f, 0.3f).random_f("b1", {64}, 12).random_f("w2", {64, 32}, 13, -0.2f, 0.2f);
  b.constant_f("k", {}, {1.702f});
  b.node("MatMul", {"x", "w1"}, {f32("p", h)});
  b.node("Add", {"b1", "p"}, {f32("hb", h)});
  b.node("Mul", {"hb", "k"}, {f32("t", h)});
  b.node("Sigmoid", {"t"}, {f32("u", h)});
  b.node("Mul", {"hb", "u"}, {f32("g", h)});
  b.node("MatMul", {"g", "w2"}, {f32("y", s)});
  b.output("y");
  const auto kinds = step_kinds(b.g, Precision::BF16);
  EXPECT_EQ(count(kinds, "MatMul+Bias"), 1);
  EXPECT_EQ(count(kinds, "Swish"), 1);
  EXPECT_EQ(count(kinds, "Sigmoid"), 0);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) expect_matches_cpu(b.g, p);
}

}  // namespace
