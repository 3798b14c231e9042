// The one-pass window attention kernel (kernels_attention.cu, "Attn window") against a float64
// reference on the host, computed from the very bf16/fp16 values the kernel reads: Swin's windows
// (49 tokens, heads interleaved in the qkv projection, a bias per window and head with a -100 shift
// mask), odd token counts with s != s_kv, head sizes off the 16-byte packs (the scalar loads), k
// given transposed, rows that are not 16-byte aligned, the 64- and 128-token tiles, one token, and
// fully masked rows (zeros or NaN).  Elements of the output tensor outside the view stay untouched.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/cuda/kernels.h"
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::cuda;

namespace {

uint16_t to_half_bits(float f, DType t) {
  if (t == DType::BF16) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);   // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  // IEEE half, round to nearest even (normal and subnormal; the test values stay in range).
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a < 6.1035156e-05f) {   // subnormal
    const float q = std::nearbyint(a / 5.9604645e-08f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  int e;
  const float m = std::frexp(a, &e);   // a = m * 2^e, m in [0.5, 1)
  float mant = std::nearbyint((m * 2.f - 1.f) * 1024.f);
  if (mant == 1024.f) {
    mant = 0;
    ++e;
  }
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(e - 1 + 15) << 10 | static_cast<uint32_t>(mant));
}

float from_half_bits(uint16_t h, DType t) {
  if (t == DType::BF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.f + m / 1024.f, e - 15);
  return sign ? -v : v;
}

struct WinCase {
  const char* what;
  int64_t n, heads, s, skv, d, dv, period;   // period 0: no bias
  bool kt = false;          // k as [d, skv] (packed only)
  bool interleaved = false; // q, k, v as Swin's [n, rows, 3, heads, d] qkv projection, y as [n, rows, heads, dv]
  int64_t pad = 0;          // extra elements at the end of each row of the interleaved tensors (unaligned rows)
  int mask_row = -1;        // row of matrix 1 whose bias is all -inf
  bool zero_rows = false;
};

// One operand's place: buffer, offset of matrix 0, sample, head and row strides.
struct Place {
  int64_t offset = 0, sample = 0, head = 0, row = 0;
  int64_t at(int64_t m, int64_t heads) const { return (m / heads) * sample + offset + (m % heads) * head; }
};

