// cuBLASLt products with a bias (and GELU) epilogue (gemm_lt.h).  The mapping to column-major is
// the one of ops_gemm.cpp: a row-major Y[M,N] = A[M,K] B[K,N] is the column-major Y^T = B^T A^T, so
// cuBLASLt's A is our B and its B our A, and the bias of length N runs along the rows of its D.
// The algorithm, as --autotune says (autotune.h, the same levels as the convolutions'): under off
// the heuristic's first choice for the operand alignments the step sees at set-up; under quick its
// first kQuickProducts candidates, under full its first kFullProducts, each timed on the step's own
// buffers with CUDA events (quick: a warm-up and the median of three runs, full: two and five; well
// under a millisecond for a transformer's projection), the fastest kept.  Under quick, products too
// small to matter (the model's smallest layers, together 1 % of its FLOPs) take the first untimed.
// The choice goes to the algorithm cache with its level, keyed by the product's shape, types,
// epilogue, residual and alignments and by cuBLASLt's version (an algorithm is valid for the
// version that made it); a cached choice made at least as thoroughly as this start asks is used
// untimed.  Identical products of one model share the measurement.  Deterministic runs and
// SLUICE_CUDA_GEMM_TUNE=0 take the heuristic's first choice without the cache; SLUICE_CUDA_GEMM_TUNE=
// quick|full times at that level whatever --autotune says (1, the default: as --autotune says).
// A residual (LtGemmSpec, C) is read with beta = 1 in Y's layout; its alignment is the heuristic's C
// alignment, so an unaligned one gets kernels that read it, or none (then the step fails at set-up
// and the builder's plan, ops_gemm.cpp, keeps it unfused only for a shape it refuses up front).
#include "engine/cuda/gemm_lt.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/params.h"
#include "engine/cuda/algo_cache.h"
#include "engine/cuda/autotune.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/precision_types.h"

namespace sluice::cuda {
namespace {

// The largest power of two (up to 256) that divides address p: what cuBLASLt's heuristic is told
// the operands are aligned to, so that it offers only kernels that can read them.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

// cuBLASLt suggests 32 MiB of workspace on Hopper; the engine's is larger unless memory is short.
constexpr std::size_t kMaxLtWorkspace = 32ull << 20;

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}
template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const T& v) {
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof(v)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(v)));
}

void destroy_desc(cublasLtMatmulDesc_t d) { (void)cublasLtMatmulDescDestroy(d); }
void destroy_layout(cublasLtMatrixLayout_t l) { (void)cublasLtMatrixLayoutDestroy(l); }
void destroy_pref(cublasLtMatmulPreference_t p) { (void)cublasLtMatmulPreferenceDestroy(p); }
using MatmulDesc = Handle<cublasLtMatmulDesc_t, destroy_desc>;
using MatrixLayout = Handle<cublasLtMatrixLayout_t, destroy_layout>;
using MatmulPref = Handle<cublasLtMatmulPreference_t, destroy_pref>;

MatrixLayout make_layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, blas_type(t), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  MatrixLayout owned(l);
  if (batch > 1) {
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return owned;
}

// SLUICE_CUDA_GEMM_TUNE: "0" (the first candidate, no cache), "1" or unset (--autotune), "quick", "full".
std::string tune_mode() {
  return param_string("SLUICE_CUDA_GEMM_TUNE");   // one of 0|1|quick|full
}

std::string algo_text(const cublasLtMatmulAlgo_t& a) {
  std::string t;
  for (uint64_t w : a.data) t += str(t.empty() ? "" : " ", w);
  return t;
}

bool parse_algo(const std::string& t, cublasLtMatmulAlgo_t* a) {
  const char* p = t.c_str();
  for (uint64_t& w : a->data) {
    char* end = nullptr;
    w = std::strtoull(p, &end, 10);
    if (end == p) return false;
    p = end;
  }
  return *p == '\0';
}

