// Ops that move data: views (Reshape & co share their input's bytes), Transpose, Concat, Split,
// Slice, Gather (constant or run-time indices), Pad, Expand and Tile (Resize: ops_resize.cpp).  Contiguous blocks go through
// cudaMemcpy2DAsync; the rest through the strided-copy and pad kernels.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/axis_view.h"
#include "core/cuda/cuda_check.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

void check_rank(const Builder& b, const Node& n, const Shape& s) {
  if (s.size() > static_cast<std::size_t>(kMaxRank)) b.fail(n, "rank ", s.size(), " is above the supported ", kMaxRank);
}

// outer x (block of `width` bytes) copies: the shape of Concat, Split and Gather pieces.
struct Block2D {
  int src = -1, dst = -1;
  std::size_t src_offset = 0, dst_offset = 0, src_pitch = 0, dst_pitch = 0, width = 0, height = 0;
};

// One launch of the block-copy kernel when every piece is 16-byte aligned (channels-last Concat of
// channel counts that are multiples of 8 halves, e.g. DeepLabV3's ASPP); else a copy call per piece.
void add_blocks(Builder& b, const Node& n, const std::vector<Block2D>& blocks, std::vector<int> uses) {
  b.add(n.name, std::move(uses), [=](Context&, const Bindings& bd, cudaStream_t s) {
    if (blocks.size() <= static_cast<std::size_t>(kMaxCopyBlocks)) {
      CopyBlock packed[kMaxCopyBlocks];
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const Block2D& k = blocks[i];
        packed[i] = {static_cast<const char*>(bd.at(k.src)) + k.src_offset, static_cast<char*>(bd.at(k.dst)) + k.dst_offset,
                     k.src_pitch, k.dst_pitch, k.width, k.height};
      }
      if (copy_blocks16(packed, static_cast<int>(blocks.size()), s)) return;
    }
    for (const auto& k : blocks) {
      if (k.width == 0 || k.height == 0) continue;
      if (k.height == 1) {   // a plain copy: no pitch limits
        CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(bd.at(k.dst)) + k.dst_offset,
                                   static_cast<const char*>(bd.at(k.src)) + k.src_offset, k.width,
                                   cudaMemcpyDeviceToDevice, s));
        continue;
      }
      CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(bd.at(k.dst)) + k.dst_offset, k.dst_pitch,
                                   static_cast<const char*>(bd.at(k.src)) + k.src_offset, k.src_pitch, k.width, k.height,
                                   cudaMemcpyDeviceToDevice, s));
    }
  });
}

void lower_view(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  b.alias_or_copy(n, 0, x);
}

// SLUICE_CUDA_LAYOUT_VIEWS=0 turns the views below off (every Transpose copies), to measure them.
bool layout_views_on() { return switch_on("SLUICE_CUDA_LAYOUT_VIEWS"); }

