// Resize and Upsample.  Three lowerings, tried in this order:
//   - the output tail: a 2-D linear or nearest resize whose result only feeds the job's heads
//     (stored logits in any float type, argmax, softmax, top-k over the channels) becomes one kernel
//     that writes every stored output straight from the low-resolution input (kernels_tail.cu);
//   - a broadcast: every resized axis has extent 1 (DeepLabV3's ASPP pooling branch, 1x1 -> HxW),
//     so every output element is its input element: a strided copy, no interpolation;
//   - the resize kernels (kernels_resize.cu), channels-last inputs resized channels-last;
// and antialias (opset 18) as two passes of precomputed taps (engine/resize_taps.h).
// SLUICE_CUDA_FUSE_TAILS=0 turns the first one off (for measurements and tests).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/params.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"
#include "engine/resize_taps.h"

namespace sluice::cuda {
namespace {

CoordMode coord_mode(const Builder& b, const Node& n, const std::string& m) {
  if (m == "half_pixel") return CoordMode::HalfPixel;
  if (m == "pytorch_half_pixel") return CoordMode::PytorchHalfPixel;
  if (m == "align_corners") return CoordMode::AlignCorners;
  if (m == "asymmetric") return CoordMode::Asymmetric;
  if (m == "tf_half_pixel_for_nn") return CoordMode::TfHalfPixelForNearest;
  if (m == "half_pixel_symmetric") return CoordMode::HalfPixelSymmetric;
  b.fail(n, "coordinate_transformation_mode '", m, "' is not supported");
}

// ONNX Resize's parameters for input xs and output ys (logical shapes, logical dim order).
ResizeShape resize_params(const Builder& b, const Node& n, const Shape& xs, const Shape& ys) {
  const std::size_t r = xs.size();
  if (r > static_cast<std::size_t>(kMaxRank)) b.fail(n, "rank ", r, " is above the supported ", kMaxRank);
  if (ys.size() != r) b.fail(n, "output ", shape_str(ys), " and input ", shape_str(xs), " differ in rank");
  const bool legacy = n.op == "Upsample" || b.graph.opset < 11;
  ResizeShape rs;
  rs.rank = static_cast<int>(r);
  const std::string mode = n.get_string("mode", "nearest");
  if (mode == "nearest") rs.mode = ResizeMode::Nearest;
  else if (mode == "linear" || mode == "bilinear") rs.mode = ResizeMode::Linear;
  else if (mode == "cubic") rs.mode = ResizeMode::Cubic;
  else b.fail(n, "mode '", mode, "' is not supported");
  rs.coord = coord_mode(b, n, legacy ? "asymmetric" : n.get_string("coordinate_transformation_mode", "half_pixel"));
  const std::string nearest = legacy ? "simple" : n.get_string("nearest_mode", "round_prefer_floor");
  if (nearest == "round_prefer_floor") rs.nearest = NearestMode::RoundPreferFloor;
  else if (nearest == "round_prefer_ceil") rs.nearest = NearestMode::RoundPreferCeil;
  else if (nearest == "floor") rs.nearest = NearestMode::Floor;
  else if (nearest == "ceil") rs.nearest = NearestMode::Ceil;
  else if (nearest == "simple") rs.nearest = NearestMode::Simple;
  else b.fail(n, "nearest_mode '", nearest, "' is unknown");
  if (n.get_int("antialias", 0) != 0 && rs.mode == ResizeMode::Nearest) b.fail(n, "antialias=1 applies to linear and cubic modes, not nearest");
  rs.cubic_a = n.get_float("cubic_coeff_a", -0.75f);
  rs.exclude_outside = n.get_int("exclude_outside", 0) != 0;

  // Scales per axis, with the ONNX rules: the scales input, else sizes / input (opset-18 axes and
  // keep_aspect_ratio_policy included), else output / input.
  std::vector<int64_t> axes(r);
  for (std::size_t d = 0; d < r; ++d) axes[d] = static_cast<int64_t>(d);
  if (n.has("axes")) {
    axes = n.get_ints("axes");
    for (auto& a : axes) a = b.axis(n, a, static_cast<int64_t>(r));
  }
  std::vector<float> scales(r, 1.f), given;
  std::vector<int64_t> sizes;
  if (n.op == "Upsample" && b.graph.opset < 9) {
    given = n.get_floats("scales");
  } else {
    const std::size_t si = legacy ? 1 : 2;
    if (b.has_input(n, si) && b.require_const(n, si, "scales").numel() > 0) given = b.const_floats(n, si, "scales");
    if (!legacy && b.has_input(n, 3) && b.require_const(n, 3, "sizes").numel() > 0) sizes = b.const_ints(n, 3, "sizes");
  }
  if (!given.empty()) {
    if (given.size() != axes.size()) b.fail(n, "scales has ", given.size(), " values for ", axes.size(), " axes");
    for (std::size_t i = 0; i < axes.size(); ++i) {
      if (!(given[i] > 0.f)) b.fail(n, "scales must be positive");
      scales[static_cast<std::size_t>(axes[i])] = given[i];
    }
  } else if (!sizes.empty()) {
    if (sizes.size() != axes.size()) b.fail(n, "sizes has ", sizes.size(), " values for ", axes.size(), " axes");
    const std::string policy = n.get_string("keep_aspect_ratio_policy", "stretch");
    float keep = policy == "not_larger" ? 1e30f : 0.f;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const float s = static_cast<float>(sizes[i]) / static_cast<float>(xs[static_cast<std::size_t>(axes[i])]);
      scales[static_cast<std::size_t>(axes[i])] = s;
      keep = policy == "not_larger" ? std::min(keep, s) : std::max(keep, s);
    }
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller") b.fail(n, "keep_aspect_ratio_policy '", policy, "' is unknown");
      for (auto a : axes) scales[static_cast<std::size_t>(a)] = keep;
    }
  } else {
    for (std::size_t d = 0; d < r; ++d) scales[d] = static_cast<float>(ys[d]) / static_cast<float>(xs[d]);
  }
  for (std::size_t d = 0; d < r; ++d) {
    rs.in[d] = xs[d];
    rs.out[d] = ys[d];
    rs.scale[d] = scales[d];
  }
  return rs;
}