class LtGemmStep final : public Step {
 public:
  LtGemmStep(std::string label, const LtGemmSpec& spec, int a, int b, int bias, int y, int c)
      : Step(std::move(label)), s_(spec), a_(a), b_(b), bias_(bias), y_(y), c_(c) {}

  void prepare(Context& ctx, const Bindings& bd) override {
    SLUICE_CHECK(ctx.cublaslt != nullptr, "cuBLASLt step '", label(), "' prepared without a cuBLASLt handle");
    const void* pa = bd.at(a_);
    const void* pb = bd.at(b_);
    void* py = bd.at(y_);
    const void* pbias = bias_ >= 0 ? bd.at(bias_) : nullptr;
    align_a_ = alignment(pa);
    align_b_ = alignment(pb);
    align_y_ = alignment(py);
    align_bias_ = alignment(pbias);
    align_c_ = c_ >= 0 ? alignment(bd.at(c_)) : align_y_;
    // Column-major operands (see the top of the file): cuBLASLt's A is our B, n x k once op'd.
    lt_a_ = s_.trans_b ? make_layout(s_.ab, s_.k, s_.n, s_.k, s_.batch, s_.stride_b)
                       : make_layout(s_.ab, s_.n, s_.k, s_.n, s_.batch, s_.stride_b);
    lt_b_ = s_.trans_a ? make_layout(s_.ab, s_.m, s_.k, s_.m, s_.batch, s_.stride_a)
                       : make_layout(s_.ab, s_.k, s_.m, s_.k, s_.batch, s_.stride_a);
    lt_y_ = make_layout(s_.y, s_.n, s_.m, s_.n, s_.batch, s_.stride_y);
    workspace_ = std::min(ctx.workspace_bytes, kMaxLtWorkspace);
    // The epilogue asked for; when cuBLASLt has no kernel for it, the product alone and the
    // epilogue as the engine's own kernels (run()).
    fused_ = s_.epilogue != GemmEpilogue::None && choose(ctx, bd, s_.epilogue, pbias);
    if (!fused_ && !choose(ctx, bd, GemmEpilogue::None, nullptr))
      SLUICE_THROW("cuBLASLt offers no algorithm for ", label(), " (", s_.m, "x", s_.n, "x", s_.k, ", batch ", s_.batch, ", ",
                   dtype_name(s_.ab), " in, ", dtype_name(s_.y), " out)");
  }