// A Transpose between the two 4-D orders whose result already lies in memory the way it is stored:
//   (0, 2, 3, 1) of a channels-last [N, C, H, W] slot is that slot's bytes read as a plain [N, H, W, C];
//   (0, 3, 1, 2) of a plain [N, H, W, C] slot is the same bytes as a channels-last [N, C, H, W].
// ConvNeXt and channels-last LayerNorms (timm's LayerNorm2d, torchvision's CNBlock) permute to
// channels-last around every LayerNorm and Linear and back before the next convolution, where the
// engine holds the convolutions' tensors channels-last already: both permutes become views.
// Returns whether output 0 was registered as such a view.
bool lower_transpose_view(Builder& b, const Node& n) {
  if (!layout_views_on() || !b.nhwc_enabled() || n.inputs.empty() || b.is_graph_output(n.outputs.at(0))) return false;
  const ValueInfo* xv = b.graph.value(n.input(0));
  if (!xv || xv->shape.size() != 4 || b.graph.constant(n.input(0))) return false;
  std::vector<int64_t> perm = n.get_ints("perm");
  for (auto& p : perm)
    if (p < 0) p += 4;
  const bool to_last = perm == std::vector<int64_t>{0, 2, 3, 1}, to_first = perm == std::vector<int64_t>{0, 3, 1, 2};
  if (!to_last && !to_first) return false;
  const int x = b.input_any(n, 0);
  const TensorSlot& xs = b.slot(x);
  // to_last needs the channels-last slot; to_first a plain one (a 4-D slot marked channels-last is
  // logically NCHW, so its bytes are [N, H, W, C] only in the first case).
  // An [N, C, 1, 1] slot (a pooled head) has the same bytes in both orders.
  const bool point = xs.shape.size() == 4 && xs.shape[2] == 1 && xs.shape[3] == 1;
  if (xs.shape.size() != 4 || (to_last && !xs.nhwc && !point) || (to_first && xs.nhwc)) return false;
  // Float activations only: the integer and bool ops read NCHW order (ops_index.cpp).
  if (xs.dtype != DType::F32 && xs.dtype != DType::F16 && xs.dtype != DType::BF16) return false;
  const std::string& name = n.outputs.at(0);
  const ValueInfo& yv = b.value(name);
  if (b.stored(name, yv.dtype) != xs.dtype || yv.shape.size() != 4) return false;
  const int root = xs.where == Where::Alias ? xs.index : x;
  const std::size_t offset = xs.where == Where::Alias ? xs.offset : 0;
  const std::size_t bytes = xs.bytes;
  const int y = b.output(n, 0, to_first);   // registers the value; made a view of x's bytes below
  TensorSlot& ys = b.slots[static_cast<std::size_t>(y)];
  if (ys.bytes != bytes || ys.nhwc != to_first) b.fail(n, "layout view of ", bytes, " bytes has ", ys.bytes);
  ys.where = Where::Alias;
  ys.index = root;
  ys.offset = offset;
  return true;
}

void lower_transpose(Builder& b, const Node& n) {
  if (lower_transpose_view(b, n)) return;
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  check_rank(b, n, xs);
  const std::size_t r = xs.size();
  std::vector<int64_t> perm = n.get_ints("perm");
  if (perm.empty())
    for (std::size_t d = 0; d < r; ++d) perm.push_back(static_cast<int64_t>(r - 1 - d));
  if (perm.size() != r) b.fail(n, "perm has ", perm.size(), " entries for rank ", r);
  const auto st = contiguous_strides(xs);
  CopyShape cs;
  cs.rank = static_cast<int>(r);
  for (std::size_t d = 0; d < r; ++d) {
    const int64_t p = b.axis(n, perm[d], static_cast<int64_t>(r));
    cs.out[d] = xs[static_cast<std::size_t>(p)];
    cs.in_dim[d] = cs.out[d];
    cs.in_stride[d] = st[static_cast<std::size_t>(p)];
  }
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(x), bd.at(y), cs, s); });
}

