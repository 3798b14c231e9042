// attention_layout (model/attention_layout.cpp): sluice.Attention reads q, k, v through strided views
// of the projections' outputs and writes the output projection's input itself, so the exporters'
// Reshape / Transpose / Split / Gather nodes around attention go; the CPU engine computes what the
// graph did before (the same zoo models and block spellings with the pass off).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "engine/engine.h"
#include "model/onnx_loader.h"
#include "model/passes.h"
#include "model/prepare.h"
#include "support/attention_layout_graphs.h"
#include "test_cpu_run.h"
#include "test_model_util.h"

using namespace sluice;
using sluice::test::count_ops;
using sluice::test::ramp;
using sluice::testsupport::attention_block_graph;
using sluice::testsupport::AttentionBlock;
using sluice::testsupport::QkvSpelling;

namespace {

std::string zoo(const std::string& name) { return std::string(SLUICE_SOURCE_DIR) + "/tests/data/zoo/" + name + ".onnx"; }

// The zoo export prepared at batch 3 (re-specialized from its batch 1), with the pass on or off.
Graph prepare_zoo(const std::string& name, bool layout) {
  setenv("SLUICE_ATTENTION_LAYOUT", layout ? "1" : "0", 1);
  Graph g = load_onnx(zoo(name));
  PrepareOptions o;
  o.batch_size = 3;
  o.sample_shape = Shape(g.inputs.at(0).shape.begin() + 1, g.inputs.at(0).shape.end());
  Graph p = prepare_graph(std::move(g), o);
  unsetenv("SLUICE_ATTENTION_LAYOUT");
  return p;
}

int strided(const Graph& g) {
  int k = 0;
  for (const auto& n : g.nodes) k += n.op == "Attention" && n.get_string("layout", "") == "strided";
  return k;
}

int moves(const Graph& g) {
  int k = 0;
  for (const char* op : {"Transpose", "Split", "Slice", "Gather", "Squeeze"}) k += count_ops(g, op);
  return k;
}

std::vector<std::vector<float>> run_cpu(const Graph& g) { return sluice::test::cpu_outputs(g, 11); }

// max |a - b| / max |b| over every output.
double rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    double scale = 1e-30, diff = 0;
    for (std::size_t j = 0; j < a[i].size() && j < b[i].size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(b[i][j])));
      diff = std::max(diff, static_cast<double>(std::fabs(a[i][j] - b[i][j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

// Every attention block of the timm, transformers and EVA exports reads the projections directly:
// the view nodes between the projections and the output projection are gone, and the CPU engine
// gives what the graph gave before (float32: only the GEMMs' leading dimensions changed).
TEST(AttentionLayout, ZooAttentionReadsTheProjectionsAndTheViewsGo) {
  struct Want {
    const char* name;
    int blocks;
  };
  const Want models[] = {{"timm_deit.dynamo", 2},      {"timm_deit.torchscript", 2}, {"timm_dinov2.dynamo", 2},
                         {"timm_dinov2.torchscript", 2}, {"hf_clip_vision.dynamo", 2}, {"hf_clip_vision.torchscript", 2},
                         {"hf_vit.dynamo", 2},         {"hf_vit.torchscript", 2},    {"hf_dinov2.dynamo", 2},
                         {"hf_deit.torchscript", 2},   {"timm_eva02.dynamo", 2},     {"timm_beit.dynamo", 2},
                         {"hf_siglip_vision.dynamo", 2}};  // re-specialized: the pooling head's probe query
                                                             // is repeated for every sample
  for (const Want& m : models) {
    SCOPED_TRACE(m.name);
    if (!std::filesystem::exists(zoo(m.name))) {
      ADD_FAILURE() << "missing " << zoo(m.name);
      continue;
    }
    const Graph on = prepare_zoo(m.name, true), off = prepare_zoo(m.name, false);
    EXPECT_EQ(strided(on), m.blocks);
    EXPECT_EQ(strided(off), 0);
    EXPECT_EQ(count_ops(on, "Attention"), count_ops(off, "Attention"));
    // Two Transposes or more per block (q, k, v's and the output's) at least.
    EXPECT_LE(moves(on) + 2 * m.blocks, moves(off)) << moves(on) << " view nodes left of " << moves(off);
    EXPECT_LE(rel_diff(run_cpu(on), run_cpu(off)), 1e-5);
  }
}

// The timm exports lose every view node: the attention reads the qkv projection [B, S, 3E] and
// writes the output projection's input [B, S, E].
TEST(AttentionLayout, TimmBlocksReadThePackedQkvProjection) {
  const Graph g = prepare_zoo("timm_deit.dynamo", true);
  int seen = 0;
  for (const auto& n : g.nodes) {
    if (n.op != "Attention") continue;
    ++seen;
    EXPECT_EQ(n.inputs[0], n.inputs[1]);
    EXPECT_EQ(n.inputs[0], n.inputs[2]);
    const int64_t e = 32, d = 16;   // the zoo's tiny DeiT: 2 heads of 16
    EXPECT_EQ(n.get_ints("q_view"), (std::vector<int64_t>{0, d, 3 * e}));
    EXPECT_EQ(n.get_ints("k_view"), (std::vector<int64_t>{e, d, 3 * e}));
    EXPECT_EQ(n.get_ints("v_view"), (std::vector<int64_t>{2 * e, d, 3 * e}));
    EXPECT_EQ(n.get_ints("y_view"), (std::vector<int64_t>{0, d, e}));
    EXPECT_EQ(g.value(n.inputs[0])->shape, (Shape{3, 17, 3 * e}));
    EXPECT_EQ(g.value(n.outputs[0])->shape, (Shape{3, 17, e}));
  }
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(moves(g), 2);   // the patch embedding's permutation and the class token's Gather only
}

// torchvision's ViT is sequence-first ([S, B, 3E]): the tensors behind the views do not carry the
// batch on axis 0, so without push_transposes (which sinks the Transpose to [S, B, E] below the
// in-projection: tests/unit/test_push_transposes.cpp) its attention keeps its packed operands.
TEST(AttentionLayout, SequenceFirstTensorsAreLeftAsTheyAre) {
  setenv("SLUICE_PUSH_TRANSPOSES", "0", 1);
  const Graph g = prepare_zoo("tv_vit.dynamo", true);
  unsetenv("SLUICE_PUSH_TRANSPOSES");
  EXPECT_EQ(count_ops(g, "Attention"), 2);
  EXPECT_EQ(strided(g), 0);
}

// Swin's shifted windows add a bias per window and head ([nW x H] matrices): those blocks read the
// qkv projection too (the window kernel and the GEMMs take any bias period), unless
// SLUICE_ATTENTION_LAYOUT_WINDOWS=0 keeps them packed; the model computes what it did either way.
TEST(AttentionLayout, BiasesPerWindowReadTheProjectionsToo) {
  for (const char* name : {"hf_swin.dynamo", "tv_swin.dynamo"}) {
    for (bool windows : {true, false}) {
      SCOPED_TRACE(str(name, windows ? " windows on" : " windows off"));
      setenv("SLUICE_ATTENTION_LAYOUT_WINDOWS", windows ? "1" : "0", 1);
      const Graph on = prepare_zoo(name, true);
      unsetenv("SLUICE_ATTENTION_LAYOUT_WINDOWS");
      const Graph off = prepare_zoo(name, false);
      int window_bias = 0, window_strided = 0;
      for (const auto& n : on.nodes)
        if (n.op == "Attention" && n.inputs.size() > 3) {
          const Tensor* b = on.constant(n.inputs[3]);
          ASSERT_NE(b, nullptr);
          if (b->shape[0] > 2) {   // nW x H matrices (the zoo's Swin: 1 or 2 heads)
            ++window_bias;
            window_strided += n.get_string("layout", "") == "strided";
          }
        }
      EXPECT_GT(window_bias, 0);
      if (windows) EXPECT_EQ(window_strided, window_bias);
      else EXPECT_EQ(window_strided, 0);
      EXPECT_LE(rel_diff(run_cpu(on), run_cpu(off)), 1e-5);
    }
  }
}

TEST(AttentionLayout, TheSwitchTurnsThePassOff) {
  const Graph g = prepare_zoo("timm_deit.dynamo", false);
  EXPECT_EQ(strided(g), 0);
  EXPECT_EQ(count_ops(g, "Attention"), 2);
}

// The exporters' three spellings at sizes that are not powers of two, with and without a per-head
// bias: the pass removes every view node and the CPU engine's strided reads give the same outputs.
TEST(AttentionLayout, EverySpellingRunsOnTheCpuEngineAsBefore) {
  const AttentionBlock blocks[] = {{2, 17, 2, 16, QkvSpelling::Split, false, 1},
                                   {3, 13, 3, 5, QkvSpelling::Gather, true, 2},
                                   {2, 9, 4, 7, QkvSpelling::Three, false, 3},
                                   {1, 11, 3, 6, QkvSpelling::Split, true, 4}};
  for (const AttentionBlock& c : blocks) {
    SCOPED_TRACE(str("n ", c.n, " s ", c.s, " h ", c.h, " d ", c.d, " spelling ", static_cast<int>(c.spelling)));
    const Graph before = attention_block_graph(c);
    Graph after = before;
    ASSERT_EQ(attention_layout(after), 1);
    infer_shapes(after);
    EXPECT_EQ(strided(after), 1);
    EXPECT_EQ(moves(after), 0);
    EXPECT_EQ(count_ops(after, "Reshape"), 0);
    EXPECT_LE(rel_diff(run_cpu(after), run_cpu(before)), 1e-5);
  }
}

// k given transposed as a tensor of its own ([N, H, D, S_kv], computed, not a view): its head-size
// columns are not contiguous, which no engine reads strided, so the block keeps its packed layout.
TEST(AttentionLayout, AComputedTransposedKeyKeepsTheBlockPacked) {
  AttentionBlock c{2, 9, 2, 8, QkvSpelling::Three, false, 5};
  Graph g = attention_block_graph(c);
  std::vector<Node> nodes;
  for (auto& n : g.nodes) {
    if (n.op == "Attention") {
      Node t;
      t.op = "Transpose";
      t.name = "k_swap";
      t.inputs = {"k_heads"};
      t.outputs = {"k_swapped"};
      t.attrs["perm"] = Attribute::of_ints({0, 1, 3, 2});
      nodes.push_back(t);
      Node m;
      m.op = "Mul";
      m.name = "k_times_one";
      m.inputs = {"k_swapped", "one"};
      m.outputs = {"kt"};
      nodes.push_back(m);
      n.inputs[1] = "kt";
      n.attrs["layout"] = Attribute::of_string("bhds");
    }
    nodes.push_back(n);
  }
  g.nodes = nodes;
  g.constants["one"] = Tensor::from(DType::F32, Shape{}, std::vector<float>{1.f});
  g.values["one"] = ValueInfo{"one", DType::F32, {}};
  g.values["k_swapped"] = ValueInfo{"k_swapped", DType::F32, {c.n, c.h, c.d, c.s}};
  g.values["kt"] = ValueInfo{"kt", DType::F32, {c.n, c.h, c.d, c.s}};
  Graph after = g;
  EXPECT_EQ(attention_layout(after), 0);
  EXPECT_EQ(strided(after), 0);
  EXPECT_EQ(count_ops(after, "Transpose"), count_ops(g, "Transpose"));
}

}  // namespace