// The same parameters with the dims in channels-last memory order: memory dim d holds logical dim
// (0, 2, 3, 1)[d].
ResizeShape channels_last_order(const ResizeShape& l) {
  ResizeShape m = l;
  static const int from[4] = {0, 2, 3, 1};
  for (int d = 0; d < 4; ++d) {
    m.in[d] = l.in[from[d]];
    m.out[d] = l.out[from[d]];
    m.scale[d] = l.scale[from[d]];
  }
  return m;
}

bool keeps(const ResizeShape& s, int d) { return s.in[d] == s.out[d] && s.scale[d] == 1.f; }

// ---- the output tail ------------------------------------------------------------------------------

bool fuse_tails() {
  static const bool on = param_on("SLUICE_CUDA_FUSE_TAILS");
  return on;
}

// `name` is written only to the graph outputs (no node reads it).
bool only_output(const Builder& b, const std::string& name) { return b.is_graph_output(name) && b.consumers(name).empty(); }

// A head's result `name` as stored: the graph output itself, or the output of exactly one Cast to a
// type `allowed` accepts.  Returns the stored tensor's name ("" when the pattern does not hold) and
// the Cast to skip.
template <typename Allowed>
std::string stored_through_cast(const Builder& b, const std::string& name, const Node** cast, Allowed allowed) {
  *cast = nullptr;
  if (only_output(b, name)) return name;
  const auto readers = b.consumers(name);
  if (b.is_graph_output(name) || readers.size() != 1) return "";
  const Node& c = *readers[0];
  if (c.op != "Cast" || !c.domain.empty() || c.outputs.size() != 1 || !only_output(b, c.outputs[0])) return "";
  if (!allowed(b.value(c.outputs[0]).dtype)) return "";
  *cast = &c;
  return c.outputs[0];
}

