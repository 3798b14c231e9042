// The strided stem's input as one step (ops_layout.cpp, SLUICE_CUDA_SPACE_TO_DEPTH): a 7x7/2 and a
// 7x7/4 stem convolution, rewritten by model/fuse_patches.cpp into Pad -> Reshape -> Transpose ->
// Reshape -> a stride-1 convolution, on odd sizes (so the zero padding differs per side), against
// the CPU engine at every precision with the step on and off and with the 12 channels padded to 16
// or not; which steps the builder makes of it
// (no device needed); and the chain read by something other than a convolution (written NCHW).
#include <algorithm>

#include "gpu_test_util.h"
#include "model/passes.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

int count(const std::vector<std::string>& v, const std::string& k) { return static_cast<int>(std::count(v.begin(), v.end(), k)); }

// x [n, 3, h, w] -> Conv k x k / s, pads p (+ Relu) -> y, with the stem rewrite applied.
Graph stem(int64_t n, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p, bool relu) {
  GraphBuilder b({n, 3, h, w});
  const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1, o = 16;
  b.random_f("w", {o, 3, k, k}, 11, -0.3f, 0.3f).random_f("bias", {o}, 12);
  Node& c = b.node("Conv", {"x", "w", "bias"}, {f32(relu ? "c" : "y", {n, o, oh, ow})});
  set_ints(c, "kernel_shape", {k, k});
  set_ints(c, "strides", {s, s});
  set_ints(c, "pads", {p, p, p, p});
  if (relu) b.node("Relu", {"c"}, {f32("y", {n, o, oh, ow})});
  b.output("y");
  Graph g = b.g;
  EXPECT_EQ(fuse_patch_convolutions(g), 1);
  return g;
}

// The same chain with a Sigmoid reading the space-to-depth tensor beside the convolution (its
// output a second graph output): the step then writes that tensor NCHW.
Graph chain_read_elsewhere(int64_t n, int64_t h, int64_t w) {
  Graph g = stem(n, h, w, 7, 2, 3, false);
  std::string depth;
  for (const Node& nd : g.nodes)
    if (nd.op == "Reshape" && g.value(nd.outputs[0]) && g.value(nd.outputs[0])->shape.size() == 4) depth = nd.outputs[0];
  EXPECT_FALSE(depth.empty());
  Node sig;
  sig.op = "Sigmoid";
  sig.name = "read_elsewhere";
  sig.inputs = {depth};
  sig.outputs = {"z"};
  ValueInfo z = *g.value(depth);
  z.name = "z";
  g.values["z"] = z;
  g.nodes.push_back(sig);
  g.outputs.insert(g.outputs.begin(), z);
  return g;
}

class SpaceToDepth : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST(SpaceToDepthLowering, TheStemChainIsOneStepThatWritesTheConvolutionsLayout) {
  const Graph g = stem(2, 29, 34, 7, 2, 3, true);
  const auto on = step_kinds(g, Precision::BF16);
  EXPECT_EQ(count(on, "SpaceToDepth"), 1);
  EXPECT_EQ(count(on, "Pad"), 0);
  EXPECT_EQ(count(on, "Transpose"), 0);
  // The only layout change left is the NCHW graph output's; the stem's input needs none.
  EXPECT_LE(count(on, "Layout"), 1);
  const auto off = step_kinds_with(g, Precision::BF16, "SLUICE_CUDA_SPACE_TO_DEPTH", "0");
  EXPECT_EQ(count(off, "SpaceToDepth"), 0);
  EXPECT_EQ(count(off, "Pad"), 2);   // the spatial padding and the 4 zero channels (12 -> 16)
  EXPECT_EQ(count(off, "Transpose"), 1);
  EXPECT_GT(count(off, "Layout"), count(on, "Layout"));
  // Read by a Sigmoid as well: still one step (written NCHW, the convolution's layout change after it).
  const auto elsewhere = step_kinds(chain_read_elsewhere(2, 29, 34), Precision::BF16);
  EXPECT_EQ(count(elsewhere, "SpaceToDepth"), 1);
  EXPECT_EQ(count(elsewhere, "Pad"), 1);   // the zero channels, a step of their own when the 12 are read elsewhere
}

TEST_P(SpaceToDepth, StemsMatchTheCpuEngineWithTheStepAndWithout) {
  struct Case { int64_t n, h, w, k, s, p; bool relu; };
  for (const Case c : {Case{2, 29, 34, 7, 2, 3, true}, Case{1, 37, 30, 7, 4, 3, false}, Case{3, 16, 16, 5, 2, 0, false}}) {
    SCOPED_TRACE(str(c.k, "x", c.k, "/", c.s, " on ", c.h, "x", c.w));
    const Graph g = stem(c.n, c.h, c.w, c.k, c.s, c.p, c.relu);
    expect_matches_cpu(g, GetParam());
    ScopedEnv node_by_node("SLUICE_CUDA_SPACE_TO_DEPTH", "0");
    expect_matches_cpu(g, GetParam());
  }
  // The 12 channels unpadded (SLUICE_STEM_S2D_PAD=0, read when the graph is rewritten).
  ScopedEnv unpadded("SLUICE_STEM_S2D_PAD", "0");
  expect_matches_cpu(stem(2, 29, 34, 7, 2, 3, true), GetParam());
}

TEST_P(SpaceToDepth, AChainReadBeyondTheConvolutionMatchesTheCpuEngine) {
  expect_matches_cpu(chain_read_elsewhere(2, 21, 18), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Precisions, SpaceToDepth,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
