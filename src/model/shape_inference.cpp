#include "model/shape_inference.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "model/canonicalize.h"
#include "model/detections.h"
#include "model/einsum.h"
#include "model/graph_util.h"
#include "model/op_arity.h"
#include "model/shape_math.h"

namespace sluice {

namespace {

struct Ctx {
  const Graph& g;
  const Node& n;
  const std::vector<const ValueInfo*>& in;
  std::vector<ValueInfo>& out;
  std::string& why;

  [[noreturn]] void fail(const std::string& msg) const { throw InputError(node_context(g, n) + msg); }
  const ValueInfo* input(std::size_t i) const { return i < in.size() ? in[i] : nullptr; }
  // A constant input's value, or nullptr (absent, or computed at run time).
  const Tensor* value(std::size_t i) const { return n.input(i).empty() ? nullptr : g.constant(n.input(i)); }
  bool missing(std::size_t i, const char* what) {
    why = str("its ", what, " input '", n.input(i), "' is not known");
    return false;
  }
  bool not_constant(std::size_t i, const char* what) {
    why = str("its ", what, " input '", n.input(i), "' is computed at run time; Sluice needs it to be a constant "
              "once the input shape is fixed");
    return false;
  }
  void set(std::size_t k, DType t, Shape s) {
    if (k < out.size()) { out[k].dtype = t; out[k].shape = std::move(s); }
  }
};

int64_t rank_of(const ValueInfo* v) { return static_cast<int64_t>(v->shape.size()); }

// Window attributes (kernel, stride, dilation, padding) beyond this are not a real model's, and
// bounding them keeps every output-size formula below far from overflow.
constexpr int64_t kMaxWindow = int64_t(1) << 31;

void check_window(Ctx& c, const char* what, const std::vector<int64_t>& v, int64_t lo) {
  for (int64_t x : v)
    if (x < lo || x > kMaxWindow)
      c.fail(str(what, " ", shape_str(v), " must hold values from ", lo, " to 2^31"));
}

// A per-output-channel operand (bias, BatchNorm statistics) must hold exactly `count` values: the
// engines read that many.
void check_channel_operand(Ctx& c, std::size_t i, const char* what, int64_t count) {
  const ValueInfo* v = c.input(i);
  if (v && shape_numel(v->shape) != count)
    c.fail(str(what, " ", shape_str(v->shape), " must hold ", count, " values, one per channel"));
}

// Output spatial sizes of Conv/FusedConv/MaxPool/AveragePool.
Shape pooled_spatial(Ctx& c, const Shape& x, const std::vector<int64_t>& kernel, bool ceil_mode) {
  const std::size_t sp = kernel.size();
  if (x.size() != sp + 2) c.fail(str("input ", shape_str(x), " does not match a ", sp, "-D kernel"));
  const std::vector<int64_t> strides = c.n.get_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = c.n.get_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = c.n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::string auto_pad = c.n.get_string("auto_pad", "NOTSET");
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp)
    c.fail("strides, dilations or pads do not match the kernel's rank");
  check_window(c, "kernel_shape", kernel, 1);
  check_window(c, "strides", strides, 1);
  check_window(c, "dilations", dil, 1);
  check_window(c, "pads", pads, 0);
  const char* what = "window size";
  Shape out(sp);
  for (std::size_t i = 0; i < sp; ++i) {
    const int64_t in = x[i + 2], ek = (kernel[i] - 1) * dil[i] + 1;  // < 2^62: both factors <= 2^31
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[i] = checked_add(in, strides[i] - 1, what) / strides[i];
      continue;
    }
    if (auto_pad == "VALID") pads[i] = pads[i + sp] = 0;
    const int64_t span = checked_add(in, pads[i] + pads[i + sp] - ek, what);
    if (span < 0) c.fail(str("kernel ", shape_str(kernel), " is larger than the padded input ", shape_str(x)));
    if (ceil_mode) {
      out[i] = checked_add(span, strides[i] - 1, what) / strides[i] + 1;
      // The last window must start inside the input or its left padding (PyTorch and ORT agree).
      if ((out[i] - 1) * strides[i] >= in + pads[i]) --out[i];
    } else {
      out[i] = span / strides[i] + 1;
    }
  }
  return out;
}

bool infer_conv(Ctx& c) {
  const ValueInfo *x = c.input(0), *w = c.input(1);
  if (!x) return c.missing(0, "X");
  if (!w) return c.missing(1, "W");
  if (x->shape.size() < 3 || w->shape.size() != x->shape.size())
    c.fail(str("input ", shape_str(x->shape), " and weights ", shape_str(w->shape), " do not fit a convolution"));
  const int64_t group = c.n.get_int("group", 1);
  const Shape wk(w->shape.begin() + 2, w->shape.end());
  std::vector<int64_t> kernel = c.n.get_ints("kernel_shape", wk);
  if (kernel != wk) c.fail(str("kernel_shape ", shape_str(kernel), " differs from the weights' ", shape_str(w->shape)));
  if (group < 1 || group > kMaxWindow || w->shape[0] % group != 0)
    c.fail(str("group ", group, " does not divide the ", w->shape[0], " output channels"));
  const int64_t in_channels = checked_mul(w->shape[1], group, "Conv input channels");
  if (x->shape[1] != in_channels)
    c.fail(str("input ", shape_str(x->shape), " has ", x->shape[1], " channels but the weights ", shape_str(w->shape),
               " with group ", group, " expect ", in_channels));
  check_channel_operand(c, 2, "bias", w->shape[0]);
  Shape out = {x->shape[0], w->shape[0]};
  for (int64_t d : pooled_spatial(c, x->shape, kernel, false)) out.push_back(d);
  if (c.n.op == "FusedConv" && c.input(3) && c.input(3)->shape != out)
    c.fail(str("residual input ", shape_str(c.input(3)->shape), " does not match the output ", shape_str(out)));
  c.set(0, x->dtype, out);
  return true;
}

