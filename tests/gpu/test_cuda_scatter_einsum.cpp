// ScatterND with a reduction (duplicate indices included), Einsum with a repeated letter in one
// operand (a diagonal), GatherND over two batch dims and Resize with antialias, on the CUDA engine
// against the CPU engine (itself checked against ONNX Runtime, tests/python) at every precision.
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class ScatterEinsum : public ::testing::TestWithParam<Precision> {};

}  // namespace

TEST_P(ScatterEinsum, ScatterNDAddMulMaxMinCombineEveryUpdateDuplicatesIncluded) {
  const Precision p = GetParam();
  for (const char* reduction : {"add", "mul", "max", "min"}) {
    SCOPED_TRACE(reduction);
    GraphBuilder b({4, 5, 6});
    // Rows 3 and 1, row 3 twice; then single elements, (2, 2) three times.
    b.constant_i("rows", {3, 1}, {3, 1, 3}).random_f("slices", {3, 5, 6}, 27, 0.5f, 1.5f);
    b.constant_i("points", {4, 2}, {0, 4, 2, 2, 2, 2, 2, 2}).random_f("vectors", {4, 6}, 28, 0.5f, 1.5f);
    Node& a = b.node("ScatterND", {"x", "rows", "slices"}, {f32("a", {4, 5, 6})});
    set_string(a, "reduction", reduction);
    Node& y = b.node("ScatterND", {"a", "points", "vectors"}, {f32("y", {4, 5, 6})});
    set_string(y, "reduction", reduction);
    b.output("a").output("y");
    CompareOptions c;
    c.lo = 0.5f;   // products of a few factors near 1 stay in range
    c.hi = 1.5f;
    expect_matches_cpu(b.g, p, c);
  }
}

TEST_P(ScatterEinsum, ScatterNDAddOnInt64DataCountsDuplicates) {
  const Precision p = GetParam();
  GraphBuilder b({3, 4});
  b.constant_i("zeros", {5}, {0, 0, 0, 0, 0}).constant_i("at", {6, 1}, {1, 3, 1, 1, 0, 4}).constant_i("ones", {6}, {1, 1, 1, 1, 1, 1});
  b.node("ScatterND", {"zeros", "at", "ones"}, {typed("counts", DType::I64, {5})});
  set_string(b.g.nodes.back(), "reduction", "add");
  b.node("Concat", {"counts", "counts"}, {typed("y", DType::I64, {10})});
  set_int(b.g.nodes.back(), "axis", 0);
  b.output("y");
  expect_matches_reference(b.g, p, [](const Tensor&) {
    return std::vector<Tensor>{Tensor::from(DType::I64, {10}, std::vector<int64_t>{1, 3, 0, 1, 1, 1, 3, 0, 1, 1})};
  });
}

TEST_P(ScatterEinsum, EinsumWithARepeatedLetterTakesTheDiagonal) {
  const Precision p = GetParam();
  GraphBuilder b({2, 5, 5, 3});
  b.random_f("w", {3, 4}, 31);
  Node& d = b.node("Einsum", {"x"}, {f32("diag", {2, 5, 3})});
  set_string(d, "equation", "biic->bic");
  Node& t = b.node("Einsum", {"x"}, {f32("trace", {2, 3})});
  set_string(t, "equation", "biic->bc");
  Node& m = b.node("Einsum", {"x", "w"}, {f32("prod", {2, 5, 4})});
  set_string(m, "equation", "biic,cj->bij");
  b.output("diag").output("trace").output("prod");
  expect_matches_cpu(b.g, p);
}

TEST_P(ScatterEinsum, GatherNDOverTwoBatchDimsWithSeveralTuplesPerBatch) {
  const Precision p = GetParam();
  GraphBuilder b({2, 3, 4, 5});
  // batch_dims 2: for each of the 2 x 3 batches, a [2, 2] grid of single indices into its [4, 5].
  std::vector<int64_t> idx;
  for (int i = 0; i < 24; ++i) idx.push_back((i * 7) % 9 - 4);   // -4..4: negative ones too
  for (auto& v : idx) v = v >= 4 ? 3 : v;
  b.constant_i("idx", {2, 3, 2, 2, 1}, idx);
  Node& n = b.node("GatherND", {"x", "idx"}, {f32("y", {2, 3, 2, 2, 5})});
  set_int(n, "batch_dims", 2);
  b.output("y");
  expect_matches_cpu(b.g, p);
}

TEST_P(ScatterEinsum, ResizeWithAntialiasMatchesTheCpuEngine) {
  const Precision p = GetParam();
  for (const char* mode : {"linear", "cubic"})
    for (const char* coord : {"half_pixel", "align_corners"})
      for (const Shape& out : {Shape{2, 3, 5, 6}, Shape{2, 3, 30, 9}}) {
        SCOPED_TRACE(std::string(mode) + " " + coord + " to " + shape_str(out));
        GraphBuilder b({2, 3, 24, 31});
        b.constant_i("sizes", {4}, std::vector<int64_t>(out.begin(), out.end()));
        Node& n = b.node("Resize", {"x", "", "", "sizes"}, {f32("y", out)});
        set_string(n, "mode", mode);
        set_string(n, "coordinate_transformation_mode", coord);
        set_int(n, "antialias", 1);
        b.output("y");
        expect_matches_cpu(b.g, p);
      }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ScatterEinsum,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });
