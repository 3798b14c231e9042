#pragma once
// Attention blocks as the exporters write them around sluice.Attention (what fuse_attention leaves),
// for the tests of the attention layout pass (tests/unit/test_attention_layout.cpp) and of the
// CUDA engine's strided attention (tests/gpu/test_cuda_attention_layout.cpp):
//   Split   timm: qkv [N, S, 3HD] -> Reshape [N, S, 3, H, D] -> Transpose (2, 0, 3, 1, 4) -> Split
//           on axis 0 -> Squeeze -> q, k, v [N, H, S, D]
//   Gather  the same with Gather(axis 0, i) in place of Split and Squeeze (unbind)
//   Three   transformers' CLIP: three projections, each Reshape [N, S, H, D] + Transpose (0, 2, 1, 3)
// then y [N, H, S, D] -> Transpose (0, 2, 1, 3) -> Reshape [N, S, HD] -> the output projection.
#include <cmath>
#include <string>

#include "support/graph_builder.h"

namespace sluice::testsupport {

enum class QkvSpelling { Split, Gather, Three };

struct AttentionBlock {
  int64_t n = 2, s = 17, h = 2, d = 16;
  QkvSpelling spelling = QkvSpelling::Split;
  bool bias = false;   // a constant [H, S, S] bias (relative positions), one per head
  uint32_t seed = 1;
};

// x [N, S, C] (C = 24) -> attention block -> "out" [N, S, C].
inline Graph attention_block_graph(const AttentionBlock& c) {
  const int64_t n = c.n, s = c.s, h = c.h, d = c.d, e = h * d, ch = 24;
  GraphBuilder b({n, s, ch});
  const Shape heads = {n, h, s, d};
  std::vector<std::string> qkv;
  if (c.spelling == QkvSpelling::Three) {
    const char* names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      const std::string p = names[i];
      b.constant_f("w" + p, {ch, e}, random_values(static_cast<std::size_t>(ch * e), c.seed + i, -0.4f, 0.4f));
      b.node("MatMul", {"x", "w" + p}, {f32(p + "_proj", {n, s, e})});
      b.constant_i(p + "_shape", {4}, {n, s, h, d});
      b.node("Reshape", {p + "_proj", p + "_shape"}, {f32(p + "_split", {n, s, h, d})});
      set_ints(b.node("Transpose", {p + "_split"}, {f32(p + "_heads", heads)}), "perm", {0, 2, 1, 3});
      qkv.push_back(p + "_heads");
    }
  } else {
    b.constant_f("wqkv", {ch, 3 * e}, random_values(static_cast<std::size_t>(ch * 3 * e), c.seed, -0.4f, 0.4f));
    b.constant_f("bqkv", {3 * e}, random_values(static_cast<std::size_t>(3 * e), c.seed + 1, -0.2f, 0.2f));
    b.node("MatMul", {"x", "wqkv"}, {f32("qkv_product", {n, s, 3 * e})});
    b.node("Add", {"qkv_product", "bqkv"}, {f32("qkv", {n, s, 3 * e})});
    b.constant_i("qkv_shape", {5}, {n, s, 3, h, d});
    b.node("Reshape", {"qkv", "qkv_shape"}, {f32("qkv_split", {n, s, 3, h, d})});
    set_ints(b.node("Transpose", {"qkv_split"}, {f32("qkv_heads", {3, n, h, s, d})}), "perm", {2, 0, 3, 1, 4});
    if (c.spelling == QkvSpelling::Split) {
      b.constant_i("parts", {3}, {1, 1, 1});
      set_int(b.node("Split", {"qkv_heads", "parts"},
                     {f32("q1", {1, n, h, s, d}), f32("k1", {1, n, h, s, d}), f32("v1", {1, n, h, s, d})}),
              "axis", 0);
      b.constant_i("axis0", {1}, {0});
      for (const char* p : {"q", "k", "v"}) {
        b.node("Squeeze", {std::string(p) + "1", "axis0"}, {f32(p, heads)});
        qkv.push_back(p);
      }
    } else {
      for (int i = 0; i < 3; ++i) {
        const std::string p = i == 0 ? "q" : i == 1 ? "k" : "v";
        b.constant_i(p + "_index", {}, {i});
        set_int(b.node("Gather", {"qkv_heads", p + "_index"}, {f32(p, heads)}), "axis", 0);
        qkv.push_back(p);
      }
    }
  }
  if (c.bias) {
    b.constant_f("rel", {h, s, s}, random_values(static_cast<std::size_t>(h * s * s), c.seed + 5, -2.f, 2.f));
    qkv.push_back("rel");
  }
  Node& a = b.node("Attention", qkv, {f32("y", heads)}, "sluice");
  set_float(a, "scale", 1.f / std::sqrt(static_cast<float>(d)));
  set_string(a, "layout", "bhsd");
  set_ints(b.node("Transpose", {"y"}, {f32("y_tokens", {n, s, h, d})}), "perm", {0, 2, 1, 3});
  b.constant_i("y_shape", {3}, {n, s, e});
  b.node("Reshape", {"y_tokens", "y_shape"}, {f32("y_rows", {n, s, e})});
  b.constant_f("wo", {e, ch}, random_values(static_cast<std::size_t>(e * ch), c.seed + 9, -0.4f, 0.4f));
  b.node("MatMul", {"y_rows", "wo"}, {f32("out", {n, s, ch})});
  b.output("out");
  return b.g;
}

}  // namespace sluice::testsupport