// A float result: stored as it is, or through one Cast to another float type.
std::string stored_float(const Builder& b, const std::string& name, const Node** cast) {
  return stored_through_cast(b, name, cast, [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; });
}

// An index result: stored as int64, or through one Cast to int32.
std::string stored_index(const Builder& b, const std::string& name, const Node** cast) {
  return stored_through_cast(b, name, cast, [](DType t) { return t == DType::I32 || t == DType::I64; });
}

// Lowers the Resize and all its readers as one tail step when every reader is a head the tail
// kernel computes; false (nothing added) otherwise.
bool lower_tail(Builder& b, const Node& n, int x, const ResizeShape& rs) {
  if (!fuse_tails() || rs.rank != 4 || !keeps(rs, 0) || !keeps(rs, 1) || (keeps(rs, 2) && keeps(rs, 3))) return false;
  if (rs.mode != ResizeMode::Linear && rs.mode != ResizeMode::Nearest) return false;
  if (b.slot(x).dtype != b.compute) return false;   // the kernel reads the float compute type
  const std::string& yname = n.outputs.at(0);
  std::vector<const Node*> fused;
  std::string logits, argmax, softmax, values, indices;
  bool select_last = false;
  int64_t k = 0;
  if (b.is_graph_output(yname)) logits = yname;
  for (const Node* c : b.consumers(yname)) {
    const Node* cast = nullptr;   // a Cast behind the head, skipped with it
    std::string out;
    if (c->inputs.empty() || c->inputs[0] != yname) return false;
    if (c->op == "ArgMaxCast" && c->domain == "sluice") {
      if (b.axis(*c, c->get_int("axis", 0), 4) != 1 || !only_output(b, c->outputs.at(0)) || !argmax.empty()) return false;
      argmax = c->outputs[0];
    } else if (c->op == "ArgMax" && c->domain.empty()) {
      if (b.axis(*c, c->get_int("axis", 0), 4) != 1 || !only_output(b, c->outputs.at(0)) || !argmax.empty()) return false;
      argmax = c->outputs[0];
      select_last = c->get_int("select_last_index", 0) != 0;
    } else if (c->op == "Softmax" && c->domain.empty() && b.graph.opset >= 13) {
      if (b.axis(*c, c->get_int("axis", -1), 4) != 1 || !softmax.empty()) return false;
      out = stored_float(b, c->outputs.at(0), &cast);
      if (out.empty()) return false;
      softmax = out;
    } else if (c->op == "TopK" && c->domain.empty()) {
      if (b.axis(*c, c->get_int("axis", -1), 4) != 1 || c->get_int("largest", 1) != 1 || !values.empty() || !indices.empty())
        return false;
      const Tensor* kt = b.const_input(*c, 1);
      if (!kt || kt->numel() != 1) return false;
      k = kt->as_int64()[0];
      if (k < 1 || k > rs.in[1] || c->outputs.size() != 2) return false;
      const Node* vcast = nullptr;
      const Node* icast = nullptr;
      values = stored_float(b, c->outputs[0], &vcast);
      indices = stored_index(b, c->outputs[1], &icast);
      if (values.empty() || indices.empty()) return false;
      if (vcast) fused.push_back(vcast);
      if (icast) fused.push_back(icast);
    } else if (c->op == "Cast" && c->domain.empty()) {   // logits stored in another float type
      const DType t = b.value(c->outputs.at(0)).dtype;
      if (!only_output(b, c->outputs[0]) || !logits.empty() || (t != DType::F32 && t != DType::F16 && t != DType::BF16))
        return false;
      logits = c->outputs[0];
    } else {
      return false;
    }
    fused.push_back(c);
    if (cast) fused.push_back(cast);
  }
  if (logits.empty() && argmax.empty() && softmax.empty() && values.empty()) return false;

  // Every pattern holds: claim the outputs and skip the heads.
  TailOutputs o;
  std::vector<int> uses = {x};
  int lg = -1, am = -1, sm = -1, tv = -1, ti = -1;
  auto claim = [&](const std::string& name, int* slot, DType* type) {
    if (name.empty()) return;
    *slot = b.graph_output(name);
    if (*slot < 0) b.fail(n, "output '", name, "' is written twice");
    *type = b.slot(*slot).dtype;
    uses.push_back(*slot);
  };
  claim(logits, &lg, &o.logits_type);
  claim(argmax, &am, &o.argmax_type);
  claim(softmax, &sm, &o.softmax_type);
  claim(values, &tv, &o.values_type);
  claim(indices, &ti, &o.indices_type);
  o.argmax_select_last = select_last;
  o.k = k;
  for (const Node* f : fused) b.skip(*f);
  const DType t = b.slot(x).dtype;
  const bool nhwc = b.is_nhwc(x);
  b.add(n.name, uses, [=](Context&, const Bindings& bd, cudaStream_t s) {
    TailOutputs out = o;
    if (lg >= 0) out.logits = bd.at(lg);
    if (am >= 0) out.argmax = bd.at(am);
    if (sm >= 0) out.softmax = bd.at(sm);
    if (tv >= 0) out.topk_values = bd.at(tv);
    if (ti >= 0) out.topk_indices = bd.at(ti);
    resize_tail(t, bd.at(x), rs, nhwc, out, s);
  }, "OutputTail");
  return true;
}

}  // namespace