bool infer_conv_transpose(Ctx& c) {
  const ValueInfo *x = c.input(0), *w = c.input(1);
  if (!x) return c.missing(0, "X");
  if (!w) return c.missing(1, "W");
  if (x->shape.size() < 3 || w->shape.size() != x->shape.size() || x->shape[1] != w->shape[0])
    c.fail(str("input ", shape_str(x->shape), " and weights ", shape_str(w->shape), " do not fit a transposed convolution"));
  const std::size_t sp = x->shape.size() - 2;
  const int64_t group = c.n.get_int("group", 1);
  const std::vector<int64_t> kernel = c.n.get_ints("kernel_shape", Shape(w->shape.begin() + 2, w->shape.end()));
  const std::vector<int64_t> strides = c.n.get_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = c.n.get_ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> opad = c.n.get_ints("output_padding", std::vector<int64_t>(sp, 0));
  const std::vector<int64_t> pads = c.n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::vector<int64_t> oshape = c.n.get_ints("output_shape");
  const std::string auto_pad = c.n.get_string("auto_pad", "NOTSET");
  if (kernel.size() != sp || strides.size() != sp || dil.size() != sp || opad.size() != sp || pads.size() != 2 * sp)
    c.fail("kernel_shape, strides, dilations, output_padding or pads do not match the input's rank");
  if (!oshape.empty() && oshape.size() < sp) c.fail(str("output_shape ", shape_str(oshape), " has too few values"));
  if (kernel != Shape(w->shape.begin() + 2, w->shape.end()))
    c.fail(str("kernel_shape ", shape_str(kernel), " differs from the weights' ", shape_str(w->shape)));
  check_window(c, "kernel_shape", kernel, 1);
  check_window(c, "strides", strides, 1);
  check_window(c, "dilations", dil, 1);
  check_window(c, "pads", pads, 0);
  check_window(c, "output_padding", opad, 0);
  if (group < 1 || group > kMaxWindow || x->shape[1] % group != 0)
    c.fail(str("group ", group, " does not divide the ", x->shape[1], " input channels"));
  const char* what = "ConvTranspose output size";
  Shape out = {x->shape[0], checked_mul(w->shape[1], group, what)};
  check_channel_operand(c, 2, "bias", out[1]);
  for (std::size_t i = 0; i < sp; ++i) {
    int64_t o;
    const int64_t in = x->shape[i + 2];
    if (!oshape.empty()) o = oshape[oshape.size() - sp + i];
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") o = checked_mul(in, strides[i], what);
    else
      o = checked_add(checked_mul(strides[i], in - 1, what),
                      opad[i] + (kernel[i] - 1) * dil[i] + 1 - (auto_pad == "VALID" ? 0 : pads[i] + pads[i + sp]), what);
    if (o <= 0) c.fail("the output would be empty");
    out.push_back(o);
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_pool(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  const std::vector<int64_t> kernel = c.n.get_ints("kernel_shape");
  if (kernel.empty()) c.fail("kernel_shape is required");
  if (c.n.op == "AveragePool" && c.n.has("dilations")) {
    for (int64_t d : c.n.get_ints("dilations")) if (d != 1) c.fail("AveragePool dilations are not supported");
  }
  const Shape spatial = pooled_spatial(c, x->shape, kernel, c.n.get_int("ceil_mode", 0) != 0);  // checks the rank
  Shape out = {x->shape[0], x->shape[1]};
  out.insert(out.end(), spatial.begin(), spatial.end());
  c.set(0, x->dtype, out);
  c.set(1, DType::I64, out);  // MaxPool's optional indices
  return true;
}

bool infer_resize(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  if (c.n.get_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    c.fail("keep_aspect_ratio_policy other than 'stretch' is not supported");
  const int64_t r = rank_of(x);
  std::vector<int64_t> axes = c.n.get_ints("axes");
  if (axes.empty()) for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = normalize_axis(a, r, c.g, c.n);
  Shape out = x->shape;
  if (!c.n.input(3).empty()) {
    const Tensor* sizes = c.value(3);
    if (!sizes) return c.not_constant(3, "sizes");
    const std::vector<int64_t> s = sizes->as_int64();
    if (s.size() != axes.size()) c.fail(str("sizes has ", s.size(), " values for ", axes.size(), " axes"));
    for (std::size_t i = 0; i < axes.size(); ++i) out[axes[i]] = s[i];
  } else if (!c.n.input(2).empty()) {
    const Tensor* scales = c.value(2);
    if (!scales) return c.not_constant(2, "scales");
    const std::vector<float> s = scales->as_float();
    if (s.size() != axes.size()) c.fail(str("scales has ", s.size(), " values for ", axes.size(), " axes"));
    // float arithmetic, as onnxruntime does: floor(in * scale)
    for (std::size_t i = 0; i < axes.size(); ++i)
      out[axes[i]] = saturate_to_int64(std::floor(static_cast<float>(x->shape[axes[i]]) * s[i]));
  } else {
    c.fail("neither scales nor sizes is given");
  }
  for (int64_t d : out) if (d <= 0) c.fail(str("the output shape ", shape_str(out), " is empty"));
  c.set(0, x->dtype, out);
  return true;
}

bool infer_matmul(Ctx& c, bool gemm) {
  const ValueInfo *a = c.input(0), *b = c.input(1);
  if (!a) return c.missing(0, "A");
  if (!b) return c.missing(1, "B");
  if (gemm) {
    if (a->shape.size() != 2 || b->shape.size() != 2) c.fail("Gemm needs 2-D inputs");
    const bool ta = c.n.get_int("transA", 0) != 0, tb = c.n.get_int("transB", 0) != 0;
    const int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
    const int64_t k2 = tb ? b->shape[1] : b->shape[0], nn = tb ? b->shape[0] : b->shape[1];
    if (k != k2) c.fail(str("inner dimensions differ: ", shape_str(a->shape), " x ", shape_str(b->shape)));
    if (const ValueInfo* bias = c.input(2))
      if (broadcast_shapes({m, nn}, bias->shape, c.g, c.n) != Shape{m, nn})
        c.fail(str("C ", shape_str(bias->shape), " does not broadcast to [", m, ",", nn, "]"));
    c.set(0, a->dtype, {m, nn});
    return true;
  }
  Shape sa = a->shape, sb = b->shape;
  if (sa.empty() || sb.empty()) c.fail("MatMul of a scalar");
  const bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(sa.begin(), 1);
  if (vb) sb.push_back(1);
  if (sa.back() != sb[sb.size() - 2]) c.fail(str("inner dimensions differ: ", shape_str(a->shape), " x ", shape_str(b->shape)));
  Shape batch = broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), c.g, c.n);
  if (!va) batch.push_back(sa[sa.size() - 2]);
  if (!vb) batch.push_back(sb.back());
  c.set(0, a->dtype, batch);
  return true;
}

bool infer_reshape_like(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const Shape& s = x->shape;
  const int64_t r = rank_of(x);
  const std::string& op = c.n.op;
  Shape out;
  if (op == "Flatten") {
    int64_t axis = c.n.get_int("axis", 1);
    if (axis < -r || axis > r) c.fail(str("axis ", axis, " is out of range for rank ", r));
    if (axis < 0) axis += r;
    out = {shape_numel(Shape(s.begin(), s.begin() + axis)), shape_numel(Shape(s.begin() + axis, s.end()))};
  } else if (op == "Reshape") {
    const Tensor* shape = c.value(1);
    if (!shape) return c.not_constant(1, "shape");
    out = shape->as_int64();
    const bool allowzero = c.n.get_int("allowzero", 0) != 0;
    int64_t infer_at = -1, known = 1;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] == 0 && !allowzero) {
        if (static_cast<int64_t>(i) >= r) c.fail("shape copies a dimension the input does not have");
        out[i] = s[i];
      }
      if (out[i] == -1) {
        if (infer_at >= 0) c.fail("shape has more than one -1");
        infer_at = static_cast<int64_t>(i);
      } else if (out[i] < 0) {
        c.fail(str("invalid target shape ", shape_str(shape->as_int64())));
      } else {
        known = checked_mul(known, out[i], "Reshape target");
      }
    }
    if (infer_at >= 0) {
      if (known == 0 || shape_numel(s) % known != 0)
        c.fail(str("cannot reshape ", shape_str(s), " to ", shape_str(shape->as_int64())));
      out[infer_at] = shape_numel(s) / known;
    }
    if (shape_numel(out) != shape_numel(s)) c.fail(str("cannot reshape ", shape_str(s), " to ", shape_str(out)));
  } else if (op == "Squeeze") {
    if (!c.n.input(1).empty() && !c.value(1)) return c.not_constant(1, "axes");
    std::vector<bool> drop(s.size(), false);
    if (c.value(1)) {
      for (int64_t a : c.value(1)->as_int64()) {
        const int64_t ax = normalize_axis(a, r, c.g, c.n);
        if (s[ax] != 1) c.fail(str("cannot squeeze axis ", a, " of size ", s[ax], " in ", shape_str(s)));
        drop[ax] = true;
      }
    } else {
      for (std::size_t i = 0; i < s.size(); ++i) drop[i] = s[i] == 1;
    }
    for (std::size_t i = 0; i < s.size(); ++i) if (!drop[i]) out.push_back(s[i]);
  } else {  // Unsqueeze
    if (!c.value(1)) return c.n.input(1).empty() ? (c.fail("axes is required"), false) : c.not_constant(1, "axes");
    const std::vector<int64_t> axes = c.value(1)->as_int64();
    const int64_t orank = r + static_cast<int64_t>(axes.size());
    std::vector<bool> ins(orank, false);
    for (int64_t a : axes) {
      const int64_t ax = normalize_axis(a, orank, c.g, c.n);
      if (ins[ax]) c.fail("repeated axis");
      ins[ax] = true;
    }
    std::size_t j = 0;
    for (int64_t i = 0; i < orank; ++i) out.push_back(ins[i] ? 1 : s[j++]);
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_elementwise(Ctx& c, std::size_t first, DType out_type) {
  Shape s;
  DType t = DType::Undefined;
  for (std::size_t i = first; i < c.n.inputs.size(); ++i) {
    const ValueInfo* v = c.input(i);
    if (!v) return c.missing(i, "operand");
    if (i == first) { s = v->shape; t = v->dtype; continue; }
    s = broadcast_shapes(s, v->shape, c.g, c.n);
    if (first == 0 && out_type == DType::Undefined && v->dtype != t)
      c.fail(str("operands have different types (", dtype_name(t), " and ", dtype_name(v->dtype), ")"));
  }
  if (first == 1) {  // Where: the condition broadcasts too
    if (!c.input(0)) return c.missing(0, "condition");
    s = broadcast_shapes(c.input(0)->shape, s, c.g, c.n);
  }
  c.set(0, out_type == DType::Undefined ? t : out_type, s);
  return true;
}

bool infer_reduce(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const int64_t r = rank_of(x);
  const bool keep = c.n.get_int("keepdims", 1) != 0;
  std::vector<bool> red(r, false);
  if (!c.n.input(1).empty()) {
    if (!c.value(1)) return c.not_constant(1, "axes");
    for (int64_t a : c.value(1)->as_int64()) red[normalize_axis(a, r, c.g, c.n)] = true;
  }
  const bool none = std::none_of(red.begin(), red.end(), [](bool b) { return b; });
  if (none && c.n.get_int("noop_with_empty_axes", 0) == 0) red.assign(r, true);
  Shape out;
  for (int64_t i = 0; i < r; ++i) {
    if (!red[i]) out.push_back(x->shape[i]);
    else if (keep) out.push_back(1);
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_topk_argmax(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  const int64_t r = rank_of(x);
  const std::string& op = c.n.op;
  const int64_t axis = normalize_axis(c.n.get_int("axis", op == "TopK" ? -1 : op == "ArgMaxCast" ? 1 : 0), r, c.g, c.n);
  Shape out = x->shape;
  if (op == "TopK") {
    if (!c.value(1) && c.n.input(1).empty()) c.fail("K is required");
    if (!c.value(1)) {
      c.why = str("its K input '", c.n.input(1), "' is computed from the input data at run time (a detector's "
                  "post-processing keeps a data-dependent number of boxes); Sluice runs fixed shapes: export the "
                  "model without its post-processing and store its detections with --outputs detections");
      return false;
    }
    const std::vector<int64_t> k = c.value(1)->as_int64();
    if (k.size() != 1 || k[0] < 1 || k[0] > x->shape[axis])
      c.fail(str("K must be between 1 and ", x->shape[axis], " (the size of axis ", axis, ")"));
    out[axis] = k[0];
    c.set(0, x->dtype, out);
    c.set(1, DType::I64, out);
    return true;
  }
  if (x->shape[axis] == 0)
    c.fail(str("the arg-max of an empty axis (", shape_str(x->shape), ", axis ", axis, ") is undefined"));
  const bool keep = op == "ArgMax" && c.n.get_int("keepdims", 1) != 0;
  if (keep) out[axis] = 1;
  else out.erase(out.begin() + axis);
  DType t = DType::I64;
  if (op == "ArgMaxCast") {
    t = dtype_from_onnx(static_cast<int>(c.n.get_int("to", 7)));
    if (t != DType::U8 && t != DType::I32 && t != DType::I64) c.fail("'to' must be uint8, int32 or int64");
    if (t == DType::U8 && x->shape[axis] > 256)
      c.fail(str("uint8 indices cannot hold ", x->shape[axis], " classes; use int32"));
  }
  c.set(0, t, out);
  return true;
}

// sluice.Attention, layout "strided" (graph.h): y [N, y_shape...] from q, k, v [N, ...] whose views
// lie inside each sample's block.
bool infer_strided_attention(Ctx& c) {
  const int64_t h = c.n.get_int("heads", 0);
  const std::vector<int64_t> sz = c.n.get_ints("sizes");
  const std::vector<int64_t> ys = c.n.get_ints("y_shape");
  if (h < 1 || sz.size() != 4 || *std::min_element(sz.begin(), sz.end()) < 1 || ys.empty())
    c.fail("strided attention needs heads >= 1, sizes [S, S_kv, D, Dv] and y_shape");
  const int64_t n = c.input(0)->shape.empty() ? 0 : c.input(0)->shape[0];
  Shape y = {n};
  y.insert(y.end(), ys.begin(), ys.end());
  const char* names[4] = {"q", "k", "v", "y"};
  const char* keys[4] = {"q_view", "k_view", "v_view", "y_view"};
  for (std::size_t i = 0; i < 4; ++i) {
    const Shape& x = i < 3 ? c.input(i)->shape : y;
    const std::vector<int64_t> v = c.n.get_ints(keys[i]);
    const int64_t rows = i == 0 || i == 3 ? sz[0] : sz[1], cols = i == 2 || i == 3 ? sz[3] : sz[2];
    if (x.empty() || x[0] != n || n < 1)
      c.fail(str(names[i], " ", shape_str(x), " does not lead with the ", n, " samples of q"));
    const int64_t sample = shape_numel(x) / n;
    if (v.size() != 3 || v[0] < 0 || v[1] < 0 || v[2] < 0 || v[0] + (h - 1) * v[1] + (rows - 1) * v[2] + cols > sample)
      c.fail(str(names[i], "'s view does not lie in its sample's ", sample, " elements"));
  }
  if (const ValueInfo* b = c.input(3)) {
    const int64_t group = c.n.get_int("bias_group", 1);
    const int64_t nb = shape_numel(b->shape), per = (c.n.get_int("bias_rows", sz[0]) == 1 ? 1 : sz[0]) * sz[1];
    if (nb % per != 0 || nb == 0 || group < 1 || (n * h) % group != 0 || (n * h / group) % (nb / per) != 0)
      c.fail(str("bias ", shape_str(b->shape), " does not repeat along the ", n * h, " score matrices of ", sz[0], "x", sz[1]));
  }
  c.set(0, c.input(0)->dtype, y);
  return true;
}

// sluice.Attention (graph.h): y [L..., S, Dv] from q [L..., S, D], k, v [L..., S_kv, Dv].
bool infer_attention(Ctx& c) {
  for (std::size_t i = 0; i < 3; ++i)
    if (!c.input(i)) return c.missing(i, i == 0 ? "q" : i == 1 ? "k" : "v");
  const Shape &q = c.input(0)->shape, &k = c.input(1)->shape, &v = c.input(2)->shape;
  const std::string layout = c.n.get_string("layout", "bhsd");
  if (layout == "strided") return infer_strided_attention(c);
  if (layout != "bhsd" && layout != "bhds") c.fail(str("layout '", layout, "' is neither bhsd, bhds nor strided"));
  if (q.size() < 3 || k.size() != q.size() || v.size() != q.size())
    c.fail(str("q ", shape_str(q), ", k ", shape_str(k), " and v ", shape_str(v), " must have one rank of 3 or more"));
  const std::size_t r = q.size();
  const bool kt = layout == "bhds";
  const int64_t d = q[r - 1], s = q[r - 2], skv = v[r - 2];
  if (!std::equal(q.begin(), q.end() - 2, k.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()) ||
      (kt ? k[r - 2] : k[r - 1]) != d || (kt ? k[r - 1] : k[r - 2]) != skv)
    c.fail(str("q ", shape_str(q), ", k ", shape_str(k), " (", layout, ") and v ", shape_str(v), " do not fit together"));
  if (const ValueInfo* b = c.input(3)) {
    int64_t lead = 1;
    for (std::size_t i = 0; i + 2 < r; ++i) lead *= q[i];
    // Matrix i adds bias matrix (i / bias_group) mod P; bias_rows 1: the matrices are [1, S_kv].
    const int64_t n = shape_numel(b->shape), group = c.n.get_int("bias_group", 1);
    const int64_t per = (c.n.get_int("bias_rows", s) == 1 ? 1 : s) * skv;
    if (per == 0 || n % per != 0 || n == 0 || group < 1 || lead % group != 0 || (lead / group) % (n / per) != 0)
      c.fail(str("bias ", shape_str(b->shape), " does not repeat along the ", lead, " score matrices of ", s, "x", skv));
  }
  Shape y = v;
  y[r - 2] = s;
  c.set(0, c.input(0)->dtype, y);
  return true;
}

bool infer_constant(Ctx& c) {
  const Tensor t = constant_node_value(c.g, c.n);
  c.set(0, t.dtype, t.shape);
  return true;
}

bool infer_concat(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const int64_t r = rank_of(x);
  const int64_t axis = normalize_axis(c.n.get_int("axis", 0), r, c.g, c.n);
  Shape out = x->shape;
  for (std::size_t i = 1; i < c.n.inputs.size(); ++i) {
    const ValueInfo* v = c.input(i);
    if (!v) return c.missing(i, "operand");
    bool ok = v->dtype == x->dtype && rank_of(v) == r;
    for (int64_t d = 0; ok && d < r; ++d) ok = d == axis || v->shape[d] == x->shape[d];
    if (!ok) c.fail(str("cannot concatenate ", shape_str(x->shape), " ", dtype_name(x->dtype), " and ",
                        shape_str(v->shape), " ", dtype_name(v->dtype), " along axis ", axis));
    out[axis] = checked_add(out[axis], v->shape[axis], "Concat");
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_transpose(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  std::vector<int64_t> perm = c.n.get_ints("perm");
  if (perm.empty()) for (int64_t i = rank_of(x) - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != rank_of(x)) c.fail("perm has the wrong length");
  Shape out;
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank_of(x) || seen[p]) c.fail("perm is not a permutation");
    seen[p] = true;
    out.push_back(x->shape[p]);
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_pad(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  if (!c.value(1)) return c.n.input(1).empty() ? (c.fail("pads is required"), false) : c.not_constant(1, "pads");
  const std::vector<int64_t> pads = c.value(1)->as_int64();
  const int64_t r = rank_of(x);
  std::vector<int64_t> axes;
  if (!c.n.input(3).empty()) {
    if (!c.value(3)) return c.not_constant(3, "axes");
    for (int64_t a : c.value(3)->as_int64()) axes.push_back(normalize_axis(a, r, c.g, c.n));
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) c.fail(str("pads has ", pads.size(), " values for ", axes.size(), " axes"));
  Shape out = x->shape;
  for (std::size_t i = 0; i < axes.size(); ++i)
    out[axes[i]] = checked_add(out[axes[i]], checked_add(pads[i], pads[i + axes.size()], "Pad"), "Pad");
  for (int64_t d : out) if (d < 0) c.fail("negative pads remove more than the input holds");
  c.set(0, x->dtype, out);
  return true;
}

bool infer_shape(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const int64_t r = rank_of(x);
  int64_t b = c.n.get_int("start", 0), e = c.n.get_int("end", r);
  if (b < 0) b += r;
  if (e < 0) e += r;
  b = std::clamp<int64_t>(b, 0, r);
  e = std::clamp<int64_t>(e, b, r);
  c.set(0, DType::I64, {e - b});
  return true;
}

bool infer_size(Ctx& c) {
  if (!c.input(0)) return c.missing(0, "data");
  c.set(0, DType::I64, {});
  return true;
}

bool infer_gather(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const ValueInfo* idx = c.input(1);
  if (!idx) return c.missing(1, "indices");
  const int64_t axis = normalize_axis(c.n.get_int("axis", 0), rank_of(x), c.g, c.n);
  Shape out(x->shape.begin(), x->shape.begin() + axis);
  out.insert(out.end(), idx->shape.begin(), idx->shape.end());
  out.insert(out.end(), x->shape.begin() + axis + 1, x->shape.end());
  c.set(0, x->dtype, out);
  return true;
}

bool infer_slice(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  for (std::size_t i = 1; i < c.n.inputs.size(); ++i)
    if (!c.n.input(i).empty() && !c.value(i)) return c.not_constant(i, "starts/ends/axes/steps");
  if (!c.value(1) || !c.value(2)) c.fail("starts and ends are required");
  const std::vector<int64_t> starts = c.value(1)->as_int64(), ends = c.value(2)->as_int64();
  std::vector<int64_t> axes, steps;
  if (c.value(3)) axes = c.value(3)->as_int64();
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  steps = c.value(4) ? c.value(4)->as_int64() : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps differ in length");
  Shape out = x->shape;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = normalize_axis(axes[i], rank_of(x), c.g, c.n);
    if (steps[i] == 0) c.fail("step 0");
    int64_t b = starts[i];
    out[a] = slice_length(x->shape[a], b, ends[i], steps[i]);
  }
  c.set(0, x->dtype, out);
  return true;
}

bool infer_cast(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const DType to = dtype_from_onnx(static_cast<int>(c.n.get_int("to", 0)));
  if (to == DType::Undefined) c.fail(str("Cast to an unsupported type ", c.n.get_int("to", 0)));
  c.set(0, to, x->shape);
  return true;
}

bool infer_normalize(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  if (x->shape.size() < 2) c.fail("input needs a channel axis");
  c.set(0, DType::F32, x->shape);
  return true;
}

bool infer_batchnorm(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  if (x->shape.size() < 2) c.fail("input needs a channel axis");
  for (std::size_t i = 1; i < 5; ++i) check_channel_operand(c, i, "scale, bias, mean and variance", x->shape[1]);
  c.set(0, x->dtype, x->shape);
  for (std::size_t k = 1; k < c.out.size(); ++k) c.set(k, x->dtype, {x->shape[1]});
  return true;
}

// ConstantOfShape, Expand and Tile: the output shape is a constant input.
bool infer_expand_like(Ctx& c) {
  const std::string& op = c.n.op;
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "data");
  const std::size_t si = op == "ConstantOfShape" ? 0 : 1;
  if (!c.value(si)) return c.not_constant(si, "shape");
  const std::vector<int64_t> v = c.value(si)->as_int64();
  if (op == "ConstantOfShape") {
    const Attribute* a = c.n.has("value") ? &c.n.attrs.at("value") : nullptr;
    c.set(0, a && a->t ? a->t->dtype : DType::F32, v);
  } else if (op == "Expand") {
    c.set(0, x->dtype, broadcast_shapes(x->shape, v, c.g, c.n));
  } else {
    Shape out = x->shape;
    if (v.size() != out.size()) c.fail("repeats has the wrong length");
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (v[i] < 0) c.fail(str("repeats ", shape_str(v), " has a negative value"));
      out[i] = checked_mul(out[i], v[i], "Tile repeats");
    }
    c.set(0, x->dtype, out);
  }
  return true;
}

bool infer_range(Ctx& c) {
  for (std::size_t i = 0; i < 3; ++i) if (!c.value(i)) return c.not_constant(i, "start/limit/delta");
  const int64_t count = range_length(c.g, c.n, *c.value(0), *c.value(1), *c.value(2));
  if (count < 0) { c.why = "the range is too long to fold"; return false; }
  c.set(0, c.value(0)->dtype, {count});
  return true;
}

// The int64 values of an optional constant input, or of the ints attribute that older opsets used.
bool ints_of(Ctx& c, std::size_t i, const char* attr, const char* what, std::vector<int64_t>& v, bool& given) {
  given = false;
  if (!c.n.input(i).empty()) {
    if (!c.value(i)) return c.not_constant(i, what);
    v = c.value(i)->as_int64();
    given = true;
  } else if (attr && c.n.has(attr)) {
    v = c.n.get_ints(attr);
    given = true;
  }
  return true;
}

// Sizes of Split's outputs along its axis.
bool split_sizes(Ctx& c, int64_t dim, std::vector<int64_t>& sizes) {
  bool given = false;
  if (!ints_of(c, 1, "split", "split", sizes, given)) return false;
  const int64_t parts = static_cast<int64_t>(c.n.outputs.size());
  if (given) {
    if (static_cast<int64_t>(sizes.size()) != parts)
      c.fail(str("split ", shape_str(sizes), " has ", sizes.size(), " sizes for ", parts, " outputs"));
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) c.fail(str("split ", shape_str(sizes), " has a negative size"));
      sum = checked_add(sum, s, "Split");
    }
    if (sum != dim) c.fail(str("split ", shape_str(sizes), " adds up to ", sum, ", not the axis' ", dim));
    return true;
  }
  const int64_t k = c.n.has("num_outputs") ? c.n.get_int("num_outputs", parts) : parts;
  if (k != parts) c.fail(str("num_outputs is ", k, " but the node has ", parts, " outputs"));
  if (k < 1) c.fail("Split needs at least one output");
  // Opset 18: ceil(dim / k) each, the last one smaller; before: equal parts.
  const int64_t each = (dim + k - 1) / k;
  if (!c.n.has("num_outputs") && dim % k != 0)
    c.fail(str("the axis of size ", dim, " does not split into ", k, " equal parts"));
  for (int64_t i = 0; i < k; ++i) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  return true;
}

