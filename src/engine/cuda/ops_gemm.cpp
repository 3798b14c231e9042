// Gemm and MatMul on cuBLAS.  cuBLAS is column-major and our tensors are row-major: a row-major
// Y[M,N] = A[M,K] B[K,N] is the column-major Y^T = B^T A^T, so every call passes B first.
// Precision: fp32 computes in CUBLAS_COMPUTE_32F under pedantic math (no TF32), tf32 in
// CUBLAS_COMPUTE_32F_FAST_TF32, fp16/bf16 store half types and accumulate in fp32.
#include "core/cuda/cuda_raii.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: SLUICE_THROW("cuBLAS: element type ", dtype_name(t), " is not supported");
  }
}

cublasComputeType_t compute_type(Precision p) {
  return p == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// One (batched) product in row-major terms: Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b].
struct GemmCall {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_y = 0;   // in elements
  int64_t offset_a = 0, offset_b = 0, offset_y = 0;              // in elements
  float alpha = 1.f, beta = 0.f;
};

void enqueue_gemm(Context& ctx, DType t, const GemmCall& c, const void* a, const void* b, void* y) {
  const std::size_t es = dtype_size(t);
  const char* pa = static_cast<const char*>(a) + c.offset_a * static_cast<int64_t>(es);
  const char* pb = static_cast<const char*>(b) + c.offset_b * static_cast<int64_t>(es);
  char* py = static_cast<char*>(y) + c.offset_y * static_cast<int64_t>(es);
  // Column-major view: B^T (n x k) times A^T (k x m).
  const cublasOperation_t op_b = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldb = c.trans_b ? c.k : c.n;
  const int64_t lda = c.trans_a ? c.m : c.k;
  const cudaDataType_t dt = blas_type(t);
  if (c.batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_b, op_a, static_cast<int>(c.n), static_cast<int>(c.m), static_cast<int>(c.k),
                              &c.alpha, pb, dt, static_cast<int>(ldb), pa, dt, static_cast<int>(lda), &c.beta, py, dt,
                              static_cast<int>(c.n), compute_type(ctx.precision), CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, op_b, op_a, static_cast<int>(c.n), static_cast<int>(c.m),
                                            static_cast<int>(c.k), &c.alpha, pb, dt, static_cast<int>(ldb), c.stride_b, pa,
                                            dt, static_cast<int>(lda), c.stride_a, &c.beta, py, dt, static_cast<int>(c.n),
                                            c.stride_y, static_cast<int>(c.batch), compute_type(ctx.precision),
                                            CUBLAS_GEMM_DEFAULT));
  }
}

void check_float(const Builder& b, const Node& n, int slot) {
  if (b.slot(slot).dtype != b.compute)
    b.fail(n, "tensor '", b.slot(slot).name, "' is ", dtype_name(b.slot(slot).dtype), "; products run on ",
           dtype_name(b.compute));
}

void lower_gemm_op(Builder& b, const Node& n) {
  const int a = b.input(n, 0), w = b.input(n, 1);
  check_float(b, n, a);
  check_float(b, n, w);
  const Shape as = b.slot(a).shape, ws = b.slot(w).shape;
  if (as.size() != 2 || ws.size() != 2) b.fail(n, "Gemm needs 2-D inputs, not ", shape_str(as), " and ", shape_str(ws));
  const int y = b.output(n, 0);
  GemmCall c;
  c.trans_a = n.get_int("transA", 0) != 0;
  c.trans_b = n.get_int("transB", 0) != 0;
  c.m = c.trans_a ? as[1] : as[0];
  c.k = c.trans_a ? as[0] : as[1];
  c.n = c.trans_b ? ws[0] : ws[1];
  if ((c.trans_b ? ws[1] : ws[0]) != c.k) b.fail(n, "inner dimensions of ", shape_str(as), " and ", shape_str(ws), " differ");
  c.alpha = n.get_float("alpha", 1.f);
  const float beta = n.get_float("beta", 1.f);
  const DType t = b.compute;
  std::vector<int> uses = {a, w, y};
  if (b.has_input(n, 2) && beta != 0.f) {
    // Y starts as C broadcast to [M, N]; cuBLAS adds beta * Y.
    const int cin = b.input(n, 2);
    check_float(b, n, cin);
    const Shape cs = b.slot(cin).shape;
    if (cs.size() > 2) b.fail(n, "C ", shape_str(cs), " does not broadcast to [M, N]");
    CopyShape cp;
    cp.rank = 2;
    cp.out[0] = c.m;
    cp.out[1] = c.n;
    const int64_t c0 = cs.size() == 2 ? cs[0] : 1, c1 = cs.empty() ? 1 : cs.back();
    if ((c0 != 1 && c0 != c.m) || (c1 != 1 && c1 != c.n)) b.fail(n, "C ", shape_str(cs), " does not broadcast to [", c.m, ",", c.n, "]");
    cp.in_dim[0] = c0;
    cp.in_dim[1] = c1;
    cp.in_stride[0] = c1;
    cp.in_stride[1] = 1;
    const std::size_t es = dtype_size(t);
    b.add(n.name + " C", {cin, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(cin), bd.at(y), cp, s); });
    c.beta = beta;
    uses.push_back(cin);
  }
  b.add(n.name, uses, [=](Context& ctx, const Bindings& bd, cudaStream_t) { enqueue_gemm(ctx, t, c, bd.at(a), bd.at(w), bd.at(y)); });
}