void lower_concat(Builder& b, const Node& n) {
  // Channels concatenated channels-last when an input is channels-last: each input is then a
  // [N*H*W, C_i] block of the [N*H*W, C] output.
  const Shape logical = b.value(n.outputs.at(0)).shape;
  bool nhwc = false;
  if (logical.size() == 4 && b.axis(n, n.get_int("axis", 0), 4) == 1)
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      if (b.has_input(n, i)) nhwc |= b.is_nhwc(b.input_any(n, i));
  const int y = b.output(n, 0, nhwc);
  const Shape ys = b.slot(y).physical();
  const int64_t axis = nhwc ? 3 : b.axis(n, n.get_int("axis", 0), static_cast<int64_t>(ys.size()));
  const std::size_t es = dtype_size(b.slot(y).dtype);
  const AxisView view = axis_view(ys, axis);
  const int64_t outer = view.outer, inner = view.inner;
  std::vector<Block2D> blocks;
  std::vector<int> uses = {y};
  int64_t at = 0;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (!b.has_input(n, i)) continue;
    const int x = b.input_as(n, i, nhwc);
    if (b.slot(x).dtype != b.slot(y).dtype) b.fail(n, "input ", i, " is ", dtype_name(b.slot(x).dtype), ", the output ", dtype_name(b.slot(y).dtype));
    const Shape xs = b.slot(x).physical();
    const int64_t len = xs.size() == ys.size() ? xs[static_cast<std::size_t>(axis)] : 0;
    Block2D k;
    k.src = x;
    k.dst = y;
    k.width = static_cast<std::size_t>(len * inner) * es;
    k.src_pitch = std::max<std::size_t>(k.width, 1);
    k.dst_pitch = static_cast<std::size_t>(ys[static_cast<std::size_t>(axis)] * inner) * es;
    k.dst_offset = static_cast<std::size_t>(at * inner) * es;
    k.height = static_cast<std::size_t>(outer);
    blocks.push_back(k);
    uses.push_back(x);
    at += len;
  }
  if (at != ys[static_cast<std::size_t>(axis)]) b.fail(n, "inputs add up to ", at, " along axis ", axis, ", the output has ", ys[static_cast<std::size_t>(axis)]);
  add_blocks(b, n, blocks, uses);
}

void lower_split(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  const Shape xs = b.slot(x).shape;
  const int64_t axis = b.axis(n, n.get_int("axis", 0), static_cast<int64_t>(xs.size()));
  const std::size_t es = dtype_size(b.slot(x).dtype);
  const AxisView view = axis_view(xs, axis);
  const int64_t outer = view.outer, inner = view.inner;
  std::vector<Block2D> blocks;
  std::vector<int> uses = {x};
  int64_t at = 0;
  for (std::size_t i = 0; i < n.outputs.size(); ++i) {
    const std::string& name = n.outputs[i];
    // Outputs nobody reads still advance the position.
    const int64_t len = name.empty() ? 0 : b.value(name).shape.at(static_cast<std::size_t>(axis));
    const int y = b.output(n, i);
    if (y >= 0) {
      Block2D k;
      k.src = x;
      k.dst = y;
      k.width = static_cast<std::size_t>(len * inner) * es;
      k.dst_pitch = std::max<std::size_t>(k.width, 1);
      k.src_pitch = static_cast<std::size_t>(xs[static_cast<std::size_t>(axis)] * inner) * es;
      k.src_offset = static_cast<std::size_t>(at * inner) * es;
      k.height = static_cast<std::size_t>(outer);
      blocks.push_back(k);
      uses.push_back(y);
    }
    at += len;
  }
  add_blocks(b, n, blocks, uses);
}

void lower_slice(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  check_rank(b, n, xs);
  const std::size_t r = xs.size();
  const std::vector<int64_t> starts = b.const_ints(n, 1, "starts"), ends = b.const_ints(n, 2, "ends");
  std::vector<int64_t> axes, steps;
  if (b.has_input(n, 3)) axes = b.const_ints(n, 3, "axes");
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (b.has_input(n, 4)) steps = b.const_ints(n, 4, "steps");
  else steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size() || ends.size() != starts.size())
    b.fail(n, "starts, ends, axes and steps differ in length");
  std::vector<int64_t> first(r, 0), step(r, 1);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t a = static_cast<std::size_t>(b.axis(n, axes[i], static_cast<int64_t>(r)));
    const int64_t dim = xs[a];
    if (steps[i] == 0) b.fail(n, "step 0");
    int64_t s = starts[i];
    if (s < 0) s += dim;
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    first[a] = s;
    step[a] = steps[i];
  }
  const auto st = contiguous_strides(xs);
  CopyShape cs;
  cs.rank = static_cast<int>(r);
  int64_t offset = 0;
  for (std::size_t d = 0; d < r; ++d) {
    cs.out[d] = ys[d];
    cs.in_dim[d] = ys[d];
    cs.in_stride[d] = st[d] * step[d];
    offset += first[d] * st[d];
  }
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    strided_copy(es, static_cast<const char*>(bd.at(x)) + offset * static_cast<int64_t>(es), bd.at(y), cs, s);
  });
}

