// The vectorized LayerNorm and residual Add of kernels_residual.cu against float64 host references,
// called directly on device buffers: odd widths (1, 31, 97, 769, 1025) that take the one-element
// path or the warp-per-row fallback, widths that fill 8-element accesses (384, 2000: 4 and 8 chunks a
// lane), each input type (f32, f16, bf16, and an fp32 running sum plus a 16-bit branch), fp32 and
// bf16 outputs, with and without the add, the affine tables and the statistics outputs, pointers
// one element off 16-byte alignment, a position embedding repeating over the rows, both kernels
// (vectorized and SLUICE_CUDA_NORM_VEC=0's), and nothing written past the last row.  Then the Swish
// step (x * sigmoid(a x): CLIP's quick GELU, SiLU) that ops_elementwise.cpp makes of the exporters'
// Mul, Sigmoid, Mul chains: the steps the builder makes, and its output against float64; its kernel
// called directly (exact math bit for bit the generic kernel's, fast math and a bias row within one
// rounding of float64, odd sizes, unaligned tails), the bias taken into the step
// (SLUICE_CUDA_SWISH_BIAS=1) and a bandwidth benchmark (disabled).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

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
Graph clip_mlp_graph() {
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
  return b.g;
}

TEST(CudaSwish, ClipsMlpIsAProductWithItsBiasThenOneSwishStep) {
  const Graph g = clip_mlp_graph();
  const auto kinds = step_kinds(g, Precision::BF16);
  EXPECT_EQ(count(kinds, "MatMul+Bias"), 1);
  EXPECT_EQ(count(kinds, "Swish"), 1);
  EXPECT_EQ(count(kinds, "Sigmoid"), 0);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) expect_matches_cpu(g, p);
}

// ---- the Swish kernel, called directly -----------------------------------------------------------

// x * sigmoid(a x) of v = x (+ bias) in float64, v formed as the kernel forms it (an fp32 sum).
double swish_ref(double x, const double* bias, double a) {
  const double v = bias ? static_cast<double>(static_cast<float>(x) + static_cast<float>(*bias)) : x;
  return v / (1 + std::exp(-static_cast<double>(static_cast<float>(a)) * v));
}

struct SwishCase {
  DType t;
  int64_t n, channels;   // channels 0: no bias
  int64_t offset;        // elements off the buffers' alignment (x, y and the bias)
  bool fast;
};

// The new kernel's output for one case, the input and the bias as the kernel read them.
std::vector<double> run_swish(const SwishCase& c, const std::vector<double>& x, const std::vector<double>& bias, float a) {
  Region rx(c.t, c.offset, c.n), ry(c.t, c.offset, c.n), rb(DType::F32, c.offset, std::max<int64_t>(c.channels, 1));
  rx.upload(x);
  if (c.channels) rb.upload(bias);
  cuda::SwishParams p;
  p.alpha = a;
  p.fast = c.fast;
  if (c.channels) {
    p.bias = static_cast<const float*>(rb.ptr());
    p.channels = c.channels;
  }
  cuda::swish(c.t, rx.ptr(), ry.ptr(), c.n, p, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return ry.download_all();
}

// Exact math is the generic unary kernel's Act::Swish bit for bit (the step as it ran before), on
// every float type, odd sizes (packs and a tail of 1 to 7 elements), pointers one element off
// alignment (the one-element kernel) and inputs out to where exp overflows fp32.
TEST(CudaSwish, TheKernelsExactMathIsTheGenericKernelsBitForBit) {
  SLUICE_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {1, 7, 13, 4096 + 5, 3 * 3072 + 3, 100003})
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(str(dtype_name(t), " n ", n, " offset ", offset));
        const double range = t == DType::F16 ? 12 : 70;   // fp16 holds no more than 65504
        const std::vector<double> x = stored(t, random_doubles(static_cast<std::size_t>(n), 21, -range, range));
        const std::vector<double> y = run_swish({t, n, 0, offset, false}, x, {}, 1.702f);
        Region rx(t, offset, n), rg(t, offset, n);
        rx.upload(x);
        cuda::ActParams ap;
        ap.act = cuda::Act::Swish;
        ap.a = 1.702f;
        cuda::unary(t, rx.ptr(), rg.ptr(), n, ap, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<double> g = rg.download_all();
        int bad = 0;
        for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
          if (!(y[i] == g[i] && std::signbit(y[i]) == std::signbit(g[i])) && bad++ < 5)
            ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", the generic kernel " << g[i] << " (x " << x[i] << ")";
        for (std::size_t i = static_cast<std::size_t>(n); i < y.size(); ++i)
          if (!std::isnan(y[i]) && bad++ < 5) ADD_FAILURE() << "y written past its end at " << i;
        ASSERT_EQ(bad, 0);
      }
}