void lower_matmul(Builder& b, const Node& n) {
  const int a = b.input(n, 0), w = b.input(n, 1);
  check_float(b, n, a);
  check_float(b, n, w);
  Shape as = b.slot(a).shape, ws = b.slot(w).shape;
  const int y = b.output(n, 0);
  if (as.empty() || ws.empty()) b.fail(n, "MatMul of a scalar");
  // 1-D operands: [K] is [1, K] on the left and [K, 1] on the right.
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (ws.size() == 1) ws.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), nn = ws.back();
  if (ws[ws.size() - 2] != k) b.fail(n, "inner dimensions of ", shape_str(as), " and ", shape_str(ws), " differ");
  const std::size_t rank = std::max(as.size(), ws.size());
  // Batch dims, right-aligned and broadcast.
  std::vector<int64_t> ba(rank - 2, 1), bw(rank - 2, 1), bo(rank - 2, 1);
  for (std::size_t i = 0; i + 2 < as.size(); ++i) ba[rank - as.size() + i] = as[i];
  for (std::size_t i = 0; i + 2 < ws.size(); ++i) bw[rank - ws.size() + i] = ws[i];
  int64_t batch = 1, batch_a = 1, batch_w = 1;
  for (std::size_t i = 0; i < bo.size(); ++i) {
    if (ba[i] != bw[i] && ba[i] != 1 && bw[i] != 1) b.fail(n, "batch dims of ", shape_str(as), " and ", shape_str(ws), " do not broadcast");
    bo[i] = std::max(ba[i], bw[i]);
    batch *= bo[i];
    batch_a *= ba[i];
    batch_w *= bw[i];
  }
  const DType t = b.compute;
  std::vector<GemmCall> calls;
  GemmCall c;
  c.m = m;
  c.n = nn;
  c.k = k;
  if (batch_w == 1) {
    // Weights shared by the whole batch: one product with the batch folded into M.
    c.m = m * batch_a;   // batch_a == batch here: the output batch comes from A alone
    calls.push_back(c);
  } else if ((batch_a == batch || batch_a == 1) && batch_w == batch) {
    c.batch = batch;
    c.stride_a = batch_a == 1 ? 0 : m * k;
    c.stride_b = k * nn;
    c.stride_y = m * nn;
    calls.push_back(c);
  } else {
    // General broadcasting: one product per output batch index.
    for (int64_t i = 0; i < batch; ++i) {
      int64_t rem = i, ia = 0, iw = 0, sa = 1, sw = 1;
      for (std::size_t d = bo.size(); d-- > 0;) {
        const int64_t idx = rem % bo[d];
        rem /= bo[d];
        ia += (ba[d] == 1 ? 0 : idx) * sa;
        iw += (bw[d] == 1 ? 0 : idx) * sw;
        sa *= ba[d];
        sw *= bw[d];
      }
      GemmCall ci = c;
      ci.offset_a = ia * m * k;
      ci.offset_b = iw * k * nn;
      ci.offset_y = i * m * nn;
      calls.push_back(ci);
    }
  }
  if (static_cast<int64_t>(b.slot(y).numel()) != batch * m * nn) b.fail(n, "output ", shape_str(b.slot(y).shape), " does not match the product");
  b.add(n.name, {a, w, y}, [=](Context& ctx, const Bindings& bd, cudaStream_t) {
    for (const auto& call : calls) enqueue_gemm(ctx, t, call, bd.at(a), bd.at(w), bd.at(y));
  });
}

}  // namespace

bool lower_gemm(Builder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op == "Gemm") lower_gemm_op(b, n);
  else if (n.op == "MatMul") lower_matmul(b, n);
  else return false;
  return true;
}

}  // namespace sluice::cuda