bool infer_layer_norm(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  const int64_t r = rank_of(x);
  const int64_t axis = normalize_axis(c.n.get_int("axis", -1), r, c.g, c.n);
  const Shape norm(x->shape.begin() + axis, x->shape.end());
  for (std::size_t i = 1; i < 3; ++i)
    if (const ValueInfo* p = c.input(i))
      if (broadcast_shapes(norm, p->shape, c.g, c.n) != norm)
        c.fail(str("scale and bias ", shape_str(p->shape), " must broadcast to the normalized axes ", shape_str(norm)));
  c.set(0, x->dtype, x->shape);
  Shape stats = x->shape;
  std::fill(stats.begin() + axis, stats.end(), 1);
  c.set(1, DType::F32, stats);
  c.set(2, DType::F32, stats);
  return true;
}

// GroupNormalization and InstanceNormalization.
bool infer_group_norm(Ctx& c) {
  const std::string& op = c.n.op;
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  if (x->shape.size() < 2) c.fail("input needs a channel axis");
  const int64_t ch = x->shape[1];
  if (op == "GroupNormalization") {
    const int64_t groups = c.n.get_int("num_groups", 0);
    if (groups < 1 || ch % groups != 0) c.fail(str("num_groups ", groups, " does not divide the ", ch, " channels"));
    // Opset 18 has one scale per group, opset 21 one per channel.
    const int64_t per = c.g.opset >= 21 ? ch : groups;
    for (std::size_t i = 1; i < 3; ++i)
      if (c.input(i) && shape_numel(c.input(i)->shape) != per && shape_numel(c.input(i)->shape) != ch)
        c.fail(str("scale and bias must hold ", per, " values"));
  } else {
    for (std::size_t i = 1; i < 3; ++i) check_channel_operand(c, i, "scale and bias", ch);
  }
  c.set(0, x->dtype, x->shape);
  return true;
}

