// Patch embeddings as one matrix product, and the layout chains around them.
//
// A vision transformer cuts the image into p x p patches with a convolution whose kernel equals its
// stride (16x16/16 on 3 channels in ViT-B, 14x14/14 in DINOv2, 4x4/4 in Swin and ConvNeXt).
// Convolution kernels tile the channels, and with three of them and a large kernel cuDNN ran such a
// layer at 2 % of the H200's GEMM rate (BENCHMARKS.md).  The patches do not overlap, so the
// convolution is a permutation of the input followed by one GEMM with K = C x p x p:
//   x [N, C, H, W] -> Reshape [N, C, H/p, p, W/p, p] -> Transpose (0, 2, 4, 1, 3, 5)
//     -> Reshape [N, H/p x W/p, C x p x p] -> MatMul W' [C x p x p, O] (+ bias [O])
//     -> Transpose (0, 2, 1) -> Reshape [N, O, H/p, W/p]
// The models then flatten the grid and move the channels last again (Reshape [N, O, H/p x W/p],
// Transpose (0, 2, 1)); where they do, the product is their result and neither the grid nor those
// two steps are written.  Reshape targets copy the batch (0), so the rewrite holds at any batch.
// SLUICE_PATCH_GEMM=0 keeps the convolution.
//
// A strided stem on a few channels (ResNet's 7x7/2 on 3 channels) is the same problem with
// overlapping windows: cuDNN ran DeepLabV3-R50's at 2 % of the GEMM rate.  Space-to-depth turns it
// into a stride-1 convolution on s x s as many channels with a kernel ceil(k / s) wide, the weights
// zero where the s-aligned kernel reaches past the original one:
//   x [N, C, H, W] -> Pad (the convolution's pads, then up to a multiple of s)
//     -> Reshape [N, C, H'/s, s, W'/s, s] -> Transpose (0, 1, 3, 5, 2, 4) -> Reshape [N, C s s, H'/s, W'/s]
//     -> Conv (or FusedConv, its bias, residual and activation kept) k' x k', stride 1, no pads
// with W'[o, (c, bh, bw), a, b] = W[o, c, s a + bh, s b + bw].  SLUICE_STEM_S2D=0 keeps the stem.
// Where C s s is no multiple of 8 (ResNet's 3 x 2 x 2 = 12), a Pad adds zero channels up to one
// (16), with zero weights for them: cuDNN's channels-last bf16 kernels ran the 12-channel 4x4
// convolution at 97 TFLOP/s and the 16-channel one at 160 on the H200 (BENCHMARKS.md).
// SLUICE_STEM_S2D_PAD=0 leaves the channels as they are.
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

// Few channels: where the convolution kernels lose to a GEMM (the image stems of transformers).
constexpr int64_t kMaxPatchChannels = 8;