// Antialiased linear or cubic Resize of the last two axes (engine/resize_taps.h): a pass along the
// rows into a float32 scratch, then one along the columns, each output a weighted sum of its taps.
void lower_antialias(Builder& b, const Node& n, const ResizeShape& rs) {
  const int x = b.input(n, 0);
  const int y = b.output(n, 0);
  const int r = rs.rank;
  if (r < 2) b.fail(n, "antialias needs rank 2 or more");
  for (int d = 0; d + 2 < r; ++d)
    if (rs.in[d] != rs.out[d]) b.fail(n, "antialias resizes the last two axes only, axis ", d, " changes");
  const std::string coord = n.op == "Upsample" || b.graph.opset < 11 ? "asymmetric" : n.get_string("coordinate_transformation_mode", "half_pixel");
  if (coord != "half_pixel" && coord != "pytorch_half_pixel" && coord != "align_corners" && coord != "asymmetric")
    b.fail(n, "antialias with coordinate_transformation_mode '", coord, "' is not supported");
  const bool cubic = rs.mode == ResizeMode::Cubic;
  const int64_t ih = rs.in[r - 2], iw = rs.in[r - 1], oh = rs.out[r - 2], ow = rs.out[r - 1];
  int64_t planes = 1;
  for (int d = 0; d + 2 < r; ++d) planes *= rs.in[d];
  const ResizeTaps ty = antialias_taps(coord, rs.scale[r - 2], ih, oh, cubic, rs.cubic_a, rs.exclude_outside);
  const ResizeTaps tx = antialias_taps(coord, rs.scale[r - 1], iw, ow, cubic, rs.cubic_a, rs.exclude_outside);
  auto table = [&](const ResizeTaps& t, int64_t len, const char* axis) {
    const int idx = b.constant(n.name + " (" + axis + " taps)", Tensor::from(DType::I64, {len, t.width}, t.index));
    const int w = b.constant(n.name + " (" + axis + " weights)", Tensor::from(DType::F32, {len, t.width}, t.weight));
    return std::make_pair(idx, w);
  };
  const auto [iy, wy] = table(ty, oh, "row");
  const auto [ix, wx] = table(tx, ow, "column");
  const int mid = b.temp(DType::F32, {planes, ih, ow}, n.name + " (rows resized)");
  const DType t = b.slot(x).dtype, to = b.slot(y).dtype;
  const int64_t kx = tx.width, ky = ty.width;
  b.add(n.name, {x, mid, ix, wx}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    resize_taps(t, DType::F32, bd.at(x), bd.at(mid), bd.at<int64_t>(ix), bd.at<float>(wx), planes * ih, iw, ow, 1, kx, s);
  });
  b.add(n.name + " columns", {mid, y, iy, wy}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    resize_taps(DType::F32, to, bd.at(mid), bd.at(y), bd.at<int64_t>(iy), bd.at<float>(wy), planes, ih, oh, ow, ky, s);
  });
}

