// cuBLASLt products with a bias (and GELU) epilogue (gemm_lt.h).  The mapping to column-major is
// the one of ops_gemm.cpp: a row-major Y[M,N] = A[M,K] B[K,N] is the column-major Y^T = B^T A^T, so
// cuBLASLt's A is our B and its B our A, and the bias of length N runs along the rows of its D.
// The algorithm is cuBLASLt's first heuristic choice for the operand alignments the step sees at
// set-up (no timing: set-up stays a few milliseconds for a whole transformer).
#include "engine/cuda/gemm_lt.h"

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: SLUICE_THROW("cuBLASLt: element type ", dtype_name(t), " is not supported");
  }
}

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
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, lt_type(t), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  MatrixLayout owned(l);
  if (batch > 1) {
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return owned;
}

class LtGemmStep final : public Step {
 public:
  LtGemmStep(std::string label, const LtGemmSpec& spec, int a, int b, int bias, int y)
      : Step(std::move(label)), s_(spec), a_(a), b_(b), bias_(bias), y_(y) {}

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
    // Column-major operands (see the top of the file): cuBLASLt's A is our B, n x k once op'd.
    lt_a_ = s_.trans_b ? make_layout(s_.ab, s_.k, s_.n, s_.k, s_.batch, s_.stride_b)
                       : make_layout(s_.ab, s_.n, s_.k, s_.n, s_.batch, s_.stride_b);
    lt_b_ = s_.trans_a ? make_layout(s_.ab, s_.m, s_.k, s_.m, s_.batch, s_.stride_a)
                       : make_layout(s_.ab, s_.k, s_.m, s_.k, s_.batch, s_.stride_a);
    lt_y_ = make_layout(s_.y, s_.n, s_.m, s_.n, s_.batch, s_.stride_y);
    workspace_ = std::min(ctx.workspace_bytes, kMaxLtWorkspace);
    // The epilogue asked for; when cuBLASLt has no kernel for it, the product alone and the
    // epilogue as the engine's own kernels (run()).
    fused_ = s_.epilogue != GemmEpilogue::None && choose(ctx, s_.epilogue, pbias);
    if (!fused_ && !choose(ctx, GemmEpilogue::None, nullptr))
      SLUICE_THROW("cuBLASLt offers no algorithm for ", label(), " (", s_.m, "x", s_.n, "x", s_.k, ", batch ", s_.batch, ", ",
                   dtype_name(s_.ab), " in, ", dtype_name(s_.y), " out)");
  }

  void run(Context& ctx, const Bindings& bd, cudaStream_t st) override {
    if (!desc_) prepare(ctx, bd);
    const void* pa = bd.at(a_);
    const void* pb = bd.at(b_);
    void* py = bd.at(y_);
    const void* pbias = bias_ >= 0 ? bd.at(bias_) : nullptr;
    // Every io set has the same offsets from 256-byte aligned buffers, so the alignment the
    // algorithm was chosen for holds for each; checked anyway, since a misaligned read would fault.
    SLUICE_CHECK(alignment(pa) >= align_a_ && alignment(pb) >= align_b_ && alignment(py) >= align_y_ &&
                     alignment(pbias) >= align_bias_,
                 "cuBLASLt step '", label(), "': operands less aligned than at set-up");
    if (fused_) set_desc(desc_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
    const float beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt, desc_, &s_.alpha, pb, lt_a_, pa, lt_b_, &beta, py, lt_y_, py, lt_y_, &algo_,
                                ctx.workspace, workspace_, st));
    if (fused_ || s_.epilogue == GemmEpilogue::None) return;
    // No fused kernel: the bias, then the activation, in place (each element read and written by
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
    if (s_.epilogue == GemmEpilogue::BiasGelu) {
      ActParams p;
      p.act = s_.gelu;
      unary(s_.y, py, py, count, p, st);
    }
  }

 private:
  // Builds the descriptor for epilogue e and takes cuBLASLt's first heuristic algorithm; false
  // when it returns none.
  bool choose(Context& ctx, GemmEpilogue e, const void* pbias) {
    cublasLtMatmulDesc_t d = nullptr;
    const cublasComputeType_t compute = s_.precision == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
    MatmulDesc desc(d);
    set_desc(d, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(s_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
    set_desc(d, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(s_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
    const cublasLtEpilogue_t ep = e == GemmEpilogue::BiasGelu ? CUBLASLT_EPILOGUE_GELU_BIAS
                                  : e == GemmEpilogue::Bias   ? CUBLASLT_EPILOGUE_BIAS
                                                              : CUBLASLT_EPILOGUE_DEFAULT;
    set_desc(d, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(ep));
    if (e != GemmEpilogue::None) {
      // The bias in D's type (the default, stated here so that it does not depend on it); its
      // pointer is set before the heuristic, which reads its alignment from it.
      set_desc(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(lt_type(s_.y)));
      set_desc(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
    }
    cublasLtMatmulPreference_t p = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    MatmulPref pref(p);
    set_pref(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_));
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b_);   // cuBLASLt's A is our B
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a_);
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_y_);
    set_pref(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_y_);
    if (ctx.deterministic) {
      // In-place split-K adds partial products into the output in whatever order they finish.
      set_pref(p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE));
    }
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, d, lt_a_, lt_b_, lt_y_, lt_y_, p, 1, &r, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0 || r.state != CUBLAS_STATUS_SUCCESS) return false;
    CUBLAS_CHECK(st);
    desc_ = std::move(desc);
    algo_ = r.algo;
    return true;
  }

  LtGemmSpec s_;
  int a_, b_, bias_, y_;
  uint32_t align_a_ = 256, align_b_ = 256, align_y_ = 256, align_bias_ = 256;
  std::size_t workspace_ = 0;
  bool fused_ = false;
  MatmulDesc desc_;
  MatrixLayout lt_a_, lt_b_, lt_y_;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace

std::unique_ptr<Step> make_lt_gemm_step(std::string label, const LtGemmSpec& spec, int a, int b, int bias, int y) {
  SLUICE_CHECK((spec.epilogue == GemmEpilogue::None) == (bias < 0), "a cuBLASLt epilogue needs a bias slot, and only it");
  return std::make_unique<LtGemmStep>(std::move(label), spec, a, b, bias, y);
}

CublasLtHandle make_cublaslt() {
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}

}  // namespace sluice::cuda