// Exact and fast math, with and without a bias row broadcast over the rows (3072 wide as CLIP's fc1,
// 40 and 8 filling packs, 37 and 3 that do not: the one-element kernel), aligned and not: within
// half an ulp of the type (plus a few fp32 ulps) of float64, and nothing written past the end.
TEST(CudaSwish, BothMathsWithAndWithoutABiasAreWithinOneRoundingOfFloat64) {
  SLUICE_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t channels : {0, 3072, 40, 37, 8, 3})
      for (int64_t offset : {0, 1})
        for (bool fast : {false, true}) {
          const int64_t rows = channels == 3072 ? 5 : 211;
          const int64_t n = channels ? rows * channels : 9001;
          SCOPED_TRACE(str(dtype_name(t), " n ", n, " bias of ", channels, " offset ", offset, fast ? " fast" : " exact"));
          const std::vector<double> x = stored(t, random_doubles(static_cast<std::size_t>(n), 31, -9, 9));
          const std::vector<double> bias =
              stored(DType::F32, random_doubles(static_cast<std::size_t>(std::max<int64_t>(channels, 1)), 32, -2, 2));
          const std::vector<double> y = run_swish({t, n, channels, offset, fast}, x, bias, 1.702f);
          int bad = 0;
          for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
            const double want = swish_ref(x[i], channels ? &bias[i % static_cast<std::size_t>(channels)] : nullptr, 1.702);
            if (!(std::fabs(y[i] - want) <= allowed(t, want, 1e-6)) && bad++ < 5)
              ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", want " << want << " (x " << x[i] << ")";
          }
          for (std::size_t i = static_cast<std::size_t>(n); i < y.size(); ++i)
            if (!std::isnan(y[i]) && bad++ < 5) ADD_FAILURE() << "y written past its end at " << i;
          ASSERT_EQ(bad, 0);
        }
}

// Where exp(-a v) overflows or underflows fp32, both maths give the exact division's limits: v for
// large v, a signed zero or the tiny quotient for very negative v; SiLU (a = 1) too.
TEST(CudaSwish, TheLimitsAreTheExactDivisions) {
  SLUICE_REQUIRE_GPU();
  const std::vector<double> x = {0, -0.0, 1, -1, 30, -30, 60, -50, -51.5, -52, -60, -100, 200, -200, 1e30, -1e30};
  for (float a : {1.702f, 1.f})
    for (bool fast : {false, true}) {
      SCOPED_TRACE(str("a ", a, fast ? " fast" : " exact"));
      const int64_t n = static_cast<int64_t>(x.size());
      const std::vector<double> y = run_swish({DType::F32, n, 0, 0, fast}, x, {}, a);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float v = static_cast<float>(x[i]);
        const float e = std::exp(-a * v);
        const double want = static_cast<double>(v / (1.f + e));   // the host's fp32 exact division
        EXPECT_NEAR(y[i], want, 1e-5 * std::fabs(want) + 1e-38) << "x " << x[i];
      }
    }
}

// The kernel against the one before it on CLIP's fc1 output, [256 * 197, 3072] bf16: GB/s of bytes
// read and written (and the bias's bytes once), beside a device-to-device copy of the same bytes.
// Disabled in normal runs: sluice_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='CudaSwish.DISABLED_*'
TEST(CudaSwish, DISABLED_BandwidthOnClipsFc1Output) {
  SLUICE_REQUIRE_GPU();
  const int64_t cols = 3072, n = 256 * 197 * cols;
  const std::size_t bytes = static_cast<std::size_t>(n) * 2;
  cuda::DeviceBuffer x(bytes), y(bytes), bias(static_cast<std::size_t>(cols) * 4);
  CUDA_CHECK(cudaMemset(x.get(), 0x3f, bytes));
  CUDA_CHECK(cudaMemset(bias.get(), 0, static_cast<std::size_t>(cols) * 4));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> ms;
    for (int i = 0; i < 15; ++i) {
      CUDA_CHECK(cudaEventRecord(e0));
      f();
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const float copy = time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), bytes, cudaMemcpyDeviceToDevice)); });
  std::printf("swish bench [%lld, %lld] bf16: copy %.3f ms %.0f GB/s\n", static_cast<long long>(n / cols),
              static_cast<long long>(cols), copy, 2.0 * bytes / copy * 1e-6);
  struct V { const char* name; int kind; bool fast, with_bias; };
  for (const V v : {V{"generic", 0, false, false}, V{"exact", 1, false, false}, V{"fast", 1, true, false},
                    V{"exact+bias", 1, false, true}, V{"fast+bias", 1, true, true}}) {
    const float ms = time_ms([&] {
      if (v.kind == 0) {
        cuda::ActParams ap;
        ap.act = cuda::Act::Swish;
        ap.a = 1.702f;
        cuda::unary(DType::BF16, x.get(), y.get(), n, ap, nullptr);
      } else {
        cuda::SwishParams p;
        p.alpha = 1.702f;
        p.fast = v.fast;
        if (v.with_bias) {
          p.bias = bias.as<float>();
          p.channels = cols;
        }
        cuda::swish(DType::BF16, x.get(), y.get(), n, p, nullptr);
      }
    });
    std::printf("swish bench %-11s %.3f ms %.0f GB/s, %.0f %% of the copy\n", v.name, ms, 2.0 * bytes / ms * 1e-6,
                100.0 * copy / ms);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
}

