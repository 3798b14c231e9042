// Layout chains and constant scales that exporters leave between matrix products.
//
// cancel_transposes: a Transpose whose input is another Transpose, or a Reshape that only splits
// one axis of another Transpose's output, is one permutation of the first Transpose's input:
//   x -> Transpose p -> [Reshape splitting axis k] -> Transpose q
// becomes a Reshape of x when the composed permutation keeps every axis in place, else (a Reshape
// and) one Transpose.  The patch embedding of ConvNeXt and Swin is such a chain: the product
// [N, T, O] leaves model/fuse_patches.cpp as Transpose (0, 2, 1) and Reshape [N, O, H, W], which the
// model's own Transpose (0, 2, 3, 1) to channels-last undoes: a view of the product remains.
// SLUICE_CANCEL_TRANSPOSES=0 turns it off.
//
// fold_layer_scales: LayerScale (ConvNeXt, CaiT, DINOv2) multiplies the columns of a linear layer
// by a constant gamma: gamma * (x W + b), directly (DINOv2: gamma [C] over the tokens) or after a
// Transpose that moves the columns to another axis (torchvision's CNBlock and timm's ConvNeXt:
// gamma [C, 1, 1] after permuting back to [N, C, H, W]), or over the output channels of a
// convolution (timm's ConvNeXt with 1x1 convolutions as its MLP).  The Mul folds into the constants:
// W'[k, c] = W[k, c] gamma[c], b'[c] = b[c] gamma[c], computed in float32 and stored in W's and b's
// own types; at fp16/bf16 the engine then rounds W' once where it rounded W and the product.  It
// runs before the convolution fusions, so a convolution freed of its Mul takes the residual Add.
// SLUICE_FOLD_SCALE=0 turns it off.
//
// sequence_image_views: hierarchical vision transformers (Segformer, PVT, ...) go between the
// sequence layout [N, L, C] and the image layout [N, C, H, W] (L = H W) around every convolution:
//   to the image:     x [N, L, C] -> Transpose (0, 2, 1) -> Reshape [N, C, H, W]
//   to the sequence:  y [N, C, H, W] -> Reshape [N, C, L] -> Transpose (0, 2, 1)
// Each is the same permutation with the Reshape on the other side of the Transpose:
//   x -> Reshape [N, H, W, C] -> Transpose (0, 3, 1, 2)      y -> Transpose (0, 2, 3, 1) -> Reshape [N, L, C]
// and in that spelling the CUDA engine's channels-last tensors need no copy: a Transpose between
// the two 4-D orders is a view there (ops_layout.cpp), where the 3-D Transpose was a strided copy
// and the Reshape of a channels-last tensor a layout copy.  SLUICE_SEQUENCE_VIEWS=0 turns it off.
//
// fuse_conv_gelu (off unless SLUICE_FUSE_CONV_GELU=1): a Gelu reading a convolution's output
// through single-use Transposes and Reshapes (Segformer's Mix-FFN: depthwise 3x3, back to the
// sequence, Gelu) is the convolution's activation: the element-wise function commutes with the data
// movement, so the convolution applies it in its epilogue (FusedConv activation "Gelu" or
// "GeluTanh") and the views carry the activated values.  Off by default: on the H200 the depthwise
// tile kernel, issue-bound already, took 0.75 ms with the erf in its epilogue against 0.40 ms
// without it plus 0.24 ms for the Gelu step (Segformer-B0 stage 1, b64 bf16; BENCHMARKS.md).
//
// drop_empty_pads: a Pad whose pads are all zero (torchvision's Swin pads each stage to a multiple
// of the window, nothing at 224 x 224) is its input.  SLUICE_DROP_EMPTY_PADS=0 keeps it.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/params.h"
#include "model/const_eval.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

// Read by exactly one node input and by no graph output.
bool single_use(const Graph& g, const std::string& name) { return g.consumers(name) == 1 && !is_graph_output(g, name); }

