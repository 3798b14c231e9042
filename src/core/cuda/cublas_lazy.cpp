// cuBLAS and cuBLASLt, opened on the first call instead of at process start.
//
// Loading libcublasLt runs its static initializers, about 60 ms of CPU and 80 ms of wall time on
// every start of every process that links it, with or without a GPU (measured on the 2-core
// development VM, 2026-12-02: `sluice --version` took 104 ms, 80 of them in libcublasLt's
// initializers; libcublas loads libcublasLt).  A CPU run, `sluice inspect`, each rank of a small
// job and each test process paid it.  So Sluice links neither library: the functions it calls are
// defined here, each resolving the real one with dlopen/dlsym on its first call.  The first call
// comes from the CUDA engine's set-up (cublasCreate, cublasLtCreate), where the load costs the same
// as before.  A cuBLAS function this file lacks fails the link, so a new one cannot slip past.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace {

#define SLUICE_LAZY_STR2(x) #x
#define SLUICE_LAZY_STR(x) SLUICE_LAZY_STR2(x)  // expands cublas_v2.h's macros: cublasCreate -> cublasCreate_v2

enum class Lib { Lt, Blas };

void* open_library(const char* base) {
  const std::string soname = std::string(base) + ".so." SLUICE_LAZY_STR(CUBLAS_VER_MAJOR);
  // The usual search first (LD_LIBRARY_PATH, the executable's RUNPATH, ld.so.cache), then the
  // folder the build found the toolkit's cuBLAS in.
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL);
#ifdef SLUICE_CUBLAS_DIR
  if (!h) h = dlopen((std::string(SLUICE_CUBLAS_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_GLOBAL);
#endif
  if (!h) {
    const char* why = dlerror();
    throw std::runtime_error("cannot load " + soname + " (" + (why ? why : "not found") +
                             "): the CUDA engine needs the CUDA toolkit's cuBLAS; put the folder that holds it "
                             "on LD_LIBRARY_PATH, or run with --device cpu");
  }
  return h;
}

void* library(Lib lib) {
  static std::once_flag once;
  static void* lt = nullptr;
  static void* blas = nullptr;
  // libcublas needs libcublasLt: opening Lt first makes cuBLAS find that copy.
  std::call_once(once, [] {
    lt = open_library("libcublasLt");
    blas = open_library("libcublas");
  });
  return lib == Lib::Lt ? lt : blas;
}

void* symbol(Lib lib, const char* name) {
  void* f = dlsym(library(lib), name);
  if (!f) throw std::runtime_error(std::string("the loaded cuBLAS has no ") + name + ": it is older than the CUDA " +
                                   "toolkit Sluice was built with; put the matching cuBLAS on LD_LIBRARY_PATH");
  return f;
}

// The pointer type of a function taking `args` and returning R: the wrapper's own parameters name
// the real function's signature (cuBLAS's header overloads some names for C++, so &fn is ambiguous).
template <typename R, typename... A>
constexpr auto function_type(A...) -> R (*)(A...) {
  return nullptr;
}

}  // namespace

// The real function, found once a process (the resolution cannot change within one).
#define SLUICE_LAZY_CALL(lib, fn, ...)                                                                  \
  using Real = decltype(function_type<decltype(fn(__VA_ARGS__))>(__VA_ARGS__));                        \
  static const auto real = reinterpret_cast<Real>(symbol(lib, SLUICE_LAZY_STR(fn)));                     \
  return real(__VA_ARGS__)

extern "C" {

// ---- cuBLAS --------------------------------------------------------------------------------------
cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t* handle) { SLUICE_LAZY_CALL(Lib::Blas, cublasCreate, handle); }
cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t handle) { SLUICE_LAZY_CALL(Lib::Blas, cublasDestroy, handle); }
cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  SLUICE_LAZY_CALL(Lib::Blas, cublasSetStream, handle, stream);
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  SLUICE_LAZY_CALL(Lib::Blas, cublasSetWorkspace, handle, workspace, bytes);
}
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  SLUICE_LAZY_CALL(Lib::Blas, cublasSetMathMode, handle, mode);
}
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                                         void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  SLUICE_LAZY_CALL(Lib::Blas, cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                   beta, C, Ctype, ldc, computeType, algo);
}
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k,
                                                       const void* alpha, const void* A, cudaDataType Atype, int lda,
                                                       long long int strideA, const void* B, cudaDataType Btype,
                                                       int ldb, long long int strideB, const void* beta, void* C,
                                                       cudaDataType Ctype, int ldc, long long int strideC,
                                                       int batchCount, cublasComputeType_t computeType,
                                                       cublasGemmAlgo_t algo) {
  SLUICE_LAZY_CALL(Lib::Blas, cublasGemmStridedBatchedEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                   strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

// ---- cuBLASLt ------------------------------------------------------------------------------------
size_t CUBLASWINAPI cublasLtGetVersion(void) { SLUICE_LAZY_CALL(Lib::Lt, cublasLtGetVersion); }
cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) { SLUICE_LAZY_CALL(Lib::Lt, cublasLtCreate, handle); }
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) { SLUICE_LAZY_CALL(Lib::Lt, cublasLtDestroy, handle); }
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceBytes,
                                           cudaStream_t stream) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspaceBytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatrixLayoutDestroy, layout);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                             size_t bytes) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatrixLayoutSetAttribute, layout, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulDescCreate, desc, computeType, scaleType);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t pref, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested,
                   results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                    const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulHeuristicResult_t* result) {
  SLUICE_LAZY_CALL(Lib::Lt, cublasLtMatmulAlgoCheck, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, algo, result);
}

}  // extern "C"