  void run(Context& ctx, const Bindings& bd, cudaStream_t st) override {
    if (!desc_) prepare(ctx, bd);
    const void* pa = bd.at(a_);
    const void* pb = bd.at(b_);
    void* py = bd.at(y_);
    const void* pbias = bias_ >= 0 ? bd.at(bias_) : nullptr;
    const void* pc = c_ >= 0 ? bd.at(c_) : py;
    // Every io set has the same offsets from 256-byte aligned buffers, so the alignment the
    // algorithm was chosen for holds for each; checked anyway, since a misaligned read would fault.
    SLUICE_CHECK(alignment(pa) >= align_a_ && alignment(pb) >= align_b_ && alignment(py) >= align_y_ &&
                     alignment(pbias) >= align_bias_ && alignment(pc) >= align_c_,
                 "cuBLASLt step '", label(), "': operands less aligned than at set-up");
    if (fused_) set_desc(desc_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
    const float beta = c_ >= 0 ? 1.f : 0.f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt, desc_, &s_.alpha, pb, lt_a_, pa, lt_b_, &beta, pc, lt_y_, py, lt_y_, &algo_,
                                ctx.workspace, workspace_, st));
    if (fused_ || s_.epilogue == GemmEpilogue::None) return;
    // No fused kernel: the bias, then the activation, in place (C, when there is one, was added
    // by the product) (each element read and written by
    // the same thread).
    const int64_t count = s_.batch * s_.m * s_.n;
    ResidualOperand y, bias;
    y.p = py;
    y.t = s_.y;
    y.count = count;
    bias.p = pbias;
    bias.t = s_.y;
    bias.count = s_.n;
    residual_add(y, bias, py, s_.y, count, st);
    if (s_.epilogue == GemmEpilogue::BiasGelu || s_.epilogue == GemmEpilogue::BiasRelu) {
      ActParams p;
      p.act = s_.epilogue == GemmEpilogue::BiasRelu ? Act::Relu : s_.gelu;
      unary(s_.y, py, py, count, p, st);
    }
  }

 private:
  // Builds the descriptor for epilogue e and takes the cached algorithm, the fastest of the
  // heuristic's candidates, or (SLUICE_CUDA_GEMM_TUNE=0) its first; false when it offers none.
  bool choose(Context& ctx, const Bindings& bd, GemmEpilogue e, const void* pbias) {
    cublasLtMatmulDesc_t d = nullptr;
    const cublasComputeType_t compute = blas_compute(s_.precision);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
    MatmulDesc desc(d);
    set_desc(d, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(s_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
    set_desc(d, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(s_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
    const cublasLtEpilogue_t ep = e == GemmEpilogue::BiasGelu   ? CUBLASLT_EPILOGUE_GELU_BIAS
                                  : e == GemmEpilogue::BiasRelu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                  : e == GemmEpilogue::Bias     ? CUBLASLT_EPILOGUE_BIAS
                                                                : CUBLASLT_EPILOGUE_DEFAULT;
    set_desc(d, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(ep));
    if (e != GemmEpilogue::None) {
      // The bias in D's type (the default, stated here so that it does not depend on it); its
      // pointer is set before the heuristic, which reads its alignment from it.
      set_desc(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(blas_type(s_.y)));
      set_desc(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
    }
    cublasLtMatmulPreference_t p = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    MatmulPref pref(p);
    set_pref(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_));
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b_);   // cuBLASLt's A is our B
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a_);
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c_);
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_y_);
    // Split-K may add its partial products in the output's type (in place, or in the workspace):
    // at fp16/bf16 that rounds each part, so only its reduction in the compute type (fp32) is let
    // through there (products without split-K pass any mask).
    if (s_.y != DType::F32)
      set_pref(p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    // Under --deterministic the heuristic's first choice: the same algorithm at every start, also
    // without a cache.
    const std::string mode = tune_mode();
    const bool cached = mode != "0" && ctx.cache && !ctx.deterministic;
    const TuneLevel level = !cached           ? TuneLevel::Heuristic
                            : mode == "quick" ? TuneLevel::Quick
                            : mode == "full"  ? TuneLevel::Full
                                              : tune_level(ctx, ctx.product_autotune, flops);
    const std::string key = str(ctx.cache_prefix, "|gemm cublaslt ", cublasLtGetVersion(), "|", s_.m, "x", s_.n, "x", s_.k,
                                s_.trans_a ? " ta" : "", s_.trans_b ? " tb" : "", "|batch ", s_.batch, " ", s_.stride_a, " ",
                                s_.stride_b, " ", s_.stride_y, "|", dtype_name(s_.ab), ">", dtype_name(s_.y), "|ep ",
                                static_cast<int>(ep), "|align ", align_a_, " ", align_b_, " ", align_y_, " ", align_bias_,
                                "|ws ", workspace_, c_ >= 0 ? str("|c ", align_c_) : std::string());
    if (cached) {
      cublasLtMatmulAlgo_t a{};
      cublasLtMatmulHeuristicResult_t check{};
      Tuned t;
      if (auto hit = ctx.cache->get(key); hit) t = parse_tuned(*hit);
      if (!t.choice.empty() && t.level >= level && parse_algo(t.choice, &a) &&
          cublasLtMatmulAlgoCheck(ctx.cublaslt, d, lt_a_, lt_b_, lt_y_, lt_y_, &a, &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= workspace_) {
        if (ctx.stats) ctx.stats->products_cached++;
        desc_ = std::move(desc);
        algo_ = a;
        return true;
      }
    }
    const int want = level == TuneLevel::Full ? kFullProducts : level == TuneLevel::Quick ? kQuickProducts : 1;
    cublasLtMatmulHeuristicResult_t r[kFullProducts] = {};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, d, lt_a_, lt_b_, lt_y_, lt_y_, p, want, r, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    CUBLAS_CHECK(st);
    std::vector<cublasLtMatmulAlgo_t> ok;
    for (int i = 0; i < found; ++i)
      if (r[i].state == CUBLAS_STATUS_SUCCESS && r[i].workspaceSize <= workspace_) ok.push_back(r[i].algo);
    if (ok.empty()) return false;
    desc_ = std::move(desc);
    algo_ = ok[0];
    if (ok.size() > 1 && level != TuneLevel::Heuristic) {
      algo_ = fastest(ctx, ok, bd, level);
      if (ctx.stats) ctx.stats->products_measured++;
    }
    // One candidate in all is as good a choice as any search makes.
    if (cached)
      ctx.cache->put(key, tuned_value(level == TuneLevel::Heuristic || ok.size() > 1 ? level : TuneLevel::Full, algo_text(algo_)));
    return true;
  }

  // The candidate that runs the product fastest on the step's buffers (their content does not
  // matter), on a stream of its own, synchronized before and after.
  // Timed as `level` says (autotune.h, time_candidate: the median of 3 or 5 runs after 1 or 2
  // warm-ups).
  cublasLtMatmulAlgo_t fastest(Context& ctx, const std::vector<cublasLtMatmulAlgo_t>& algos, const Bindings& bd,
                               TuneLevel level) {
    Stream stream = make_stream();
    CUDA_CHECK(cudaDeviceSynchronize());
    const void* pbias = bias_ >= 0 ? bd.at(bias_) : nullptr;
    if (pbias) set_desc(desc_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
    const float beta = c_ >= 0 ? 1.f : 0.f;
    const void* pc = c_ >= 0 ? bd.at(c_) : bd.at(y_);
    float best_ms = 0;
    std::size_t best = 0;
    bool timed = false;
    for (std::size_t i = 0; i < algos.size(); ++i) {
      auto once = [&] {
        return cublasLtMatmul(ctx.cublaslt, desc_, &s_.alpha, bd.at(b_), lt_a_, bd.at(a_), lt_b_, &beta, pc, lt_y_,
                              bd.at(y_), lt_y_, &algos[i], ctx.workspace, workspace_, stream);
      };
      if (once() != CUBLAS_STATUS_SUCCESS) continue;   // a candidate that does not run is passed over
      const float ms = time_candidate(stream, level, [&] { CUBLAS_CHECK(once()); });
      if (!timed || ms < best_ms) {
        best_ms = ms;
        best = i;
        timed = true;
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return algos[best];
  }

  LtGemmSpec s_;
  int a_, b_, bias_, y_, c_;
  uint32_t align_a_ = 256, align_b_ = 256, align_y_ = 256, align_bias_ = 256, align_c_ = 256;
  std::size_t workspace_ = 0;
  bool fused_ = false;
  MatmulDesc desc_;
  MatrixLayout lt_a_, lt_b_, lt_y_;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace

std::unique_ptr<Step> make_lt_gemm_step(std::string label, const LtGemmSpec& spec, int a, int b, int bias, int y, int c) {
  SLUICE_CHECK((spec.epilogue == GemmEpilogue::None) == (bias < 0), "a cuBLASLt epilogue needs a bias slot, and only it");
  SLUICE_CHECK(c < 0 || spec.epilogue != GemmEpilogue::BiasGelu, "cuBLASLt applies the GELU after C: no residual with it");
  return std::make_unique<LtGemmStep>(std::move(label), spec, a, b, bias, y, c);
}

CublasLtHandle make_cublaslt() {
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}

}  // namespace sluice::cuda