// ---- the bias in the Swish step (SLUICE_CUDA_SWISH_BIAS=1) and the kernel switch -------------------


// The steps first (no device needed), then the outputs against the CPU engine.
TEST(CudaSwish, UnderSwishBiasTheFc1BiasIsAddedByTheSwishStep) {
  const Graph g = clip_mlp_graph();
  // A sum read by another node too (here a graph output) stays the product's epilogue.
  GraphBuilder b({2, 37, 32});
  b.random_f("w1", {32, 64}, 11, -0.3f, 0.3f).random_f("b1", {64}, 12);
  b.node("MatMul", {"x", "w1"}, {f32("p", {2, 37, 64})});
  b.node("Add", {"p", "b1"}, {f32("hb", {2, 37, 64})});
  b.node("Sigmoid", {"hb"}, {f32("u", {2, 37, 64})});
  b.node("Mul", {"hb", "u"}, {f32("g", {2, 37, 64})});
  b.output("g").output("hb");
  // SiLU after a bias, the bias first in the Add: taken too.
  GraphBuilder c({2, 37, 32});
  c.random_f("w1", {32, 64}, 11, -0.3f, 0.3f).random_f("b1", {1, 1, 64}, 12);
  c.node("MatMul", {"x", "w1"}, {f32("p", {2, 37, 64})});
  c.node("Add", {"b1", "p"}, {f32("hb", {2, 37, 64})});
  c.node("Sigmoid", {"hb"}, {f32("u", {2, 37, 64})});
  c.node("Mul", {"u", "hb"}, {f32("g", {2, 37, 64})});
  c.output("g");
  ScopedEnv on("SLUICE_CUDA_SWISH_BIAS", "1");
  {
    const auto kinds = step_kinds(g, Precision::BF16);
    EXPECT_EQ(count(kinds, "MatMul+Bias"), 0);
    EXPECT_EQ(count(kinds, "MatMul"), 2);   // fc1 on cuBLASLt without an epilogue, fc2
    EXPECT_EQ(count(kinds, "Swish"), 1);
    EXPECT_EQ(count(kinds, "Add"), 0);
    EXPECT_EQ(count(kinds, "Sigmoid") + count(kinds, "Mul"), 0);
    const auto silu = step_kinds(c.g, Precision::BF16);
    EXPECT_EQ(count(silu, "MatMul"), 1);
    EXPECT_EQ(count(silu, "Swish"), 1);
    EXPECT_EQ(count(silu, "Add") + count(silu, "Sigmoid") + count(silu, "Mul") + count(silu, "MatMul+Bias"), 0);
    const auto shared = step_kinds(b.g, Precision::BF16);
    EXPECT_EQ(count(shared, "MatMul+Bias"), 1);
    EXPECT_EQ(count(shared, "Swish"), 1);
  }
  for (const char* mode : {"fast", "generic"}) {
    ScopedEnv m("SLUICE_CUDA_SWISH", mode);
    // The generic kernel takes no bias: the product keeps it.
    EXPECT_EQ(count(step_kinds(g, Precision::BF16), "MatMul+Bias"), std::string(mode) == "generic" ? 1 : 0) << mode;
  }
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) expect_matches_cpu(g, p);
  expect_matches_cpu(c.g, Precision::BF16);
  expect_matches_cpu(b.g, Precision::BF16);
  ScopedEnv m("SLUICE_CUDA_SWISH", "fast");
  expect_matches_cpu(g, Precision::BF16);
}

TEST(CudaSwish, EachKernelMatchesTheCpuEngineAndBadSwitchesAreRefused) {
  {
    ScopedEnv bad("SLUICE_CUDA_SWISH", "quick");
    EXPECT_THROW(step_kinds(clip_mlp_graph(), Precision::BF16), UsageError);
  }
  {
    ScopedEnv bad("SLUICE_CUDA_SWISH_BIAS", "yes");
    EXPECT_THROW(step_kinds(clip_mlp_graph(), Precision::BF16), UsageError);
  }
  for (const char* mode : {"exact", "fast", "generic"}) {
    ScopedEnv m("SLUICE_CUDA_SWISH", mode);
    EXPECT_EQ(count(step_kinds(clip_mlp_graph(), Precision::BF16), "Swish"), 1) << mode;
  }
  for (const char* mode : {"exact", "fast", "generic"}) {
    ScopedEnv m("SLUICE_CUDA_SWISH", mode);
    for (Precision p : {Precision::FP32, Precision::BF16}) expect_matches_cpu(clip_mlp_graph(), p);
    expect_matches_cpu(swish_graph(Chain::Silu), Precision::FP16);
  }
}

}  // namespace