// W [O, K] (row-major, any element size) as W^T [K, O].
Tensor transposed_2d(const Tensor& w, int64_t rows, int64_t cols) {
  Tensor t(w.dtype, Shape{cols, rows});
  const std::size_t e = dtype_size(w.dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(t.bytes.data() + static_cast<std::size_t>(c * rows + r) * e,
                  w.bytes.data() + static_cast<std::size_t>(r * cols + c) * e, e);
  return t;
}

// The one node that reads `name` (and no graph output does), when it is a plain `op`: its index or -1.
int sole_reader(const Graph& g, const std::string& name, const char* op) {
  if (g.consumers(name) != 1 || is_graph_output(g, name)) return -1;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (in == name) return g.nodes[i].op == op && g.nodes[i].domain.empty() ? static_cast<int>(i) : -1;
  return -1;
}

Node make_node(const Graph& g, const std::string& op, const std::string& base, std::vector<std::string> inputs,
               const std::string& output) {
  Node n;
  n.op = op;
  n.name = unique_tensor_name(g, base);
  n.inputs = std::move(inputs);
  n.outputs = {output};
  return n;
}

// The rewrite of one Conv node, or false when it is not a patch embedding.
bool rewrite_patch_conv(Graph& g, std::size_t index) {
  const Node conv = g.nodes[index];
  if (conv.op != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1) return false;
  const Tensor* w = g.constant(conv.input(1));
  const Tensor* bias = conv.input(2).empty() ? nullptr : g.constant(conv.input(2));
  const Shape* xs = static_shape(g, conv.input(0));
  const ValueInfo* yv = g.value(conv.outputs[0]);
  if (!w || (!conv.input(2).empty() && !bias) || !xs || xs->size() != 4 || w->shape.size() != 4 || !yv) return false;
  if (w->dtype != DType::F32 || yv->dtype != DType::F32) return false;
  const int64_t O = w->shape[0], C = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  const Shape& x = *xs;
  if (C != x[1] || C > kMaxPatchChannels || kh * kw < 4 || conv.get_int("group", 1) != 1) return false;
  if (conv.get_ints("strides", {1, 1}) != std::vector<int64_t>{kh, kw}) return false;
  if (conv.get_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return false;
  for (int64_t p : conv.get_ints("pads", {0, 0, 0, 0}))
    if (p != 0) return false;
  const std::string pad = conv.get_string("auto_pad", "NOTSET");
  if (pad != "NOTSET" && pad != "VALID") return false;
  if (x[2] % kh != 0 || x[3] % kw != 0) return false;
  const int64_t gh = x[2] / kh, gw = x[3] / kw, K = C * kh * kw;

  const std::string base = conv.name.empty() ? std::string("patch") : conv.name;
  const std::string wt = unique_tensor_name(g, base + "_patch_weight");
  g.constants[wt] = transposed_2d(*w, O, K);
  auto tensor = [&](const std::string& what) { return unique_tensor_name(g, base + "_patch_" + what); };
  std::vector<Node> nodes;
  const std::string cut = tensor("cut"), moved = tensor("moved"), rows = tensor("rows"), prod = tensor("product");
  nodes.push_back(make_node(g, "Reshape", base + "/patch_cut",
                            {conv.inputs[0], add_int64_constant(g, base + "_patch_cut_shape", {0, C, gh, kh, gw, kw})}, cut));
  nodes.push_back(make_node(g, "Transpose", base + "/patch_move", {cut}, moved));
  nodes.back().attrs["perm"] = Attribute::of_ints({0, 2, 4, 1, 3, 5});
  nodes.push_back(make_node(g, "Reshape", base + "/patch_rows",
                            {moved, add_int64_constant(g, base + "_patch_rows_shape", {0, gh * gw, K})}, rows));
  nodes.push_back(make_node(g, "MatMul", base + "/patch_matmul", {rows, wt}, prod));
  std::string last = prod;
  if (bias) {
    const std::string biased = tensor("biased");
    nodes.push_back(make_node(g, "Add", base + "/patch_bias", {prod, conv.inputs[2]}, biased));
    last = biased;
  }
  // The model's own Reshape to [N, O, tokens] and Transpose (0, 2, 1) after the convolution give
  // back the product's layout: end there.
  int flat = sole_reader(g, conv.outputs[0], "Reshape");
  const Shape* fs = flat < 0 ? nullptr : static_shape(g, g.nodes[static_cast<std::size_t>(flat)].outputs[0]);
  if (!fs || *fs != Shape{x[0], O, gh * gw}) flat = -1;
  int back = flat < 0 ? -1 : sole_reader(g, g.nodes[static_cast<std::size_t>(flat)].outputs[0], "Transpose");
  if (back >= 0 && g.nodes[static_cast<std::size_t>(back)].get_ints("perm") != std::vector<int64_t>{0, 2, 1}) back = -1;
  if (back >= 0) {
    nodes.back().outputs[0] = g.nodes[static_cast<std::size_t>(back)].outputs[0];
    g.nodes.erase(g.nodes.begin() + back);  // after the convolution (topological order), and after flat
    g.nodes.erase(g.nodes.begin() + flat);
  } else {
    const std::string channels = tensor("channels");
    nodes.push_back(make_node(g, "Transpose", base + "/patch_channels_first", {last}, channels));
    nodes.back().attrs["perm"] = Attribute::of_ints({0, 2, 1});
    nodes.push_back(make_node(g, "Reshape", base + "/patch_grid",
                              {channels, add_int64_constant(g, base + "_patch_grid_shape", {0, O, gh, gw})},
                              conv.outputs[0]));
  }
  g.nodes.erase(g.nodes.begin() + static_cast<long>(index));
  g.nodes.insert(g.nodes.begin() + static_cast<long>(index), nodes.begin(), nodes.end());
  return true;
}

// The space-to-depth rewrite of one strided stem convolution: the number of nodes that replace it
// (the new convolution last), or 0 when it is not one.
std::size_t rewrite_strided_stem(Graph& g, std::size_t index) {
  const Node conv = g.nodes[index];
  const bool fused = conv.op == "FusedConv" && conv.domain == "sluice";
  if (!(conv.op == "Conv" && conv.domain.empty()) && !fused) return 0;
  const Tensor* w = g.constant(conv.input(1));
  const Shape* xs = static_shape(g, conv.input(0));
  const ValueInfo* yv = g.value(conv.outputs.at(0));
  if (!w || !xs || xs->size() != 4 || w->shape.size() != 4 || !yv || yv->shape.size() != 4) return 0;
  if (w->dtype != DType::F32 || yv->dtype != DType::F32) return 0;
  const int64_t O = w->shape[0], C = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  const std::vector<int64_t> st = conv.get_ints("strides", {1, 1});
  if (C != (*xs)[1] || C > kMaxPatchChannels || conv.get_int("group", 1) != 1 || st.size() != 2 || st[0] != st[1]) return 0;
  const int64_t s = st[0];
  // Kernels of 5 and more (7x7/2 in ResNets, 7x7/4 in Segformer); a 3x3/2 stem is cheap already.
  if (s < 2 || kh <= s || kw <= s || kh < 5 || kw < 5) return 0;
  if (conv.get_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return 0;
  if (conv.get_string("auto_pad", "NOTSET") != "NOTSET") return 0;
  const std::vector<int64_t> pads = conv.get_ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4) return 0;
  const int64_t oh = yv->shape[2], ow = yv->shape[3];
  const int64_t kh2 = (kh + s - 1) / s, kw2 = (kw + s - 1) / s;
  // The padded input the stride-1 convolution needs: s (out + k' - 1) rows, the model's pads first.
  const int64_t hp = s * (oh + kh2 - 1), wp = s * (ow + kw2 - 1);
  const int64_t pad_bottom = hp - (*xs)[2] - pads[0], pad_right = wp - (*xs)[3] - pads[1];
  if (pad_bottom < 0 || pad_right < 0) return 0;  // the model crops instead: leave it

  const std::string base = conv.name.empty() ? std::string("stem") : conv.name;
  auto tensor = [&](const std::string& what) { return unique_tensor_name(g, base + "_s2d_" + what); };
  const int64_t C2 = C * s * s;
  const int64_t C2p = switched_off("SLUICE_STEM_S2D_PAD") ? C2 : (C2 + 7) / 8 * 8;   // zero channels up to a multiple of 8
  Tensor w2(DType::F32, Shape{O, C2p, kh2, kw2});
  const float* src = w->data<float>();
  float* dst = w2.data<float>();
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t ch = (c * s + i % s) * s + j % s;
          dst[((o * C2p + ch) * kh2 + i / s) * kw2 + j / s] = src[((o * C + c) * kh + i) * kw + j];
        }
  const std::string wname = unique_tensor_name(g, base + "_s2d_weight");
  g.constants[wname] = std::move(w2);

  std::vector<Node> nodes;
  const std::string padded = tensor("padded"), cut = tensor("cut"), moved = tensor("moved"), depth = tensor("depth");
  nodes.push_back(make_node(g, "Pad", base + "/s2d_pad",
                            {conv.inputs[0], add_int64_constant(g, base + "_s2d_pads", {0, 0, pads[0], pads[1], 0, 0, pad_bottom, pad_right})},
                            padded));
  nodes.push_back(make_node(g, "Reshape", base + "/s2d_cut",
                            {padded, add_int64_constant(g, base + "_s2d_cut_shape", {0, C, hp / s, s, wp / s, s})}, cut));
  nodes.push_back(make_node(g, "Transpose", base + "/s2d_move", {cut}, moved));
  nodes.back().attrs["perm"] = Attribute::of_ints({0, 1, 3, 5, 2, 4});
  nodes.push_back(make_node(g, "Reshape", base + "/s2d_depth",
                            {moved, add_int64_constant(g, base + "_s2d_depth_shape", {0, C2, hp / s, wp / s})}, depth));
  std::string conv_in = depth;
  if (C2p != C2) {
    conv_in = tensor("channels");
    nodes.push_back(make_node(g, "Pad", base + "/s2d_channels",
                              {depth, add_int64_constant(g, base + "_s2d_channel_pads", {0, 0, 0, 0, 0, C2p - C2, 0, 0})}, conv_in));
  }
  Node c2 = conv;
  c2.inputs[0] = conv_in;
  c2.inputs[1] = wname;
  c2.attrs["kernel_shape"] = Attribute::of_ints({kh2, kw2});
  c2.attrs["strides"] = Attribute::of_ints({1, 1});
  c2.attrs["pads"] = Attribute::of_ints({0, 0, 0, 0});
  c2.attrs.erase("auto_pad");
  nodes.push_back(std::move(c2));
  g.nodes.erase(g.nodes.begin() + static_cast<long>(index));
  g.nodes.insert(g.nodes.begin() + static_cast<long>(index), nodes.begin(), nodes.end());
  return nodes.size();
}

}  // namespace

int fuse_patch_convolutions(Graph& g) {
  int stems = 0;
  if (!switched_off("SLUICE_STEM_S2D"))
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      if (const std::size_t added = rewrite_strided_stem(g, i)) {
        ++stems;
        i += added - 1;  // to the new convolution
      }
  if (stems) {
    infer_known_shapes(g);
    log_debug(g.source, ": ", stems, " strided stem convolution(s) as space-to-depth");
  }
  if (switched_off("SLUICE_PATCH_GEMM")) return stems;
  int rewritten = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (rewrite_patch_conv(g, i)) ++rewritten;
  if (rewritten) {
    infer_known_shapes(g);
    log_debug(g.source, ": ", rewritten, " patch-embedding convolution(s) as matrix products");
  }
  return stems + rewritten;
}

}  // namespace sluice