// The node producing `name` when it is a plain `op`, else nullptr.
const Node* produced_by(const Graph& g, const std::string& name, const char* op) {
  const int p = g.producer(name);
  if (p < 0) return nullptr;
  const Node& n = g.nodes[static_cast<std::size_t>(p)];
  return n.op == op && n.domain.empty() ? &n : nullptr;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// The rewrite at Transpose node `index` (the chain's last node); false when it is no such chain.
bool cancel_at(Graph& g, std::size_t index) {
  const Node t2 = g.nodes[index];
  if (t2.op != "Transpose" || !t2.domain.empty() || t2.inputs.size() != 1 || t2.outputs.size() != 1) return false;
  const Shape* os = static_shape(g, t2.outputs[0]);
  const Shape* zs = static_shape(g, t2.inputs[0]);
  if (!os || !zs) return false;
  const std::vector<int64_t> q = transpose_permutation(t2, zs->size());
  if (q.empty() || !single_use(g, t2.inputs[0])) return false;
  const Node* reshape = produced_by(g, t2.inputs[0], "Reshape");
  const std::string& mid = reshape ? reshape->input(0) : t2.inputs[0];
  const Node* t1 = produced_by(g, mid, "Transpose");
  if (!t1 || t1->inputs.size() != 1 || (reshape && !single_use(g, mid))) return false;
  const Shape* xs = static_shape(g, t1->inputs[0]);
  const Shape* ys = static_shape(g, mid);
  if (!xs || !ys || xs->size() != ys->size()) return false;
  const std::vector<int64_t> p = transpose_permutation(*t1, xs->size());
  if (p.empty()) return false;
  const std::size_t r = ys->size();
  // The leading (batch) axis stays in front and whole: the new Reshape copies it (0), so the
  // rewrite holds at any batch and the batch trace sees no new batch-carrying shape.
  if (r < 2 || p[0] != 0 || q[0] != 0) return false;

  // The split: Y's axis k becomes Z's axes [k, k + m).  Without a Reshape, m = 1 at k = 0 (no split).
  std::size_t k = 0, m = 1;
  if (reshape) {
    const Shape& y = *ys;
    const Shape& z = *zs;
    if (z.size() < r) return false;
    m = z.size() - r + 1;
    while (k < r && y[k] == z[k]) ++k;
    if (k == 0 || k == r) return false;   // the batch split, or the same shape: nothing split
    int64_t prod = 1;
    for (std::size_t f = 0; f < m; ++f) prod *= z[k + f];
    if (prod != y[k]) return false;
    for (std::size_t i = k + 1; i < r; ++i)
      if (y[i] != z[i + m - 1]) return false;
  }
  // X's axes refined by the split (X axis p[k] into m pieces): fine[a] is X axis a's first piece.
  const std::size_t split = static_cast<std::size_t>(p[k]);
  std::vector<int64_t> fine(r), xfine;
  for (std::size_t a = 0, at = 0; a < r; ++a) {
    fine[a] = static_cast<int64_t>(at);
    if (a == split)
      for (std::size_t f = 0; f < m; ++f) xfine.push_back((*zs)[k + f]);
    else
      xfine.push_back((*xs)[a]);
    at += a == split ? m : 1;
  }
  // Z axis z as a fine axis of X.
  auto of_z = [&](std::size_t z) -> int64_t {
    if (z < k) return fine[static_cast<std::size_t>(p[z])];
    if (z < k + m) return fine[split] + static_cast<int64_t>(z - k);
    return fine[static_cast<std::size_t>(p[z - m + 1])];
  };
  std::vector<int64_t> composed;
  for (std::size_t i = 0; i < q.size(); ++i) composed.push_back(of_z(static_cast<std::size_t>(q[i])));

  const std::string x = t1->inputs[0], out = t2.outputs[0];
  const std::string base = t2.name.empty() ? std::string("layout") : t2.name;
  std::vector<Node> nodes;
  std::string from = x;
  const bool need_reshape = xfine.size() != xs->size();
  auto reshape_to = [&](const Shape& to, const std::string& result) {
    std::vector<int64_t> dims(to.begin(), to.end());
    dims[0] = 0;
    Node n;
    n.op = "Reshape";
    n.name = unique_tensor_name(g, base + "/as_view");
    n.inputs = {from, add_int64_constant(g, base + "_view_shape", dims)};
    n.outputs = {result};
    nodes.push_back(std::move(n));
  };
  if (is_identity(composed)) {
    reshape_to(*os, out);
  } else {
    if (need_reshape) {
      const std::string split_name = unique_tensor_name(g, base + "_split");
      reshape_to(xfine, split_name);
      from = split_name;
    }
    Node t;
    t.op = "Transpose";
    t.name = unique_tensor_name(g, base + "/composed");
    t.inputs = {from};
    t.outputs = {out};
    t.attrs["perm"] = Attribute::of_ints(composed);
    nodes.push_back(std::move(t));
  }
  // Drop t2, the Reshape and t1 (each read only by the next; producers come first), then put the
  // new nodes where t2 was.
  std::vector<std::size_t> drop = {index};
  if (reshape) drop.push_back(static_cast<std::size_t>(g.producer(t2.inputs[0])));
  drop.push_back(static_cast<std::size_t>(g.producer(mid)));
  std::sort(drop.rbegin(), drop.rend());
  std::size_t at = index;
  for (std::size_t d : drop) {
    if (d != index) {
      for (const auto& o : g.nodes[d].outputs) g.values.erase(o);
      --at;
    }
    g.nodes.erase(g.nodes.begin() + static_cast<long>(d));
  }
  g.nodes.insert(g.nodes.begin() + static_cast<long>(at), nodes.begin(), nodes.end());
  return true;
}

// One output column per entry of `scale` along `axis` of a tensor of rank `rank`: the constant's
// values by column (one value repeated when it is a scalar), or empty when it broadcasts otherwise.
std::vector<float> column_values(const Tensor& t, std::size_t rank, std::size_t axis, int64_t columns) {
  if (t.shape.size() > rank) return {};
  const std::size_t lead = rank - t.shape.size();
  for (std::size_t d = 0; d < t.shape.size(); ++d)
    if (lead + d != axis && t.shape[d] != 1) return {};
  const std::vector<float> v = t.as_float();
  if (v.size() == 1) return std::vector<float>(static_cast<std::size_t>(columns), v[0]);
  if (static_cast<int64_t>(v.size()) != columns || axis < lead) return {};
  return v;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The Mul node at `index` (gamma times v) removed: its readers read v instead.
void drop_mul(Graph& g, std::size_t index, const std::string& v) {
  const std::string y = g.nodes[index].outputs[0];
  g.nodes.erase(g.nodes.begin() + static_cast<long>(index));
  g.values.erase(y);
  replace_uses(g, y, v);
}

// A constant (stored in like's type) of like's shape holding `values`, under a new name (the
// original may be shared).
std::string store_scaled(Graph& g, const Tensor& like, const std::vector<float>& values, const std::string& base) {
  Tensor f = Tensor::from(DType::F32, like.shape, values);
  const std::string name = unique_tensor_name(g, base + "_scaled");
  g.constants[name] = like.dtype == DType::F32 ? f : cast_tensor(f, like.dtype);
  return name;
}

// gamma over the output channels of a convolution (timm's ConvNeXt with 1x1 convolutions as its
// MLP): W'[o, ...] = W[o, ...] gamma[o], b'[o] = b[o] gamma[o].
bool fold_into_conv(Graph& g, std::size_t index, const Tensor& gamma, const std::string& v, const Node& conv) {
  const Tensor* w = g.constant(conv.input(1));
  const Tensor* bias = conv.input(2).empty() ? nullptr : g.constant(conv.input(2));
  const Shape& vs = g.value(v)->shape;
  if (!w || w->shape.size() != vs.size() || vs.size() < 3 || !is_float(w->dtype) || w->shape[0] != vs[1]) return false;
  if ((!conv.input(2).empty() && (!bias || !is_float(bias->dtype) || bias->numel() != vs[1]))) return false;
  const int64_t out = vs[1];
  const std::vector<float> s = column_values(gamma, vs.size(), 1, out);
  if (s.empty()) return false;
  std::vector<float> wv = w->as_float();
  const int64_t per = w->numel() / out;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < per; ++k) wv[static_cast<std::size_t>(o * per + k)] *= s[static_cast<std::size_t>(o)];
  const std::string wname = store_scaled(g, *w, wv, conv.input(1));
  std::string bname;
  if (bias) {
    std::vector<float> bv = bias->as_float();
    for (int64_t o = 0; o < out; ++o) bv[static_cast<std::size_t>(o)] *= s[static_cast<std::size_t>(o)];
    bname = store_scaled(g, *bias, bv, conv.input(2));
  }
  for (auto& n : g.nodes)
    if (&n == &conv) {
      n.inputs[1] = wname;
      if (bias) n.inputs[2] = bname;
    }
  drop_mul(g, index, v);
  return true;
}

bool fold_scale_at(Graph& g, std::size_t index) {
  const Node mul = g.nodes[index];
  if (mul.op != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 || mul.outputs.size() != 1) return false;
  const int ci = g.is_constant(mul.inputs[0]) ? 0 : g.is_constant(mul.inputs[1]) ? 1 : -1;
  if (ci < 0 || g.is_constant(mul.inputs[1 - ci]) || is_graph_output(g, mul.outputs[0])) return false;
  const Tensor& gamma = *g.constant(mul.inputs[ci]);
  const std::string v = mul.inputs[1 - ci];
  const Shape* vs = static_shape(g, v);
  const Shape* ms = static_shape(g, mul.outputs[0]);
  if (!vs || !ms || *vs != *ms || vs->empty() || !is_float(gamma.dtype) || !single_use(g, v)) return false;
  const std::size_t rank = vs->size();
  if (const Node* conv = produced_by(g, v, "Conv")) return fold_into_conv(g, index, gamma, v, *conv);
  // The axis of the Mul's input that holds the product's columns.
  std::size_t axis = rank - 1;
  std::string u = v;
  const Node* tr = produced_by(g, v, "Transpose");
  if (tr) {
    const std::vector<int64_t> p = transpose_permutation(*tr, rank);
    if (p.empty() || !single_use(g, tr->inputs[0])) return false;
    axis = rank;
    for (std::size_t j = 0; j < rank; ++j)
      if (p[j] == static_cast<int64_t>(rank - 1)) axis = j;
    u = tr->inputs[0];
  }
  const Node* add = produced_by(g, u, "Add");
  const Node* matmul = nullptr;
  int bias_index = -1;
  if (add && add->inputs.size() == 2) {
    bias_index = g.is_constant(add->inputs[1]) ? 1 : g.is_constant(add->inputs[0]) ? 0 : -1;
    if (bias_index < 0 || !single_use(g, add->inputs[1 - bias_index])) return false;
    matmul = produced_by(g, add->inputs[1 - bias_index], "MatMul");
  } else {
    matmul = produced_by(g, u, "MatMul");
  }
  if (!matmul || matmul->inputs.size() != 2) return false;
  const Tensor* w = g.constant(matmul->inputs[1]);
  const Shape* us = static_shape(g, u);
  if (!w || w->shape.size() != 2 || !is_float(w->dtype) || !us || us->size() != rank) return false;
  const int64_t cols = w->shape[1];
  if ((*us)[rank - 1] != cols) return false;
  const std::vector<float> s = column_values(gamma, rank, axis, cols);
  if (s.empty()) return false;
  const Tensor* bias = add ? g.constant(add->inputs[static_cast<std::size_t>(bias_index)]) : nullptr;
  std::vector<float> bv;
  if (bias) {
    if (!is_float(bias->dtype)) return false;
    bv = column_values(*bias, rank, rank - 1, cols);
    if (bv.empty() || static_cast<int64_t>(bias->numel()) != cols) return false;
  }

  std::vector<float> wv = w->as_float();
  for (int64_t row = 0; row < w->shape[0]; ++row)
    for (int64_t c = 0; c < cols; ++c) wv[static_cast<std::size_t>(row * cols + c)] *= s[static_cast<std::size_t>(c)];
  const std::string wname = store_scaled(g, *w, wv, matmul->inputs[1]);
  std::string bname;
  if (bias) {
    for (int64_t c = 0; c < cols; ++c) bv[static_cast<std::size_t>(c)] *= s[static_cast<std::size_t>(c)];
    bname = store_scaled(g, *bias, bv, add->inputs[static_cast<std::size_t>(bias_index)]);
  }
  for (auto& n : g.nodes) {
    if (&n == matmul) n.inputs[1] = wname;
    if (add && &n == add) n.inputs[static_cast<std::size_t>(bias_index)] = bname;
  }
  drop_mul(g, index, v);
  return true;
}

bool is_perm(const Node& t, std::size_t rank, const std::vector<int64_t>& want) {
  return t.inputs.size() == 1 && t.outputs.size() == 1 && transpose_permutation(t, rank) == want;
}

Node layout_node(Graph& g, const char* op, const std::string& base, const std::string& in, const std::string& out) {
  Node n;
  n.op = op;
  n.name = unique_tensor_name(g, base);
  n.inputs = {in};
  n.outputs = {out};
  return n;
}

// At node `index`, the Reshape of "to the image" or the Transpose of "to the sequence" (above);
// false when it is neither.  The new nodes take the two old nodes' places.
bool sequence_view_at(Graph& g, std::size_t index) {
  const Node last = g.nodes[index];
  if (!last.domain.empty() || last.outputs.size() != 1 || last.inputs.empty()) return false;
  const std::string mid = last.inputs[0], out = last.outputs[0];
  const Shape* ms = static_shape(g, mid);
  const Shape* os = static_shape(g, out);
  if (!ms || !os || ms->size() != 3 || !single_use(g, mid)) return false;
  const int p = g.producer(mid);
  if (p < 0) return false;
  const Node first = g.nodes[static_cast<std::size_t>(p)];
  if (!first.domain.empty() || first.outputs.size() != 1 || first.inputs.empty()) return false;
  const std::string x = first.inputs[0];
  const Shape* xs = static_shape(g, x);
  if (!xs) return false;
  const Shape& m = *ms;
  const Shape& o = *os;
  std::vector<Node> nodes;
  const std::string base = last.name.empty() ? std::string("sequence") : last.name;
  if (last.op == "Reshape" && first.op == "Transpose" && is_perm(first, 3, {0, 2, 1})) {
    // x [N, L, C] -> [N, C, L] -> [N, C, H, W]
    if (o.size() != 4 || o[0] != m[0] || o[1] != m[1] || o[2] * o[3] != m[2]) return false;
    const std::string z = unique_tensor_name(g, base + "_hwc");
    Node r = layout_node(g, "Reshape", base + "/as_hwc", x, z);
    r.inputs.push_back(add_int64_constant(g, base + "_hwc_shape", {0, o[2], o[3], o[1]}));
    Node t = layout_node(g, "Transpose", base + "/to_image", z, out);
    t.attrs["perm"] = Attribute::of_ints({0, 3, 1, 2});
    nodes = {std::move(r), std::move(t)};
  } else if (last.op == "Transpose" && is_perm(last, 3, {0, 2, 1}) && first.op == "Reshape") {
    // y [N, C, H, W] -> [N, C, L] -> [N, L, C]
    const Shape& y = *xs;
    if (y.size() != 4 || y[0] != m[0] || y[1] != m[1] || y[2] * y[3] != m[2]) return false;
    const std::string z = unique_tensor_name(g, base + "_hwc");
    Node t = layout_node(g, "Transpose", base + "/to_hwc", x, z);
    t.attrs["perm"] = Attribute::of_ints({0, 2, 3, 1});
    Node r = layout_node(g, "Reshape", base + "/to_sequence", z, out);
    r.inputs.push_back(add_int64_constant(g, base + "_sequence_shape", {0, m[2], m[1]}));
    nodes = {std::move(t), std::move(r)};
  } else {
    return false;
  }
  g.values.erase(mid);
  g.nodes[static_cast<std::size_t>(p)] = std::move(nodes[0]);
  g.nodes[index] = std::move(nodes[1]);
  return true;
}

// The Gelu node at `index` made the activation of the convolution behind its views; false when it
// reads no such convolution.
bool conv_gelu_at(Graph& g, std::size_t index) {
  const Node gelu = g.nodes[index];
  if (gelu.op != "Gelu" || !gelu.domain.empty() || gelu.inputs.size() != 1 || gelu.outputs.size() != 1) return false;
  const std::string approx = gelu.get_string("approximate", "none");
  if ((approx != "none" && approx != "tanh") || is_graph_output(g, gelu.outputs[0])) return false;
  std::string v = gelu.inputs[0];
  for (int hops = 0; hops < 8; ++hops) {
    if (!single_use(g, v)) return false;
    const int p = g.producer(v);
    if (p < 0) return false;
    Node& n = g.nodes[static_cast<std::size_t>(p)];
    const bool view = n.domain.empty() && (n.op == "Transpose" || n.op == "Reshape") && n.outputs.size() == 1;
    if (view) {
      v = n.inputs.at(0);
      continue;
    }
    const bool conv = (n.op == "Conv" && n.domain.empty()) || (n.op == "FusedConv" && n.domain == "sluice");
    if (!conv || n.outputs.size() != 1 || !n.get_string("activation", "").empty()) return false;
    if (n.op == "Conv") {
      n.op = "FusedConv";
      n.domain = "sluice";
      while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
      if (n.inputs.size() > 3) return false;
    }
    n.attrs["activation"] = Attribute::of_string(approx == "tanh" ? "GeluTanh" : "Gelu");
    const std::string x = gelu.inputs[0], y = gelu.outputs[0];
    g.nodes.erase(g.nodes.begin() + static_cast<long>(index));
    g.values.erase(y);
    replace_uses(g, y, x);
    return true;
  }
  return false;
}

}  // namespace