void lower_gather(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  const int64_t axis = b.axis(n, n.get_int("axis", 0), static_cast<int64_t>(xs.size()));
  const std::size_t es = dtype_size(b.slot(x).dtype);
  const AxisView view = axis_view(xs, axis);
  const int64_t outer = view.outer, inner = view.inner;
  const int64_t dim = xs[static_cast<std::size_t>(axis)];
  const Tensor* constant = b.const_input(n, 1);
  if (!constant || constant->numel() > 64) {
    // Indices computed at run time (or many of them): read on the device by the gather kernel.
    const int ids = b.input(n, 1);
    const DType it = b.slot(ids).dtype;
    if (it != DType::I64 && it != DType::I32) b.fail(n, "indices are ", dtype_name(it), ", not int64 or int32");
    if (dim == 0) b.fail(n, "gathering from an empty axis");
    if (constant)
      for (int64_t v : constant->as_int64())
        if (v < -dim || v >= dim) b.fail(n, "index ", v, " is out of range for a dim of ", dim);
    const int64_t count = b.slot(ids).numel();
    b.add(n.name, {x, ids, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      gather_axis(es, bd.at(x), bd.at(ids), it, bd.at(y), outer, dim, inner, count, s);
    });
    return;
  }
  const std::vector<int64_t> idx = b.const_ints(n, 1, "indices");
  std::vector<Block2D> blocks;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    int64_t i = idx[j] < 0 ? idx[j] + dim : idx[j];
    if (i < 0 || i >= dim) b.fail(n, "index ", idx[j], " is out of range for a dim of ", dim);
    Block2D k;
    k.src = x;
    k.dst = y;
    k.width = static_cast<std::size_t>(inner) * es;
    k.src_pitch = static_cast<std::size_t>(dim * inner) * es;
    k.dst_pitch = static_cast<std::size_t>(static_cast<int64_t>(idx.size()) * inner) * es;
    k.src_offset = static_cast<std::size_t>(i * inner) * es;
    k.dst_offset = j * static_cast<std::size_t>(inner) * es;
    k.height = static_cast<std::size_t>(outer);
    blocks.push_back(k);
  }
  add_blocks(b, n, blocks, {x, y});
}

// SLUICE_CUDA_SPACE_TO_DEPTH=0 lowers the strided stem's chain node by node (to measure it).
bool space_to_depth_on() { return switch_on("SLUICE_CUDA_SPACE_TO_DEPTH"); }

// The strided stem's input (model/fuse_patches.cpp): Pad (zeros, on H and W only) -> Reshape
// [N, C, H'/s, s, W'/s, s] -> Transpose (0, 1, 3, 5, 2, 4) -> Reshape [N, C s s, H'/s, W'/s], as one
// step that writes the last Reshape's tensor, channels-last where only convolutions read it (so no
// layout change follows).  Node by node, the Pad and the 6-D Transpose ran at 7-9 % of the copy
// rate and a layout change came after them.  Returns false, lowering nothing, for any other chain.
// The 8 pads of a constant-mode Pad of value 0 without an axes input, empty for any other Pad (the
// space-to-depth chain's two Pads: the spatial one in front, fuse_patches' zero channels behind).
std::vector<int64_t> zero_pads_4d(Builder& b, const Node& p) {
  if (p.get_string("mode", "constant") != "constant" || b.has_input(p, 3)) return {};
  if (b.has_input(p, 2)) {
    const Tensor* v = b.const_input(p, 2);
    if (!v || (v->numel() > 0 && v->as_float().at(0) != 0.0f)) return {};
  }
  const Tensor* pt = b.const_input(p, 1);
  if (!pt || pt->numel() != 8) return {};
  return b.const_ints(p, 1, "pads");
}