void run_case(const WinCase& c, DType t) {
  SCOPED_TRACE(str(c.what, " ", dtype_name(t)));
  const int64_t mats = c.n * c.heads;
  std::mt19937 rng(static_cast<uint32_t>(c.s * 131 + c.skv * 7 + c.d + c.dv * 3 + c.heads));
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  Place pq, pk, pv, py;
  int64_t in_numel = 0, y_numel = 0;
  const int64_t rows = std::max(c.s, c.skv);
  if (c.interleaved) {
    // qkv [n, rows, 3 * heads * d + pad]; q, k, v at offsets 0, heads * d, 2 * heads * d.
    const int64_t rs = 3 * c.heads * c.d + c.pad;
    pq = {0, rows * rs, c.d, rs};
    pk = {c.heads * c.d, rows * rs, c.d, rs};
    pv = {2 * c.heads * c.d, rows * rs, c.d, rs};
    in_numel = c.n * rows * rs;
    const int64_t ys = c.heads * c.dv + c.pad;
    py = {0, c.s * ys, c.dv, ys};
    y_numel = c.n * c.s * ys;
  } else {
    // Three packed tensors back to back in one buffer, y packed.
    pq = {0, c.s * c.d, 0, c.d};
    pk = {mats * c.s * c.d, c.skv * c.d, 0, c.kt ? c.skv : c.d};
    pv = {mats * (c.s * c.d + c.skv * c.d), c.skv * c.dv, 0, c.dv};
    in_numel = mats * (c.s * c.d + c.skv * c.d + c.skv * c.dv);
    py = {0, c.s * c.dv, 0, c.dv};
    y_numel = mats * c.s * c.dv;
  }
  const int64_t heads = c.interleaved ? c.heads : 1;
  std::vector<uint16_t> in(static_cast<std::size_t>(in_numel));
  for (auto& x : in) x = to_half_bits(uni(rng), t);
  std::vector<float> bias;
  if (c.period > 0) {
    bias.resize(static_cast<std::size_t>(c.period * c.s * c.skv));
    for (int64_t p = 0; p < c.period; ++p)
      for (int64_t i = 0; i < c.s; ++i)
        for (int64_t j = 0; j < c.skv; ++j) {
          float b = 2.f * uni(rng);
          if (p % 2 == 1 && (i < c.s / 2) != (j < c.skv / 2)) b -= 100.f;   // the shift mask
          if (p == 1 % c.period && i == c.mask_row) b = -INFINITY;
          bias[static_cast<std::size_t>((p * c.s + i) * c.skv + j)] = b;
        }
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(c.d));
  const uint16_t sentinel = to_half_bits(7.f, t);
  std::vector<uint16_t> y(static_cast<std::size_t>(y_numel), sentinel);

  SLUICE_REQUIRE_GPU();
  void *din = nullptr, *dy = nullptr, *db = nullptr;
  ASSERT_EQ(cudaMalloc(&din, in.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, y.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(din, in.data(), in.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dy, y.data(), y.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  if (!bias.empty()) {
    ASSERT_EQ(cudaMalloc(&db, bias.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  WindowAttentionArgs a;
  auto ptr = [](void* base, int64_t off) { return static_cast<char*>(base) + off * 2; };
  a.q = ptr(din, pq.offset);
  a.k = ptr(din, pk.offset);
  a.v = ptr(din, pv.offset);
  a.y = ptr(dy, py.offset);
  a.bias = db;
  a.mats = mats;
  a.heads = heads;
  a.s = c.s;
  a.skv = c.skv;
  a.d = c.d;
  a.dv = c.dv;
  a.period = c.period;
  const Place* pl[4] = {&pq, &pk, &pv, &py};
  for (int i = 0; i < 4; ++i) {
    a.sample[i] = pl[i]->sample;
    a.head[i] = pl[i]->head;
    a.row[i] = pl[i]->row;
  }
  a.kt = c.kt;
  a.zero_rows = c.zero_rows;
  a.scale = scale;
  ASSERT_TRUE(window_attention_fits(t, c.s, c.skv, c.d, c.dv));
  window_attention(t, DType::F32, a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(din);
  cudaFree(dy);
  if (db) cudaFree(db);

  // The float64 reference from the rounded inputs.
  auto val = [&](int64_t i) { return static_cast<double>(from_half_bits(in[static_cast<std::size_t>(i)], t)); };
  std::vector<bool> covered(y.size(), false);
  double max_ref = 0, max_diff = 0;
  int nan_rows = 0, bad_nan = 0;
  std::vector<double> sc(static_cast<std::size_t>(c.skv));
  for (int64_t m = 0; m < mats; ++m) {
    const int64_t q0 = pq.at(m, heads), k0 = pk.at(m, heads), v0 = pv.at(m, heads), y0 = py.at(m, heads);
    for (int64_t i = 0; i < c.s; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.skv; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < c.d; ++e)
          acc += val(q0 + i * pq.row + e) * (c.kt ? val(k0 + e * pk.row + j) : val(k0 + j * pk.row + e));
        acc *= scale;
        if (c.period > 0) acc += bias[static_cast<std::size_t>(((m % c.period) * c.s + i) * c.skv + j)];
        sc[static_cast<std::size_t>(j)] = acc;
        mx = std::max(mx, acc);
      }
      const bool all_masked = mx == -std::numeric_limits<double>::infinity();
      double sum = 0;
      for (auto& x : sc) sum += (x = all_masked ? 0 : std::exp(x - mx));
      for (int64_t e = 0; e < c.dv; ++e) {
        double ref = 0;
        for (int64_t j = 0; j < c.skv; ++j) ref += sc[static_cast<std::size_t>(j)] / (all_masked ? 1 : sum) * val(v0 + j * pv.row + e);
        const std::size_t at = static_cast<std::size_t>(y0 + i * py.row + e);
        covered[at] = true;
        const float got = from_half_bits(y[at], t);
        if (all_masked && !c.zero_rows) {
          nan_rows += e == 0;
          bad_nan += !std::isnan(got);
          continue;
        }
        max_ref = std::max(max_ref, std::fabs(ref));
        max_diff = std::max(max_diff, std::isfinite(got) ? std::fabs(got - ref) : INFINITY);
      }
    }
  }
  if (c.mask_row >= 0) EXPECT_EQ(nan_rows, c.zero_rows ? 0 : 1);
  EXPECT_EQ(bad_nan, 0);
  int touched = 0;
  for (std::size_t i = 0; i < y.size(); ++i) touched += !covered[i] && y[i] != sentinel;
  EXPECT_EQ(touched, 0) << "elements outside the view were written";
  ASSERT_GT(max_ref, 0);
  // p is rounded to the operand type before p v, and y on the way out.
  const double tol = t == DType::BF16 ? 1.2e-2 : 2e-3;
  EXPECT_LE(max_diff / max_ref, tol) << "max |diff| " << max_diff << " max |ref| " << max_ref;
}

const WinCase kCases[] = {
    {"Swin stage 1: 2 images x 4 windows, 3 heads, window bias + shift mask", 8, 3, 49, 49, 32, 32, 12, false, true},
    {"Swin, no bias, 6 heads", 4, 6, 49, 49, 32, 32, 0, false, true},
    {"unaligned rows (scalar loads and stores)", 3, 2, 49, 49, 32, 32, 6, false, true, 3},
    {"s != s_kv, head sizes off the packs, k transposed", 5, 1, 17, 30, 20, 24, 1, true},
    {"64 tokens exactly, head size 64, a bias per matrix", 3, 2, 64, 64, 64, 64, 6, false, true},
    {"the 128-token tile, head size 128 and 40", 2, 1, 100, 128, 128, 40, 2},
    {"65 tokens (the 128 tile), per-head bias", 2, 4, 65, 65, 32, 32, 4, false, true},
    {"one token", 7, 1, 1, 1, 8, 8, 0},
    {"a fully masked row gives zeros", 2, 1, 9, 9, 16, 16, 2, false, false, 0, 3, true},
    {"a fully masked row gives NaN", 2, 1, 9, 9, 16, 16, 2, false, false, 0, 3, false},
};

TEST(WindowAttention, MatchesAFloat64ReferenceOnEveryBranch) {
  for (DType t : {DType::BF16, DType::F16})
    for (const WinCase& c : kCases) run_case(c, t);
}

TEST(WindowAttention, TakesShortSequencesOfHalfTypesOnly) {
  EXPECT_TRUE(window_attention_fits(DType::BF16, 49, 49, 32, 32));
  EXPECT_TRUE(window_attention_fits(DType::F16, 128, 128, 128, 128));
  EXPECT_FALSE(window_attention_fits(DType::F32, 49, 49, 32, 32));
  EXPECT_FALSE(window_attention_fits(DType::BF16, 129, 49, 32, 32));
  EXPECT_FALSE(window_attention_fits(DType::BF16, 49, 49, 160, 32));
}

}  // namespace
