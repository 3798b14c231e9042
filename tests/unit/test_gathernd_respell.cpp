// GatherND with indices that are the output's own coordinates (model/batch_adapt.cpp, grid_gather_nd):
// the dynamo exporter's spelling of transformers 5's padding mask, `mask[batch_idx, kv_idx]`, is
// respelled as a Reshape (and an Expand where an index axis is not one of the mask's), which the
// batch-axis check follows; the numbers on the CPU engine are the GatherND's.  Any other GatherND stays
// as it is, and one that selects along the batch is still refused naming the op.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "model/batch_adapt.h"
#include "model/batch_axis.h"
#include "model/passes.h"
#include "model/prepare.h"
#include "support/graph_builder.h"
#include "test_cpu_run.h"
#include "test_model_util.h"

namespace sluice {
namespace {

using testsupport::f32;
using testsupport::set_int;
using test::count_ops;

constexpr int64_t B = 3, L = 5;

std::string refusal(const Graph& g, int64_t batch = B) { return test::batch_refusal(g, batch); }

// Indices [B, 1, rows, L, 2] whose tuple at (b, 0, r, l) is tuple(b, r, l), as torch's Range/Expand grids
// fold once the shapes are fixed.
std::vector<int64_t> indices(int64_t rows, const std::function<std::pair<int64_t, int64_t>(int64_t, int64_t, int64_t)>& tuple) {
  std::vector<int64_t> v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < L; ++l) {
        const auto t = tuple(b, r, l);
        v.push_back(t.first);
        v.push_back(t.second);
      }
  return v;
}

// mask x [B, L] -> GatherND(x, idx [B, 1, rows, L, 2]) -> y [B, 1, rows, L].
Graph mask_gather(int64_t rows, const std::vector<int64_t>& idx) {
  testsupport::GraphBuilder b({B, L});
  b.constant_i("idx", {B, 1, rows, L, 2}, idx);
  b.node("GatherND", {"x", "idx"}, {f32("y", {B, 1, rows, L})});
  b.output("y");
  return b.g;
}

std::pair<int64_t, int64_t> identity(int64_t b, int64_t, int64_t l) { return {b, l}; }

TEST(GatherNDRespell, TheDynamoMaskGatherIsAViewOfTheMask) {
  const Graph before = mask_gather(1, indices(1, identity));
  EXPECT_NE(refusal(before).find("GatherND"), std::string::npos) << refusal(before);
  Graph after = before;
  EXPECT_EQ(respell_flat_gathers(after), 1);
  EXPECT_EQ(count_ops(after, "GatherND"), 0);
  EXPECT_EQ(count_ops(after, "Reshape"), 1);
  EXPECT_EQ(count_ops(after, "Expand"), 0);
  EXPECT_EQ(after.value("y")->shape, (Shape{B, 1, 1, L}));
  EXPECT_EQ(refusal(after), "");
  const std::vector<float> want = test::cpu_first_output(before), got = test::cpu_first_output(after);
  EXPECT_EQ(got, want);
  // ... and the mask itself, element for element.
  EXPECT_EQ(got, test::ramp(static_cast<std::size_t>(B * L), 5));
}

TEST(GatherNDRespell, AnIndexAxisThatIsNotTheMasksBroadcastsWithAnExpand) {
  // mask[b, l] for every query row r: [B, 1, 4, L].
  const Graph before = mask_gather(4, indices(4, identity));
  Graph after = before;
  EXPECT_EQ(respell_flat_gathers(after), 1);
  EXPECT_EQ(count_ops(after, "GatherND"), 0);
  EXPECT_EQ(count_ops(after, "Expand"), 1);
  EXPECT_EQ(after.value("y")->shape, (Shape{B, 1, 4, L}));
  EXPECT_EQ(refusal(after), "");
  EXPECT_EQ(test::cpu_first_output(after), test::cpu_first_output(before));
}

TEST(GatherNDRespell, NegativeIndicesCountFromTheEnd) {
  const Graph before = mask_gather(1, indices(1, [](int64_t b, int64_t, int64_t l) {
    return std::pair<int64_t, int64_t>{b - B, l % 2 ? l - L : l};
  }));
  Graph after = before;
  EXPECT_EQ(respell_flat_gathers(after), 1);
  EXPECT_EQ(count_ops(after, "GatherND"), 0);
  EXPECT_EQ(test::cpu_first_output(after), test::cpu_first_output(before));
}

// Grids that are not the identity: each GatherND stays, computing what it did.
TEST(GatherNDRespell, IndicesThatAreNotTheOutputsCoordinatesStay) {
  const std::vector<std::pair<const char*, std::function<std::pair<int64_t, int64_t>(int64_t, int64_t, int64_t)>>> grids = {
      {"keys reversed", [](int64_t b, int64_t, int64_t l) { return std::pair<int64_t, int64_t>{b, L - 1 - l}; }},
      {"one tuple off", [](int64_t b, int64_t, int64_t l) { return std::pair<int64_t, int64_t>{b, b == 2 && l == 3 ? 4 : l}; }},
      {"key 0 for all", [](int64_t b, int64_t, int64_t) { return std::pair<int64_t, int64_t>{b, 0}; }},
      {"samples rotated", [](int64_t b, int64_t, int64_t l) { return std::pair<int64_t, int64_t>{(b + 1) % B, l}; }},
      {"sample 0 for all", [](int64_t, int64_t, int64_t l) { return std::pair<int64_t, int64_t>{0, l}; }},
  };
  for (const auto& [what, tuple] : grids) {
    const Graph before = mask_gather(1, indices(1, tuple));
    Graph after = before;
    EXPECT_EQ(respell_flat_gathers(after), 0) << what;
    EXPECT_EQ(count_ops(after, "GatherND"), 1) << what;
    EXPECT_EQ(test::cpu_first_output(after), test::cpu_first_output(before)) << what;
  }
  // The samples' rows read by other samples: still refused, naming the op.
  const Graph mixed = mask_gather(1, indices(1, grids[3].second));
  Graph kept = mixed;
  respell_flat_gathers(kept);
  const std::string why = refusal(kept);
  EXPECT_NE(why.find("GatherND"), std::string::npos) << why;
  EXPECT_NE(why.find("selects along the batch axis"), std::string::npos) << why;
}

TEST(GatherNDRespell, TransposedGridsBatchDimsAndRunTimeIndicesStay) {
  // x [B, B]: the tuple (j, i) at (i, j) reads the transpose, not a view.
  {
    testsupport::GraphBuilder b({B, B});
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < B; ++j) idx.insert(idx.end(), {j, i});
    b.constant_i("idx", {B, B, 2}, idx);
    b.node("GatherND", {"x", "idx"}, {f32("y", {B, B})});
    b.output("y");
    Graph g = b.g;
    EXPECT_EQ(respell_flat_gathers(g), 0);
    EXPECT_EQ(count_ops(g, "GatherND"), 1);
  }
  // batch_dims 1: the indices address within each sample; not this pattern.
  {
    testsupport::GraphBuilder b({B, L});
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t l = 0; l < L; ++l) idx.push_back(l);
    b.constant_i("idx", {B, L, 1}, idx);
    set_int(b.node("GatherND", {"x", "idx"}, {f32("y", {B, L})}), "batch_dims", 1);
    b.output("y");
    Graph g = b.g;
    EXPECT_EQ(respell_flat_gathers(g), 0);
    EXPECT_EQ(count_ops(g, "GatherND"), 1);
  }
  // Indices computed at run time are not proven.
  {
    testsupport::GraphBuilder b({B, L});
    b.node("Cast", {"x"}, {testsupport::typed("i", DType::I64, {B, L})}).attrs["to"] = Attribute::of_int(7);
    b.node("Unsqueeze", {"i", "ax"}, {testsupport::typed("idx", DType::I64, {B, L, 1})});
    b.constant_i("ax", {1}, {2});
    b.node("GatherND", {"x", "idx"}, {f32("y", {B, L, L})});
    b.output("y");
    Graph g = b.g;
    EXPECT_EQ(respell_flat_gathers(g), 0);
    EXPECT_EQ(count_ops(g, "GatherND"), 1);
  }
}