bool infer_split(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "input");
  const int64_t axis = normalize_axis(c.n.get_int("axis", 0), rank_of(x), c.g, c.n);
  std::vector<int64_t> sizes;
  if (!split_sizes(c, x->shape[axis], sizes)) return false;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    Shape s = x->shape;
    s[axis] = sizes[k];
    c.set(k, x->dtype, s);
  }
  return true;
}

bool infer_gather_nd(Ctx& c) {
  const ValueInfo* x = c.input(0);
  const ValueInfo* idx = c.input(1);
  if (!x) return c.missing(0, "data");
  if (!idx) return c.missing(1, "indices");
  const int64_t b = c.n.get_int("batch_dims", 0), r = rank_of(x), q = rank_of(idx);
  if (q < 1) c.fail("indices must have rank 1 or more");
  const int64_t k = idx->shape.back();
  if (b < 0 || b >= std::min(r, q) || k < 1 || b + k > r)
    c.fail(str("indices ", shape_str(idx->shape), " with batch_dims ", b, " do not fit data ", shape_str(x->shape)));
  for (int64_t i = 0; i < b; ++i)
    if (idx->shape[i] != x->shape[i]) c.fail("the batch dimensions of data and indices differ");
  Shape out(x->shape.begin(), x->shape.begin() + b);
  out.insert(out.end(), idx->shape.begin() + b, idx->shape.end() - 1);
  out.insert(out.end(), x->shape.begin() + b + k, x->shape.end());
  c.set(0, x->dtype, out);
  return true;
}

