// cuBLAS and cuBLASLt opened on first use (core/cuda/cublas_lazy.cpp): a process that never calls
// them does not load them, the first call loads the toolkit's copy the build was made against, and
// calls through both libraries compute on the GPU.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/cuda/cuda_raii.h"
#include "gpu_test_util.h"

using namespace sluice;
using sluice::cuda::CublasHandle;
using sluice::cuda::make_cublas;

namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

// Checked in a child process: in this one, an earlier test of a shuffled run may have called cuBLAS.
TEST(CublasLazy, AProcessThatDoesNotCallCublasDoesNotLoadIt) {
  std::ifstream self("/proc/self/cmdline");
  std::string exe;
  std::getline(self, exe, '\0');
  // A child that only lists its tests makes no cuBLAS call; LD_DEBUG=files names every object the
  // loader maps, at start and by dlopen.
  const std::string cmd = "LD_DEBUG=files '" + exe + "' --gtest_list_tests 2>&1 >/dev/null | grep -c 'file=[^ ]*libcublas'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[32] = {};
  const bool got = fgets(buf, sizeof buf, p) != nullptr;
  pclose(p);
  ASSERT_TRUE(got);
  EXPECT_EQ(std::stoi(buf), 0) << "the test binary loaded libcublas at start";
}

TEST(CublasLazy, TheFirstCallLoadsTheToolkitsCublasLtOfTheBuildsVersion) {
  const size_t v = cublasLtGetVersion();
  EXPECT_EQ(v / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR)) << v;
  EXPECT_TRUE(mapped("libcublasLt.so")) << "cublasLtGetVersion returned without loading libcublasLt";
}

TEST(CublasLazy, GemmsThroughCublasAndCublasLtComputeTheProduct) {
  SLUICE_REQUIRE_GPU();
  // C = A B for a 3x2 by 2x4 product in fp32, column-major, once through cublasGemmEx and once
  // through cublasLtMatmul.
  const int m = 3, k = 2, n = 4;
  std::vector<float> a(m * k), b(k * n), want(m * n, 0.0f);
  for (int i = 0; i < m * k; ++i) a[i] = 0.5f * static_cast<float>(i) - 1.0f;
  for (int i = 0; i < k * n; ++i) b[i] = 0.25f * static_cast<float>(i * i % 7) + 0.5f;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < k; ++p) want[j * m + i] += a[p * m + i] * b[j * k + p];
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, want.size() * 4), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
  const float one = 1.0f, zero = 0.0f;
  std::vector<float> got(want.size());

  CublasHandle blas = make_cublas();
  ASSERT_EQ(cublasSetMathMode(blas.get(), CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmEx(blas.get(), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_32F, m, db, CUDA_R_32F, k,
                         &zero, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << "cublasGemmEx at " << i;

  cudaMemset(dc, 0, want.size() * 4);
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero, dc, lc, dc, lc, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << "cublasLtMatmul at " << i;
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

}  // namespace