// A static-batch export (the model's batch fixed at 2) re-specialized to batch 4: the view's target
// carries the batch and is rewritten with the others; each sample still reads its own mask row.
TEST(GatherNDRespell, AStaticBatchMaskGatherIsReSpecialized) {
  constexpr int64_t b0 = 2, batch = 4;
  test::GraphBuilder b;
  b.input("x", {b0, L}).output("y");
  std::vector<int64_t> idx;
  for (int64_t s = 0; s < b0; ++s)
    for (int64_t l = 0; l < L; ++l) idx.insert(idx.end(), {s, l});
  b.g.constants["idx"] = Tensor::from(DType::I64, Shape{b0, 1, 1, L, 2}, idx);
  b.node("GatherND", {"x", "idx"}, {"y"});
  PrepareOptions o;
  o.batch_size = batch;
  o.sample_shape = {L};
  o.static_batch = StaticBatch::Respecialize;
  const Graph g = prepare_graph(b.g, o);
  EXPECT_EQ(count_ops(g, "GatherND"), 0);
  EXPECT_EQ(g.outputs.at(0).shape, (Shape{batch, 1, 1, L}));
  EXPECT_EQ(test::cpu_first_output(g), test::ramp(static_cast<std::size_t>(batch * L), 5));
}

}  // namespace
}  // namespace sluice