bool infer_scatter_nd(Ctx& c) {
  const ValueInfo* x = c.input(0);
  const ValueInfo *idx = c.input(1), *upd = c.input(2);
  if (!x) return c.missing(0, "data");
  if (!idx) return c.missing(1, "indices");
  if (!upd) return c.missing(2, "updates");
  const int64_t r = rank_of(x), q = rank_of(idx);
  if (q < 1) c.fail("indices must have rank 1 or more");
  const int64_t k = idx->shape.back();
  if (k < 1 || k > r) c.fail(str("indices ", shape_str(idx->shape), " do not fit data ", shape_str(x->shape)));
  Shape want(idx->shape.begin(), idx->shape.end() - 1);
  want.insert(want.end(), x->shape.begin() + k, x->shape.end());
  if (upd->shape != want) c.fail(str("updates ", shape_str(upd->shape), " should have shape ", shape_str(want)));
  if (upd->dtype != x->dtype) c.fail("updates and data differ in type");
  const std::string red = c.n.get_string("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    c.fail(str("reduction '", red, "' is not supported"));
  c.set(0, x->dtype, x->shape);
  return true;
}

// DepthToSpace and SpaceToDepth.
bool infer_depth_space(Ctx& c) {
  const std::string& op = c.n.op;
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "input");
  const int64_t b = c.n.get_int("blocksize", 0);
  if (x->shape.size() != 4) c.fail(str("input ", shape_str(x->shape), " is not 4-D [N, C, H, W]"));
  if (b < 1 || b > 4096) c.fail(str("blocksize ", b, " must be from 1 to 4096"));
  const std::string mode = c.n.get_string("mode", "DCR");
  if (op == "DepthToSpace" && mode != "DCR" && mode != "CRD") c.fail(str("mode '", mode, "' is not DCR or CRD"));
  Shape out = x->shape;
  if (op == "DepthToSpace") {
    if (out[1] % (b * b) != 0) c.fail(str("channels ", out[1], " are not a multiple of blocksize^2 = ", b * b));
    out[1] /= b * b;
    out[2] = checked_mul(out[2], b, "DepthToSpace");
    out[3] = checked_mul(out[3], b, "DepthToSpace");
  } else {
    if (out[2] % b != 0 || out[3] % b != 0) c.fail(str("input ", shape_str(out), " is not a multiple of blocksize ", b));
    out[1] = checked_mul(out[1], b * b, "SpaceToDepth");
    out[2] /= b;
    out[3] /= b;
  }
  c.set(0, x->dtype, out);
  return true;
}

