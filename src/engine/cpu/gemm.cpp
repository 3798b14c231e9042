#include "engine/cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace sluice::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  SLUICE_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
               "GEMM too large for 32-bit BLAS: ", m, "x", n, "x", k);
  if (k <= 0) {  // BLAS may leave C untouched; define it as beta * C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

namespace {

// OpenBLAS (DYNAMIC_ARCH builds such as Debian's) picks its kernels from the CPU model when it is
// loaded.  Releases that do not know a newer CPU fall back to an old generic core (Debian 12's
// 0.3.21 runs Emerald Rapids with its SSE3 "Prescott" kernels, 3-4x slower than its AVX-512 ones).
// When the library reports such a core on a CPU that has AVX2 or AVX-512, redo its selection with
// the matching kernels through the library's own OPENBLAS_CORETYPE mechanism.  A user's
// OPENBLAS_CORETYPE is left alone.  Must run before any BLAS call is in flight.
void fix_blas_core_selection() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  using NameFn = char* (*)();
  using VoidFn = void (*)();
  auto corename = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  auto init = reinterpret_cast<VoidFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  auto quit = reinterpret_cast<VoidFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  if (!corename || !init || !quit) return;  // not a DYNAMIC_ARCH OpenBLAS
  std::string core = corename() ? corename() : "";
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> pre_avx2 = {"unknown", "katmai", "coppermine", "northwood", "prescott", "banias",
                                                 "atom", "core2", "penryn", "dunnington", "nehalem", "sandybridge"};
  if (!pre_avx2.count(core)) return;
  __builtin_cpu_init();
  const char* want = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = "Haswell";
  if (!want) return;
  setenv("OPENBLAS_CORETYPE", want, 0);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  log_debug("OpenBLAS did not recognize this CPU (it chose its '", core, "' kernels); using its ", corename(),
           " kernels (set OPENBLAS_CORETYPE to choose)");
}

}  // namespace

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    fix_blas_core_selection();
    openblas_set_num_threads(1);
  });
}

namespace {
int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Splits `n` into about n/target balanced pieces, each a multiple of `align` (except the last).
void split(int64_t n, int64_t target, int64_t align, int64_t* extent, int64_t* count) {
  const int64_t pieces = std::max<int64_t>(1, (n + target - 1) / target);
  *extent = std::min(n, round_up((n + pieces - 1) / pieces, align));
  *count = (n + *extent - 1) / *extent;
}
}  // namespace

GemmTiles choose_gemm_tiles(int64_t m, int64_t n, int64_t k) {
  GemmTiles t;
  // Columns (output pixels) first: wide tiles keep BLAS efficient and bound the im2col scratch.
  split(std::max<int64_t>(n, 1), 384, 16, &t.nt, &t.nc);
  // Few column tiles (late, small feature maps): split the rows too so that there is work for
  // several threads, but keep row tiles tall enough for the BLAS kernels.
  const int64_t want = 8;
  int64_t mt = std::max<int64_t>(m, 1), mc = 1;
  if (t.nc < want && m >= 64) {
    const int64_t pieces = std::min<int64_t>((want + t.nc - 1) / t.nc, m / 32);
    split(m, (m + pieces - 1) / pieces, 16, &mt, &mc);
  }
  t.mt = mt;
  t.mc = mc;
  (void)k;
  return t;
}

}  // namespace sluice::cpu