int fuse_conv_gelu(Graph& g) {
  if (!param_on("SLUICE_FUSE_CONV_GELU")) return 0;
  int done = 0;
  for (std::size_t i = 0; i < g.nodes.size();)
    if (conv_gelu_at(g, i)) ++done;
    else ++i;
  if (done) log_debug(g.source, ": ", done, " Gelu(s) fused into the convolution before them");
  return done;
}

int sequence_image_views(Graph& g) {
  if (switched_off("SLUICE_SEQUENCE_VIEWS")) return 0;
  infer_known_shapes(g);
  int done = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (sequence_view_at(g, i)) ++done;
  if (done) {
    infer_known_shapes(g);
    log_debug(g.source, ": ", done, " sequence/image layout change(s) respelled as 4-D transposes");
  }
  return done;
}

int cancel_transposes(Graph& g) {
  if (switched_off("SLUICE_CANCEL_TRANSPOSES")) return 0;
  int done = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (cancel_at(g, i)) ++done;
  if (done) {
    infer_known_shapes(g);
    log_debug(g.source, ": ", done, " transpose chain(s) composed into one step or a view");
  }
  return done;
}

int drop_empty_pads(Graph& g) {
  if (switched_off("SLUICE_DROP_EMPTY_PADS")) return 0;
  int done = 0;
  for (std::size_t i = 0; i < g.nodes.size();) {
    const Node& n = g.nodes[i];
    const Tensor* pads = n.op == "Pad" && n.domain.empty() && n.outputs.size() == 1 ? g.constant(n.input(1)) : nullptr;
    bool empty = pads && !n.input(0).empty() && !is_graph_output(g, n.outputs[0]) &&
                 (pads->dtype == DType::I64 || pads->dtype == DType::I32);
    if (empty)
      for (int64_t v : pads->as_int64()) empty = empty && v == 0;
    if (!empty) {
      ++i;
      continue;
    }
    const std::string x = n.input(0), y = n.outputs[0];
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    g.values.erase(y);
    replace_uses(g, y, x);
    ++done;
  }
  if (done) log_debug(g.source, ": ", done, " Pad node(s) with no padding removed");
  return done;
}

int fold_layer_scales(Graph& g) {
  if (switched_off("SLUICE_FOLD_SCALE")) return 0;
  infer_known_shapes(g);
  int done = 0;
  for (std::size_t i = 0; i < g.nodes.size();)
    if (fold_scale_at(g, i)) ++done;
    else ++i;
  if (done) log_debug(g.source, ": ", done, " constant column scale(s) folded into the matrix product before them");
  return done;
}

}  // namespace sluice