// GatherElements and ScatterElements.
bool infer_elements(Ctx& c) {
  const std::string& op = c.n.op;
  const ValueInfo* x = c.input(0);
  const ValueInfo* idx = c.input(1);
  if (!x) return c.missing(0, "data");
  if (!idx) return c.missing(1, "indices");
  if (idx->dtype != DType::I64 && idx->dtype != DType::I32) c.fail("indices must be int64 or int32");
  const int64_t r = rank_of(x);
  if (r < 1 || rank_of(idx) != r) c.fail(str("indices ", shape_str(idx->shape), " and data ", shape_str(x->shape), " differ in rank"));
  const int64_t axis = normalize_axis(c.n.get_int("axis", 0), r, c.g, c.n);
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && idx->shape[static_cast<std::size_t>(d)] > x->shape[static_cast<std::size_t>(d)])
      c.fail(str("indices ", shape_str(idx->shape), " are larger than data ", shape_str(x->shape), " on axis ", d));
  if (op == "GatherElements") {
    c.set(0, x->dtype, idx->shape);
    return true;
  }
  const ValueInfo* upd = c.input(2);
  if (!upd) return c.missing(2, "updates");
  if (upd->shape != idx->shape) c.fail(str("updates ", shape_str(upd->shape), " should have the indices' shape ", shape_str(idx->shape)));
  if (upd->dtype != x->dtype) c.fail("updates and data differ in type");
  const std::string red = c.n.get_string("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    c.fail(str("reduction '", red, "' is not supported"));
  c.set(0, x->dtype, x->shape);
  return true;
}

