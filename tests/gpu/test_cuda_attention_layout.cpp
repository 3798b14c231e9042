// sluice.Attention with layout "strided" (model/attention_layout.cpp) on the CUDA engine: q, k and v
// read straight from the qkv projection (or three projections) and the output written as the
// output projection's input, on cuDNN's fused attention and on the per-head batched GEMMs, at every
// precision, against the CPU engine running the graph as the exporters wrote it (views packed by
// their own nodes).  Odd token counts; head sizes that cuDNN takes (multiples of 8) and one it does
// not (the GEMM path must take it).
#include <cmath>
#include <cstdlib>

#include "gpu_test_util.h"
#include "model/passes.h"
#include "support/attention_layout_graphs.h"

using namespace sluice;
using namespace sluice::gputest;
using sluice::testsupport::attention_block_graph;
using sluice::testsupport::AttentionBlock;
using sluice::testsupport::QkvSpelling;

namespace {

Graph rewired(const AttentionBlock& c) {
  Graph g = attention_block_graph(c);
  EXPECT_EQ(attention_layout(g), 1);
  infer_shapes(g);
  return g;
}

const AttentionBlock kBlocks[] = {
    {2, 50, 3, 64, QkvSpelling::Split, false, 1},    // DeiT-like: 3 heads of 64, 50 tokens
    {3, 37, 2, 24, QkvSpelling::Gather, true, 2},    // a per-head bias (BEiT-like), unbind spelling
    {2, 65, 4, 32, QkvSpelling::Three, false, 3},    // CLIP's three projections
    {2, 19, 3, 20, QkvSpelling::Split, false, 4},    // a head size cuDNN does not take
    {1, 300, 2, 16, QkvSpelling::Split, true, 5},    // long rows (the softmax kernel's looped path)
};

class AttentionLayout : public ::testing::TestWithParam<Precision> {};

TEST_P(AttentionLayout, StridedOperandsMatchThePackedGraphOnBothPaths) {
  const Precision p = GetParam();
  for (const char* path : {"gemm", "cudnn", "window", "auto"}) {
    ScopedEnv env("SLUICE_CUDA_ATTENTION", path);
    for (const AttentionBlock& c : kBlocks) {
      SCOPED_TRACE(str(path, " n ", c.n, " s ", c.s, " h ", c.h, " d ", c.d, " spelling ", static_cast<int>(c.spelling),
                       c.bias ? " bias" : ""));
      const Graph packed = attention_block_graph(c);
      const Graph g = rewired(c);
      expect_matches_reference(g, p, [&](const Tensor& x) { return run_cpu(packed, x); });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, AttentionLayout,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });

// The lowering of the rewired block has no Transpose, Split or copy step left: the projections'
// GEMMs, the attention and the output projection (no device needed).
TEST(AttentionLayoutLowering, NoDataMovementStepsAroundTheAttention) {
  for (const AttentionBlock& c : kBlocks) {
    SCOPED_TRACE(str("s ", c.s, " h ", c.h, " d ", c.d));
    const std::vector<std::string> before = step_kinds(attention_block_graph(c), Precision::BF16);
    const std::vector<std::string> after = step_kinds(rewired(c), Precision::BF16);
    int moved_before = 0, moved_after = 0, attention = 0;
    for (const auto& k : before) moved_before += k == "Transpose" || k == "Split" || k == "Gather" || k == "Copy";
    for (const auto& k : after) {
      moved_after += k == "Transpose" || k == "Split" || k == "Gather" || k == "Copy";
      attention += k == "Attention";
    }
    EXPECT_GT(moved_before, 0);
    EXPECT_EQ(moved_after, 0);
    EXPECT_EQ(attention, 1);
  }
}

// cuDNN's fused attention takes the strided views itself where their rows are 16-byte aligned: the
// profile names the path the step took.
TEST(AttentionLayoutCudnn, AlignedViewsRunOnCudnnsFusedAttention) {
  SLUICE_REQUIRE_GPU();
  ScopedEnv env("SLUICE_CUDA_ATTENTION", "cudnn");
  for (const AttentionBlock& c : kBlocks) {
    SCOPED_TRACE(str("s ", c.s, " h ", c.h, " d ", c.d));
    const Graph g = rewired(c);
    EngineOptions o;
    o.precision = Precision::BF16;
    o.io_sets = 1;
    auto e = create_cuda_engine(g, o);
    ProfileOptions po;
    po.replays = 1;
    po.peaks = false;
    std::string kind;
    for (const auto& st : e->profile(po).steps)
      if (st.kind.rfind("Attn", 0) == 0) kind = st.kind;
    EXPECT_EQ(kind, c.d % 8 == 0 ? "Attn cuDNN" : "Attn GEMM");
  }
}

}  // namespace