bool lower_space_to_depth(Builder& b, const Node& n) {
  if (!space_to_depth_on() || n.inputs.empty() || !b.has_output(n, 0)) return false;
  auto sole = [&](const std::string& name, const char* op) -> const Node* {
    if (b.is_graph_output(name)) return nullptr;
    const auto r = b.consumers(name);
    if (r.size() != 1 || !r[0]->domain.empty() || r[0]->op != op || r[0]->outputs.empty() || r[0]->input(0) != name) return nullptr;
    return r[0];
  };
  const Node* cut = sole(n.outputs[0], "Reshape");
  const Node* move = cut ? sole(cut->outputs[0], "Transpose") : nullptr;
  const Node* depth = move ? sole(move->outputs[0], "Reshape") : nullptr;
  if (!depth || b.is_graph_output(depth->outputs[0])) return false;
  const std::vector<int64_t> pads = zero_pads_4d(b, n);
  if (pads.empty()) return false;
  const ValueInfo* xv = b.graph.value(n.input(0));
  if (!xv || xv->shape.size() != 4 || b.graph.constant(n.input(0))) return false;
  if (xv->dtype != DType::F32 && xv->dtype != DType::F16 && xv->dtype != DType::BF16) return false;
  if (pads[0] != 0 || pads[1] != 0 || pads[4] != 0 || pads[5] != 0) return false;
  for (const int64_t p : pads)
    if (p < 0) return false;
  const Shape& x = xv->shape;
  const int64_t hp = x[2] + pads[2] + pads[6], wp = x[3] + pads[3] + pads[7];
  const Shape cs = b.value(cut->outputs[0]).shape, ds = b.value(depth->outputs[0]).shape;
  if (cs.size() != 6 || ds.size() != 4) return false;
  const int64_t s = cs[3];
  if (s < 1 || cs[5] != s || hp % s != 0 || wp % s != 0) return false;
  if (cs != Shape{x[0], x[1], hp / s, s, wp / s, s} || ds != Shape{x[0], x[1] * s * s, hp / s, wp / s}) return false;
  if (move->get_ints("perm") != std::vector<int64_t>{0, 1, 3, 5, 2, 4}) return false;
  // fuse_patches' zero channels after the depth tensor (a Pad of axis 1's end only, value 0): the
  // step writes them too.
  const Node* widen = sole(depth->outputs[0], "Pad");
  int64_t c_out = ds[1];
  if (widen) {
    const std::vector<int64_t> wpads = zero_pads_4d(b, *widen);
    const bool channels_only = wpads.size() == 8 && wpads[5] > 0 && wpads[0] == 0 && wpads[1] == 0 && wpads[2] == 0 &&
                               wpads[3] == 0 && wpads[4] == 0 && wpads[6] == 0 && wpads[7] == 0;
    if (channels_only && !b.is_graph_output(widen->outputs[0]))
      c_out = ds[1] + wpads[5];
    else
      widen = nullptr;
  }
  const Node& last = widen ? *widen : *depth;
  if (x[0] * c_out * ds[2] * ds[3] >= (int64_t{1} << 31) || shape_numel(x) >= (int64_t{1} << 31)) return false;   // the kernel's 32-bit indices
  const bool convs = b.consumers_want_nhwc(last.outputs[0]);
  const int xi = b.input(n, 0);
  if (b.slot(xi).dtype != b.stored(last.outputs[0], b.value(last.outputs[0]).dtype)) return false;
  const int y = b.output(last, 0, convs);
  SpaceToDepthShape sh;
  sh.n = x[0];
  sh.c = x[1];
  sh.h = x[2];
  sh.w = x[3];
  sh.s = s;
  sh.pad_top = pads[2];
  sh.pad_left = pads[3];
  sh.oh = hp / s;
  sh.ow = wp / s;
  sh.c_out = c_out;
  sh.nhwc = b.slot(y).nhwc;
  const std::size_t es = dtype_size(b.slot(xi).dtype);
  b.add(n.name + " + " + last.name, {xi, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    space_to_depth(es, bd.at(xi), bd.at(y), sh, st);
  }, "SpaceToDepth");
  b.skip(*cut);
  b.skip(*move);
  b.skip(*depth);
  if (widen) b.skip(*widen);
  return true;
}