bool infer_grid_sample(Ctx& c) {
  const ValueInfo* x = c.input(0);
  const ValueInfo* grid = c.input(1);
  if (!x) return c.missing(0, "X");
  if (!grid) return c.missing(1, "grid");
  if (x->shape.size() != 4 || grid->shape.size() != 4 || grid->shape[3] != 2 || grid->shape[0] != x->shape[0])
    c.fail(str("input ", shape_str(x->shape), " and grid ", shape_str(grid->shape),
               " are not a 2-D GridSample's [N, C, H, W] and [N, Ho, Wo, 2] (Sluice samples 2-D images only)"));
  c.set(0, x->dtype, {x->shape[0], x->shape[1], grid->shape[1], grid->shape[2]});
  return true;
}

bool infer_einsum(Ctx& c) {
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
    if (!c.input(i)) return c.missing(i, "operand");
    if (c.input(i)->dtype != c.input(0)->dtype) c.fail("operands differ in type");
    shapes.push_back(c.input(i)->shape);
  }
  if (shapes.empty()) c.fail("Einsum needs an operand");
  const EinsumSpec spec = parse_einsum(c.n.get_string("equation", ""), shapes, node_context(c.g, c.n));
  Shape out;
  for (int l : spec.output) out.push_back(spec.sizes[static_cast<std::size_t>(l)]);
  c.set(0, c.input(0)->dtype, out);
  return true;
}

bool infer_cumsum(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "x");
  if (!c.value(1)) return c.not_constant(1, "axis");
  if (c.value(1)->numel() != 1) c.fail("axis must be a scalar");
  normalize_axis(c.value(1)->as_int64()[0], rank_of(x), c.g, c.n);
  c.set(0, x->dtype, x->shape);
  return true;
}

bool infer_trilu(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "input");
  if (rank_of(x) < 2) c.fail("input must have rank 2 or more");
  if (!c.n.input(1).empty() && !c.value(1)) return c.not_constant(1, "k");
  c.set(0, x->dtype, x->shape);
  return true;
}

bool infer_col2im(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "input");
  if (!c.value(1)) return c.not_constant(1, "image_shape");
  if (!c.value(2)) return c.not_constant(2, "block_shape");
  const std::vector<int64_t> image = c.value(1)->as_int64(), block = c.value(2)->as_int64();
  if (x->shape.size() != 3 || image.size() != block.size() || image.empty())
    c.fail(str("input ", shape_str(x->shape), ", image_shape ", shape_str(image), " and block_shape ", shape_str(block),
               " do not fit Col2Im"));
  check_window(c, "image_shape", image, 1);
  check_window(c, "block_shape", block, 1);
  const int64_t kb = shape_numel(block);
  if (x->shape[1] % kb != 0) c.fail(str("input channels ", x->shape[1], " are not a multiple of the block's ", kb));
  Shape out = {x->shape[0], x->shape[1] / kb};
  out.insert(out.end(), image.begin(), image.end());
  c.set(0, x->dtype, out);
  return true;
}

// GlobalAveragePool and GlobalMaxPool.
bool infer_global_pool(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  Shape out = x->shape;
  if (out.size() < 3) c.fail(str("input ", shape_str(out), " has no spatial dimensions"));
  std::fill(out.begin() + 2, out.end(), 1);
  c.set(0, x->dtype, out);
  return true;
}

// Element by element on input 0, same type and shape (Clip's bounds and Softmax's axis checked).
bool infer_unary(Ctx& c) {
  const ValueInfo* x = c.input(0);
  if (!x) return c.missing(0, "X");
  if (c.n.op == "Softmax" || c.n.op == "LogSoftmax") normalize_axis(c.n.get_int("axis", -1), rank_of(x), c.g, c.n);
  if (c.n.op == "Clip")
    for (std::size_t i = 1; i < 3; ++i)
      if (c.input(i) && shape_numel(c.input(i)->shape) != 1) c.fail("min and max must be scalars");
  c.set(0, x->dtype, x->shape);
  return true;
}

// Not, IsNaN, IsInf: a bool per element.
bool infer_predicate(Ctx& c) {
  if (!c.input(0)) return c.missing(0, "X");
  c.set(0, DType::Bool, c.input(0)->shape);
  return true;
}

bool infer_argmin(Ctx& c) {
  Node m = c.n;  // ArgMax's rule, axis and keepdims alike
  m.op = "ArgMax";
  Ctx c2{c.g, m, c.in, c.out, c.why};
  return infer_topk_argmax(c2);
}

bool infer_detections(Ctx& c) {
  std::vector<Shape> in;
  for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
    if (!c.input(i)) return c.missing(i, i == 0 ? "scores" : "boxes");
    in.push_back(c.input(i)->shape);
  }
  const DetectionLayout l = detection_layout(c.n.get_string("format", "auto"), in);
  const int64_t k = c.n.get_int("max_detections", 100);
  if (k < 1) c.fail("max_detections must be at least 1");
  c.set(0, DType::F32, {l.batch, k, 6});
  c.set(1, DType::I32, {l.batch});
  return true;
}

bool infer_if(Ctx& c) {
  c.why = "an If gives way to the branch it takes once its condition is a constant (model/fold_if.h)";
  return false;
}

using ShapeRule = bool (*)(Ctx&);

struct OpRow {
  OpArity arity;
  ShapeRule infer;
};

