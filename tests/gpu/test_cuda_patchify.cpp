// The patch embeddings' permutation (kernels_layout.cu, SLUICE_CUDA_PATCHIFY): x [N, C, H, W] ->
// Reshape [N, C, Hp, p, Wp, q] -> Transpose (0, 2, 4, 1, 3, 5), which fuse_patches.cpp makes of a
// patch convolution.  It is moved through shared memory in words of the widest size that divides a
// patch row, so the cases cover each word size (14 bf16 elements: 4-byte words; 3: 2-byte words;
// 16: 16-byte words), a patch row split over several blocks, and a patch too large for the tile
// (the general kernel), each against the CPU engine with the kernel on and off.
#include "engine/cuda/kernels.h"
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

// x [n, c, hp p, wp q] + a random tensor (so the copy reads an intermediate) -> the 6-D patches.
Graph patches(int64_t n, int64_t c, int64_t hp, int64_t p, int64_t wp, int64_t q) {
  const Shape s{n, c, hp * p, wp * q};
  GraphBuilder b(s);
  b.random_f("r", s, 31);
  b.node("Add", {"x", "r"}, {f32("a", s)});
  b.constant_i("six", {6}, {n, c, hp, p, wp, q});
  b.node("Reshape", {"a", "six"}, {f32("g", {n, c, hp, p, wp, q})});
  set_ints(b.node("Transpose", {"g"}, {f32("y", {n, hp, wp, c, p, q})}), "perm", {0, 2, 4, 1, 3, 5});
  b.output("y");
  return b.g;
}

// The CopyShape lower_transpose makes of an input of `dims` and `perm`.
cuda::CopyShape transpose_shape(const std::vector<int64_t>& dims, const std::vector<int>& perm) {
  std::vector<int64_t> stride(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  cuda::CopyShape cs;
  cs.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    cs.out[d] = cs.in_dim[d] = dims[perm[d]];
    cs.in_stride[d] = stride[perm[d]];
  }
  return cs;
}

class Patchify : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST(PatchifyShape, OnlyThePatchPermutationIsRecognised) {
  EXPECT_TRUE(cuda::is_patch_permutation(transpose_shape({2, 3, 16, 14, 16, 14}, {0, 2, 4, 1, 3, 5})));
  EXPECT_TRUE(cuda::is_patch_permutation(transpose_shape({1, 4, 2, 5, 5, 3}, {0, 2, 4, 1, 3, 5})));
  // Space-to-depth's permutation and a last axis that moves are not.
  EXPECT_FALSE(cuda::is_patch_permutation(transpose_shape({2, 3, 16, 14, 16, 14}, {0, 1, 3, 5, 2, 4})));
  EXPECT_FALSE(cuda::is_patch_permutation(transpose_shape({2, 3, 16, 14, 16, 14}, {0, 2, 4, 1, 5, 3})));
  // A broadcast input is not.
  cuda::CopyShape b = transpose_shape({2, 3, 16, 14, 16, 14}, {0, 2, 4, 1, 3, 5});
  b.in_dim[0] = 1;
  EXPECT_FALSE(cuda::is_patch_permutation(b));
}

TEST_P(Patchify, PatchesMatchTheCpuEngineWithTheKernelAndWithout) {
  struct Case { int64_t n, c, hp, p, wp, q; const char* what; };
  for (const Case k : {Case{2, 3, 2, 14, 3, 14, "DINOv2's 14x14 patches"}, Case{1, 3, 2, 16, 3, 16, "ViT's 16x16"},
                       Case{2, 4, 2, 5, 5, 3, "5x3 patches, odd row bytes"}, Case{1, 8, 2, 16, 6, 16, "a row over two blocks (fp32)"},
                       Case{1, 64, 2, 16, 2, 16, "a patch larger than the tile"}}) {
    SCOPED_TRACE(k.what);
    const Graph g = patches(k.n, k.c, k.hp, k.p, k.wp, k.q);
    expect_matches_cpu(g, GetParam());
    ScopedEnv general("SLUICE_CUDA_PATCHIFY", "0");
    expect_matches_cpu(g, GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, Patchify, ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
