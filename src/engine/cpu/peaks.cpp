// Host ceilings: memcpy over buffers far larger than the caches, and a square sgemm split into row
// blocks over the pool (BLAS itself single-threaded, as the engine runs it).  Random data: zeros
// can run faster than real values.  Medians of a few repetitions.
#include "engine/cpu/peaks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "engine/cpu/gemm.h"

namespace sluice::cpu {
namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(seconds(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void fill_random(std::vector<float>& v, uint32_t seed) {
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) * (1.f / 16777216.f) - 0.5f;
  }
}

}  // namespace

DevicePeaks measure_host_peaks(ThreadPool& pool) {
  DevicePeaks p;
  // Copy: 128 MiB each way, in 1 MiB pieces over the pool.
  constexpr std::size_t kBytes = 128u << 20, kPiece = 1u << 20;
  std::vector<float> src(kBytes / sizeof(float)), dst(kBytes / sizeof(float));
  fill_random(src, 1);
  const auto* s = reinterpret_cast<const char*>(src.data());
  auto* d = reinterpret_cast<char*>(dst.data());
  const int64_t pieces = static_cast<int64_t>(kBytes / kPiece);
  auto copy = [&] { pool.parallel_for(pieces, [&](int64_t i, int) { std::memcpy(d + i * kPiece, s + i * kPiece, kPiece); }); };
  copy();   // first touch of dst
  const double tc = median_seconds(5, copy);
  p.bytes_per_s = 2.0 * static_cast<double>(kBytes) / tc;
  p.bytes_how = str("memcpy of 128 MiB on ", pool.size(), " thread(s), read + write bytes, median of 5");

  // sgemm: C[n,n] = A[n,n] B[n,n], rows split into blocks of 64.
  constexpr int64_t n = 1024, block = 64;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  fill_random(a, 2);
  fill_random(b, 3);
  auto gemm = [&] {
    pool.parallel_for(n / block, [&](int64_t i, int) {
      sgemm(false, false, block, n, n, 1.f, a.data() + i * block * n, n, b.data(), n, 0.f, c.data() + i * block * n, n);
    });
  };
  gemm();
  const double tg = median_seconds(3, gemm);
  p.flops_per_s = 2.0 * static_cast<double>(n) * n * n / tg;
  p.flops_how = str("sgemm ", n, "x", n, "x", n, " on ", pool.size(), " thread(s), median of 3");
  return p;
}

}  // namespace sluice::cpu