namespace {

// SLUICE_CUDA_RESIZE_VIEWS=0 copies a Resize that changes no size (read at the step's lowering).
bool resize_views_on() { return switch_on("SLUICE_CUDA_RESIZE_VIEWS"); }

// A Resize whose every axis keeps its size and scale (Segformer's decode head "upsamples" its
// first stage to its own size) gives each output element its input element in every mode (the
// kernels pass such axes through; tf_crop_and_resize is refused earlier), so its output is a view
// of the input in the input's layout.  Graph outputs and type changes keep the kernel.
bool lower_same_size_view(Builder& b, const Node& n, int x, const ResizeShape& rs) {
  if (!resize_views_on() || b.is_graph_output(n.outputs.at(0))) return false;
  for (int d = 0; d < rs.rank; ++d)
    if (!keeps(rs, d)) return false;
  const TensorSlot xs = b.slot(x);
  if (b.stored(n.outputs.at(0), b.value(n.outputs.at(0)).dtype) != xs.dtype) return false;
  const int y = b.output(n, 0, xs.nhwc);
  TensorSlot& ys = b.slots[static_cast<std::size_t>(y)];
  if (ys.bytes != xs.bytes || ys.nhwc != xs.nhwc) b.fail(n, "same-size view of ", xs.bytes, " bytes has ", ys.bytes);
  ys.where = Where::Alias;
  ys.index = xs.where == Where::Alias ? xs.index : x;
  ys.offset = xs.where == Where::Alias ? xs.offset : 0;
  return true;
}

}  // namespace

void lower_resize(Builder& b, const Node& n) {
  const int any = b.input_any(n, 0);
  const Shape xs = b.slot(any).shape, ys = b.value(n.outputs.at(0)).shape;
  const ResizeShape logical = resize_params(b, n, xs, ys);
  if (logical.mode != ResizeMode::Nearest && b.slot(any).dtype != b.compute) b.fail(n, "interpolating Resize needs a float input");
  if (n.get_int("antialias", 0) != 0) {
    lower_antialias(b, n, logical);
    return;
  }
  if (lower_tail(b, n, any, logical)) return;

  // A channels-last input is resized channels-last: the kernels work on the dims in memory order.
  const bool nhwc = b.is_nhwc(any);
  if (lower_same_size_view(b, n, any, logical)) return;
  const int x = nhwc ? any : b.input(n, 0);
  const int y = b.output(n, 0, nhwc);
  const ResizeShape rs = nhwc ? channels_last_order(logical) : logical;
  const DType t = b.slot(x).dtype;
  bool broadcast = true, resized = false;
  for (int d = 0; d < rs.rank; ++d) {
    if (keeps(rs, d)) continue;
    resized = true;
    broadcast = broadcast && rs.in[d] == 1;
  }
  if (broadcast && resized) {
    // Each output element equals its input element whatever the mode: all taps read the one source.
    CopyShape cs;
    cs.rank = rs.rank;
    int64_t stride = 1;
    for (int d = rs.rank - 1; d >= 0; --d) {
      cs.out[d] = rs.out[d];
      cs.in_dim[d] = rs.in[d];
      cs.in_stride[d] = rs.in[d] == 1 ? 0 : stride;
      stride *= rs.in[d];
    }
    const std::size_t es = dtype_size(t);
    b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(x), bd.at(y), cs, s); });
    return;
  }
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { resize(t, bd.at(x), bd.at(y), rs, s); });
}

}  // namespace sluice::cuda