// The model layer's op table (shape_inference.h): every op Sluice knows, its input and output
// counts {min_in, max_in, min_out, max_out} and its shape rule.  Adding an op adds its row here, its
// kernels to the engines' registries (a CPU kernel file's add_*_kernels, engine/cuda/builder.cpp),
// its batch-axis rule (model/batch_trace.cpp) and its tests; tests/unit/test_op_registry.cpp holds
// the registries and this table to each other.
const std::map<std::string, OpRow>& op_table() {
  static const std::map<std::string, OpRow> table = [] {
    std::map<std::string, OpRow> t;
    auto add = [&t](ShapeRule infer, OpArity arity, std::initializer_list<const char*> keys) {
      for (const char* key : keys)
        if (!t.emplace(key, OpRow{arity, infer}).second) throw Error(str("op table: ", key, " has two rows"));
    };
    const OpArity one{1, 1, 1, 1}, two{2, 2, 1, 1}, some{1, kVariadic, 1, 1};
    // Convolutions, pools, resizing
    add(infer_conv, {2, 3, 1, 1}, {"Conv"});
    add(infer_conv, {2, 4, 1, 1}, {"sluice.FusedConv"});  // x, w, bias, residual
    add(infer_conv_transpose, {2, 3, 1, 1}, {"ConvTranspose"});
    add(infer_pool, one, {"AveragePool"});
    add(infer_pool, {1, 1, 1, 2}, {"MaxPool"});  // and its indices
    add(infer_global_pool, one, {"GlobalAveragePool", "GlobalMaxPool"});
    add(infer_resize, {1, 4, 1, 1}, {"Resize"});
    add(infer_col2im, {3, 3, 1, 1}, {"Col2Im"});
    add(infer_depth_space, one, {"DepthToSpace", "SpaceToDepth"});
    add(infer_grid_sample, two, {"GridSample"});
    // Products
    add([](Ctx& c) { return infer_matmul(c, true); }, {2, 3, 1, 1}, {"Gemm"});
    add([](Ctx& c) { return infer_matmul(c, false); }, two, {"MatMul"});
    add(infer_einsum, some, {"Einsum"});
    add(infer_attention, {3, 4, 1, 1}, {"sluice.Attention"});  // q, k, v, bias
    // Element-wise
    add(infer_unary, one, {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Identity", "Floor", "Ceil", "Neg",
                           "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Gelu", "Erf", "Tanh", "Sign", "Cos", "Sin",
                           "Softplus", "Elu", "Round", "Softmax", "LogSoftmax"});
    add(infer_unary, {1, 3, 1, 1}, {"Clip"});
    add(infer_predicate, one, {"Not", "IsNaN", "IsInf"});
    add([](Ctx& c) { return infer_elementwise(c, 0, DType::Undefined); }, two, {"Add", "Sub", "Mul", "Div", "Pow", "Mod"});
    add([](Ctx& c) { return infer_elementwise(c, 0, DType::Undefined); }, some, {"Min", "Max"});
    add([](Ctx& c) { return infer_elementwise(c, 0, DType::Bool); }, two,
        {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"});
    add([](Ctx& c) { return infer_elementwise(c, 1, DType::Undefined); }, {3, 3, 1, 1}, {"Where"});
    add(infer_cast, one, {"Cast"});
    // Normalizations
    add(infer_batchnorm, {5, 5, 1, 5}, {"BatchNormalization"});  // training outputs (older opsets) must stay unused
    add(infer_layer_norm, {2, 3, 1, 3}, {"LayerNormalization"});
    add(infer_group_norm, {3, 3, 1, 1}, {"GroupNormalization", "InstanceNormalization"});
    add(infer_normalize, one, {"sluice.Normalize"});
    // Reductions and selections
    add(infer_reduce, {1, 2, 1, 1},
        {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1", "ReduceSumSquare"});
    add(infer_topk_argmax, one, {"ArgMax", "sluice.ArgMaxCast"});
    add(infer_argmin, one, {"ArgMin"});
    add(infer_topk_argmax, {2, 2, 2, 2}, {"TopK"});
    add(infer_cumsum, two, {"CumSum"});
    add(infer_detections, {1, 2, 2, 2}, {"sluice.Detections"});  // scores[, boxes] -> detections, count
    // Shapes, views and data movement
    add(infer_reshape_like, two, {"Reshape"});
    add(infer_reshape_like, one, {"Flatten"});
    add(infer_reshape_like, {1, 2, 1, 1}, {"Squeeze", "Unsqueeze"});
    add(infer_transpose, one, {"Transpose"});
    add(infer_concat, some, {"Concat"});
    add(infer_split, {1, 2, 1, kVariadic}, {"Split"});
    add(infer_slice, {3, 5, 1, 1}, {"Slice"});
    add(infer_pad, {1, 4, 1, 1}, {"Pad"});
    add(infer_expand_like, two, {"Expand", "Tile"});
    add(infer_gather, two, {"Gather"});
    add(infer_gather_nd, two, {"GatherND"});
    add(infer_scatter_nd, {3, 3, 1, 1}, {"ScatterND"});
    add(infer_elements, two, {"GatherElements"});
    add(infer_elements, {3, 3, 1, 1}, {"ScatterElements"});
    add(infer_trilu, {1, 2, 1, 1}, {"Trilu"});
    // Constants and shape arithmetic (Range, Size and If only fold: graph_util.h, is_fold_only_op)
    add(infer_constant, {0, 0, 1, 1}, {"Constant"});
    add(infer_expand_like, one, {"ConstantOfShape"});
    add(infer_shape, one, {"Shape"});
    add(infer_size, one, {"Size"});
    add(infer_range, {3, 3, 1, 1}, {"Range"});
    add(infer_if, {1, kVariadic, 1, kVariadic}, {"If"});  // the condition, then the outer values its branches read
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> shape_rule_ops() {
  std::vector<std::string> keys;
  for (const auto& kv : op_table()) keys.push_back(kv.first);
  return keys;
}

const OpArity* shape_rule_arity(const std::string& key) {
  const auto it = op_table().find(key);
  return it == op_table().end() ? nullptr : &it->second.arity;
}

bool infer_node(const Graph& g, const Node& n, const std::vector<const ValueInfo*>& inputs,
                std::vector<ValueInfo>& outputs, std::string& why) {
  outputs.assign(n.outputs.size(), ValueInfo{});
  for (std::size_t k = 0; k < n.outputs.size(); ++k) outputs[k].name = n.outputs[k];
  const auto it = op_table().find(op_key(n.domain, n.op));
  if (it == op_table().end()) {
    why = str("Sluice cannot infer the shape of op ", n.op);
    return false;
  }
  Ctx c{g, n, inputs, outputs, why};
  return it->second.infer(c);
}

}  // namespace sluice