void lower_pad(Builder& b, const Node& n) {
  if (lower_space_to_depth(b, n)) return;
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  check_rank(b, n, xs);
  const std::size_t r = xs.size();
  const std::vector<int64_t> pads = b.const_ints(n, 1, "pads");
  std::vector<int64_t> axes;
  if (b.has_input(n, 3)) axes = b.const_ints(n, 3, "axes");
  else for (std::size_t d = 0; d < r; ++d) axes.push_back(static_cast<int64_t>(d));
  if (pads.size() != 2 * axes.size()) b.fail(n, pads.size(), " pads for ", axes.size(), " axes");
  PadShape ps;
  ps.rank = static_cast<int>(r);
  for (std::size_t d = 0; d < r; ++d) {
    ps.in[d] = xs[d];
    ps.out[d] = ys[d];
  }
  for (std::size_t i = 0; i < axes.size(); ++i) ps.begin[b.axis(n, axes[i], static_cast<int64_t>(r))] = pads[i];
  const std::string mode = n.get_string("mode", "constant");
  if (mode == "constant") ps.mode = PadMode::Constant;
  else if (mode == "reflect") ps.mode = PadMode::Reflect;
  else if (mode == "edge") ps.mode = PadMode::Edge;
  else if (mode == "wrap") ps.mode = PadMode::Wrap;
  else b.fail(n, "mode '", mode, "' is unknown");
  double value = 0.0;
  if (b.has_input(n, 2)) {
    const Tensor& v = b.require_const(n, 2, "constant_value");
    if (v.numel() > 0) value = v.as_float().at(0);
  }
  ps.value_bits = scalar_bits(b.slot(x).dtype, value);
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { pad(es, bd.at(x), bd.at(y), ps, s); });
}

// Expand and Tile: each output index reads input index (i % in_dim) per dim.
void lower_repeat(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  check_rank(b, n, ys);
  if (xs.size() > ys.size()) b.fail(n, "input ", shape_str(xs), " has more dims than the output ", shape_str(ys));
  const auto st = contiguous_strides(xs);
  CopyShape cs;
  cs.rank = static_cast<int>(ys.size());
  const std::size_t lead = ys.size() - xs.size();
  for (std::size_t d = 0; d < ys.size(); ++d) {
    cs.out[d] = ys[d];
    cs.in_dim[d] = d < lead ? 1 : xs[d - lead];
    cs.in_stride[d] = d < lead ? 0 : st[d - lead];
  }
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(x), bd.at(y), cs, s); });
}

}  // namespace

bool lower_layout(Builder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op;
  if (op == "Dropout" && b.has_output(n, 1)) b.fail(n, "the mask output of Dropout is not supported");
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" || op == "Dropout")
    lower_view(b, n);
  else if (op == "Transpose") lower_transpose(b, n);
  else if (op == "Concat") lower_concat(b, n);
  else if (op == "Split") lower_split(b, n);
  else if (op == "Slice") lower_slice(b, n);
  else if (op == "Gather") lower_gather(b, n);
  else if (op == "Pad") lower_pad(b, n);
  else if (op == "Expand" || op == "Tile") lower_repeat(b, n);
  else if (op == "Resize" || op == "Upsample") lower_resize(b, n);   // ops_resize.cpp
  else return false;
  return true;
}

}  // namespace sluice::cuda
