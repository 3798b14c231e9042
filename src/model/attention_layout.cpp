// sluice.Attention reading q, k and v where the projections wrote them, and writing its output
// where the output projection reads it (layout "strided", model/graph.h).  The exporters put pure
// data movement around attention:
//   timm (DeiT, DINOv2):  qkv [B, S, 3E] -> Reshape [B, S, 3, H, D] -> Transpose (2, 0, 3, 1, 4)
//                         -> Split / Slice / Gather + Squeeze -> q, k, v [B, H, S, D]
//   transformers (CLIP):  x [B, S, E] -> Reshape [B, S, H, D] -> Transpose (0, 2, 1, 3), for each
//   after attention:      y [B, H, S, D] -> Transpose (0, 2, 1, 3) -> Reshape [B, S, E]
// Each operand is a strided view of the tensor before those nodes: one offset, one stride between
// heads and one between rows inside each sample's block, rows of D contiguous elements.  This pass
// follows the views back from each operand (and forward from the output) to the tensor behind them,
// rewrites the node to read (write) that tensor with the view's strides, and leaves the view nodes
// to eliminate_dead_nodes.  Where a tensor behind the views does not carry the batch on its axis 0
// the way the operand does (a batch merged with other axes; torchvision's sequence-first
// [S, B, 3E] unless push_transposes, which runs before, has made it [B, S, 3E]), a nearer tensor on
// the chain is tried, and the operand is left as it is when none fits.  On the way an axis may merge
// axes that are not neighbours in memory ([S, B x H, D] of [S, B, 3E]): it is kept as factors, each
// with its stride, until a view takes them apart again.
// Biases that do not repeat per head (Swin's shift mask, [nW x H] matrices) are views like any
// other: matrix n * H + h still adds bias matrix (n * H + h) mod P.  A bias per sample over the heads
// (bias_group H) stays one: matrix n * H + h adds bias matrix n.  cuDNN takes the strided form only
// with a [1, H, S, S_kv] or [N, 1, S, S_kv] bias; the own window kernel and the GEMMs take any period.
// SLUICE_ATTENTION_LAYOUT=0 turns the pass off; SLUICE_ATTENTION_LAYOUT_WINDOWS=0 keeps the blocks
// with a bias per window packed, as before.
//
// Layout "strided" of sluice.Attention: q, k, v and y are tensors [N, ...] (N samples on axis 0, the
// batch as the batch trace sees it; one tensor may be q, k and v at once) that hold the [N, H, rows,
// cols] operands as views.  Attributes: heads H, sizes [S, S_kv, D, Dv], q_view, k_view, v_view,
// y_view [offset, head stride, row stride] in elements inside one sample's block (numel / N), the
// columns contiguous; y_shape is y's shape after axis 0.  Score matrix n * H + h adds bias matrix
// (n * H + h) mod P, as in the packed layouts.
#include <cstdlib>
#include <optional>
#include <unordered_set>

#include "core/log.h"
#include "model/batch_trace.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

using Strides = std::vector<int64_t>;

// `shape` as a view of the flat, contiguous buffer of tensor `src`.
struct View {
  std::string src;
  int64_t offset = 0;
  Shape shape;
  Strides strides;
};

Strides contiguous(const Shape& s) {
  Strides st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// The views from a tensor to an attention operand, one op at a time, hold each axis as factors
// (outer to inner, a size and a stride each): an axis that merges axes which are not neighbours in
// memory has no one stride, yet a later view may take them apart again.  Torchvision's
// sequence-first attention at a batch N > 1 has such an axis: q [S, N, E] -> Reshape [S, N x H, D]
// (the batch and the heads, E apart and D apart) -> Transpose -> Reshape [N, H, S, D].
struct Factor {
  int64_t size = 1, stride = 1;
};
using Axis = std::vector<Factor>;

struct FineView {
  std::string src;
  int64_t offset = 0;
  Shape shape;
  std::vector<Axis> axes;
};

// The factors of `axes` in order: those of size 1 left out, neighbours contiguous with each other merged.
std::vector<Factor> factors(const std::vector<Axis>& axes) {
  std::vector<Factor> f;
  for (const Axis& a : axes)
    for (const Factor& x : a) {
      if (x.size == 1) continue;
      if (!f.empty() && f.back().stride == x.stride * x.size) {
        f.back().size *= x.size;
        f.back().stride = x.stride;
      } else {
        f.push_back(x);
      }
    }
  return f;
}

// `out`'s axes as consecutive groups of the factors `f`, a factor split where an axis ends inside
// it; false when they do not regroup so (the reshape is no view).
bool regroup(std::vector<Factor> f, const Shape& out, std::vector<Axis>& res) {
  res.assign(out.size(), {});
  std::size_t j = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (out[k] <= 0) return false;
    int64_t have = 1;
    while (have < out[k]) {
      const int64_t need = out[k] / have;
      if (j >= f.size() || out[k] % have != 0) return false;
      Factor& x = f[j];
      if (x.size <= need) {
        if (need % x.size != 0) return false;
        res[k].push_back(x);
        have *= x.size;
        ++j;
      } else {
        if (x.size % need != 0) return false;
        res[k].push_back({need, x.stride * (x.size / need)});
        x = {x.size / need, x.stride};
        have *= need;
      }
    }
  }
  return j == f.size();
}

// The one stride of an axis (1 for an axis of one element), or false when its factors have none.
bool axis_stride(const Axis& a, int64_t& st) {
  const std::vector<Factor> f = factors({a});
  if (f.size() > 1) return false;
  st = f.empty() ? 1 : f[0].stride;
  return true;
}

// The strides that give `out` the same elements, in the same order, as `in` with strides `st`, if
// there are such: runs of `in`'s axes that are contiguous with each other may be regrouped freely.
bool reshape_strides(const Shape& in, const Strides& st, const Shape& out, Strides& res) {
  std::vector<std::pair<int64_t, int64_t>> runs;   // elements, stride of the innermost axis
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] <= 0) return false;
    if (in[i] == 1) continue;
    if (!runs.empty() && runs.back().second == st[i] * in[i]) {
      runs.back().first *= in[i];
      runs.back().second = st[i];
    } else {
      runs.emplace_back(in[i], st[i]);
    }
  }
  res.assign(out.size(), 0);
  std::size_t j = 0;
  for (const auto& [n, s] : runs) {
    std::size_t k = j;
    int64_t p = 1;
    while (k < out.size() && p < n) p *= out[k++];
    if (p != n) return false;
    int64_t acc = s;
    for (std::size_t t = k; t-- > j;) {
      res[t] = acc;
      acc *= out[t];
    }
    j = k;
  }
  for (; j < out.size(); ++j)
    if (out[j] != 1) return false;
  return true;
}

class LayoutPass {
 public:
  explicit LayoutPass(Graph& g) : g_(g) {
    if (switched_off("SLUICE_ATTENTION_LAYOUT_WINDOWS")) windows_ = false;
    for (const auto& o : g.outputs) outputs_.insert(o.name);
    try {
      // At batch 1 (an export's fixed batch, re-specialized after the passes) the check sees every
      // tensor as one sample's; the re-specialization's own trace says where the batch axis goes.
      const int64_t b = g.inputs.empty() || g.inputs[0].shape.empty() ? 0 : g.inputs[0].shape[0];
      trace_ = b == 1 ? trace_batch(g, BatchQuestion::Respecialize, 1, 2) : trace_batch(g, BatchQuestion::Check);
    } catch (const std::exception& e) {
      log_debug(g.source, ": attention layout: no batch trace (", e.what(), ")");
      traced_ = false;
    }
  }

  bool rewrite(Node& a);
  const std::unordered_set<const Node*>& removed() const { return removed_; }

 private:
  const Shape* shape(const std::string& name) const {
    const ValueInfo* v = g_.value(name);
    if (!v || v->shape.empty()) return nullptr;
    for (int64_t d : v->shape)
      if (d <= 0) return nullptr;
    return &v->shape;
  }
  const Node* producer(const std::string& name) const {
    const int i = g_.producer(name);
    return i < 0 ? nullptr : &g_.nodes[static_cast<std::size_t>(i)];
  }
  std::optional<std::vector<int64_t>> const_ints(const Node& n, std::size_t i) const {
    const Tensor* t = g_.constant(n.input(i));
    if (!t || (t->dtype != DType::I64 && t->dtype != DType::I32)) return std::nullopt;
    return t->as_int64();
  }
  // One view op applied to the view of its input: the view of its output `out`, or nothing.
  std::optional<FineView> step(const Node& n, const FineView& in, const std::string& out) const;
  // The chain of tensors behind `name` through view ops, nearest first, `name` itself included.
  std::vector<std::string> chain(const std::string& name) const;
  // `name` as a view of `src` (a tensor on its chain): every axis with one stride.
  std::optional<View> view_of(const std::string& name, const std::string& src) const;
  std::optional<FineView> fine_view_of(const std::string& name, const std::string& src) const;
  // The view of an attention operand [N, H, rows, cols] over `v.src` as offset, head stride and row
  // stride inside one sample, if it is one that the engines read.
  bool fits(const View& v, const std::string& operand, bool transposed, std::vector<int64_t>& out) const;
  bool same_batch(const std::string& a, const std::string& b) const {
    if (!traced_) return false;
    const BatchState x = trace_.of(g_, a), y = trace_.of(g_, b);
    return x.axis == 0 && y.axis == 0 && x.outer == y.outer && x.inner == y.inner;
  }
  bool internal(const std::string& name) const { return !outputs_.count(name) && g_.consumers(name) == 1; }
  const Node* sole_reader(const std::string& name) const {
    if (!internal(name)) return nullptr;
    for (const Node& n : g_.nodes)
      for (const auto& in : n.inputs)
        if (in == name) return &n;
    return nullptr;
  }

  Graph& g_;
  std::unordered_set<std::string> outputs_;
  BatchTrace trace_;
  bool traced_ = true;
  bool windows_ = true;   // SLUICE_ATTENTION_LAYOUT_WINDOWS
  std::unordered_set<const Node*> removed_;
};

std::optional<FineView> LayoutPass::step(const Node& n, const FineView& in, const std::string& out) const {
  const Shape* os = shape(out);
  if (!os || !n.domain.empty()) return std::nullopt;
  const int64_t r = static_cast<int64_t>(in.shape.size());
  FineView v{in.src, in.offset, *os, {}};
  if (n.op == "Transpose") {
    std::vector<int64_t> perm = n.get_ints("perm");
    if (perm.empty())
      for (int64_t i = r; i-- > 0;) perm.push_back(i);
    if (static_cast<int64_t>(perm.size()) != r) return std::nullopt;
    for (int64_t p : perm) {
      if (p < 0 || p >= r) return std::nullopt;
      v.axes.push_back(in.axes[static_cast<std::size_t>(p)]);
    }
  } else if (n.op == "Reshape" || n.op == "Squeeze" || n.op == "Unsqueeze" || n.op == "Flatten") {
    // All of them keep the elements in order: a regrouping of the axes.
    if (!regroup(factors(in.axes), *os, v.axes)) return std::nullopt;
  } else if (n.op == "Split" || n.op == "Slice" || n.op == "Gather") {
    int64_t axis = 0, start = 0, step = 1;
    if (n.op == "Split") {
      axis = n.get_int("axis", 0);
      if (axis < 0) axis += r;
      if (axis < 0 || axis >= r) return std::nullopt;
      for (const auto& o : n.outputs) {
        if (o == out) break;
        const Shape* s = shape(o);
        if (!s || static_cast<int64_t>(s->size()) != r) return std::nullopt;
        start += (*s)[static_cast<std::size_t>(axis)];
      }
    } else if (n.op == "Slice") {
      // One sliced axis with a positive step (the exporters' q/k/v selection); the output's shape
      // gives the count.
      const auto starts = const_ints(n, 1), ends = const_ints(n, 2);
      std::optional<std::vector<int64_t>> axes = std::vector<int64_t>{0}, steps = std::vector<int64_t>{1};
      if (n.input(3).size()) axes = const_ints(n, 3);
      if (n.input(4).size()) steps = const_ints(n, 4);
      if (!starts || !ends || !axes || !steps || starts->size() != 1 || axes->size() != 1 || steps->size() != 1)
        return std::nullopt;
      axis = (*axes)[0] < 0 ? (*axes)[0] + r : (*axes)[0];
      step = (*steps)[0];
      if (axis < 0 || axis >= r || step < 1) return std::nullopt;
      const int64_t dim = in.shape[static_cast<std::size_t>(axis)];
      start = (*starts)[0] < 0 ? (*starts)[0] + dim : (*starts)[0];
      start = std::max<int64_t>(0, std::min(start, dim));
    } else {   // Gather of one constant index
      axis = n.get_int("axis", 0);
      if (axis < 0) axis += r;
      const Tensor* idx = g_.constant(n.input(1));
      if (axis < 0 || axis >= r || !idx || idx->numel() != 1 || idx->shape.size() > 1) return std::nullopt;
      const auto iv = const_ints(n, 1);
      if (!iv) return std::nullopt;
      const int64_t dim = in.shape[static_cast<std::size_t>(axis)];
      start = (*iv)[0] < 0 ? (*iv)[0] + dim : (*iv)[0];
      if (start < 0 || start >= dim) return std::nullopt;
    }
    // The axis taken apart needs one stride; a Gather of a scalar index drops it.
    const std::size_t ax = static_cast<std::size_t>(axis);
    int64_t st = 1;
    if (!axis_stride(in.axes[ax], st)) return std::nullopt;
    v.axes = in.axes;
    if (n.op == "Gather" && g_.constant(n.input(1))->shape.empty()) {
      v.axes.erase(v.axes.begin() + axis);
    } else {
      if (os->size() != in.axes.size()) return std::nullopt;
      v.axes[ax] = {Factor{(*os)[ax], st * step}};
    }
    if (v.axes.size() != os->size()) return std::nullopt;
    v.offset += start * st;
  } else {
    return std::nullopt;
  }
  return v;
}

std::vector<std::string> LayoutPass::chain(const std::string& name) const {
  std::vector<std::string> c = {name};
  for (int guard = 0; guard < 12; ++guard) {
    const Node* p = producer(c.back());
    static const std::unordered_set<std::string> views = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                                                           "Split", "Slice", "Gather"};
    if (!p || !p->domain.empty() || !views.count(p->op) || p->inputs.empty() || !shape(p->inputs[0])) break;
    c.push_back(p->inputs[0]);
  }
  return c;
}

std::optional<FineView> LayoutPass::fine_view_of(const std::string& name, const std::string& src) const {
  const Shape* s = shape(name);
  if (!s) return std::nullopt;
  if (name == src) {
    FineView v{name, 0, *s, {}};
    const Strides st = contiguous(*s);
    for (std::size_t i = 0; i < s->size(); ++i) v.axes.push_back({Factor{(*s)[i], st[i]}});
    return v;
  }
  const Node* p = producer(name);
  if (!p) return std::nullopt;
  const auto in = fine_view_of(p->inputs[0], src);
  if (!in) return std::nullopt;
  return step(*p, *in, name);
}

std::optional<View> LayoutPass::view_of(const std::string& name, const std::string& src) const {
  const auto f = fine_view_of(name, src);
  if (!f) return std::nullopt;
  View v{f->src, f->offset, f->shape, {}};
  for (const Axis& a : f->axes) {
    int64_t st = 1;
    if (!axis_stride(a, st)) return std::nullopt;
    v.strides.push_back(st);
  }
  return v;
}

bool LayoutPass::fits(const View& v, const std::string& operand, bool transposed, std::vector<int64_t>& out) const {
  if (v.shape.size() != 4) return false;
  const int64_t n = v.shape[0], h = v.shape[1];
  const int64_t rows = transposed ? v.shape[3] : v.shape[2], cols = transposed ? v.shape[2] : v.shape[3];
  const int64_t hs = v.strides[1], rs = transposed ? v.strides[3] : v.strides[2];
  const int64_t cs = transposed ? v.strides[2] : v.strides[3];
  // Rank 3 or more: the batch trace's rule for attention wants the batch before the last two axes.
  const Shape* ss = shape(v.src);
  if (!ss || ss->size() < 3 || (*ss)[0] != n || (cols > 1 && cs != 1) || hs < 0 || rs < 0 || !same_batch(v.src, operand)) return false;
  const int64_t sample = shape_numel(*ss) / n;
  if (n > 1 && v.strides[0] != sample) return false;
  const int64_t off = v.offset;   // inside sample 0's block
  if (off < 0 || off + (h - 1) * hs + (rows - 1) * rs + cols > sample || (rows > 1 && rs < cols)) return false;
  // The stride of an axis of one is any: the packed one, as the GEMMs' leading dimensions want.
  const int64_t row = rows > 1 ? rs : cols;
  out = {off, h > 1 ? hs : rows * row, row};
  return true;
}

bool LayoutPass::rewrite(Node& a) {
  if (a.op != "Attention" || a.domain != "sluice" || a.inputs.size() < 3) return false;
  const std::string layout = a.get_string("layout", "bhsd");
  if (layout != "bhsd" && layout != "bhds") return false;
  const Shape* qs = shape(a.inputs[0]);
  const Shape* vs = shape(a.inputs[2]);
  const Shape* ys = shape(a.outputs[0]);
  if (!qs || !vs || !ys || qs->size() != 4 || vs->size() != 4 || ys->size() != 4) return false;
  const int64_t h = (*qs)[1], s = (*qs)[2], d = (*qs)[3], skv = (*vs)[2], dv = (*vs)[3];
  if (a.inputs.size() > 3 && !a.inputs[3].empty()) {
    // A bias repeating along the n * H score matrices: per head ([1, H, S, S_kv] broadcast over
    // the batch), or per window and head (Swin's shift mask) where the switch allows.
    const Tensor* c = g_.constant(a.inputs[3]);
    const Shape* bs = c ? &c->shape : shape(a.inputs[3]);
    const int64_t mats = (*qs)[0] * h, numel = bs ? shape_numel(*bs) : 0;
    // Or per sample over the heads (bias_group H: a text encoder's padding mask [N, 1, S, S_kv], or
    // [N, 1, 1, S_kv] with bias_rows 1).
    const int64_t group = a.get_int("bias_group", 1), rows = a.get_int("bias_rows", s) == 1 ? 1 : s;
    if (!bs || numel == 0) return false;
    if (group > 1 || rows == 1) {
      if (group != h || numel != (*qs)[0] * rows * skv) return false;
    } else {
      if (numel % (s * skv) != 0 || mats % (numel / (s * skv)) != 0) return false;
      if (numel != h * s * skv && !windows_) return false;
    }
  }

  // Each operand: the farthest tensor on its chain of views that gives a view the engines read.
  std::string src[3];
  std::vector<int64_t> views[4];
  bool changed = false;
  for (int i = 0; i < 3; ++i) {
    const std::string& op = a.inputs[static_cast<std::size_t>(i)];
    const bool transposed = i == 1 && layout == "bhds";
    const std::vector<std::string> c = chain(op);
    bool found = false;
    for (std::size_t j = c.size(); j-- > 0 && !found;) {
      const auto v = view_of(op, c[j]);
      if (v && fits(*v, op, transposed, views[i])) {
        src[i] = c[j];
        found = true;
        changed = changed || j > 0;
      }
    }
    if (!found) return false;   // a packed operand that is not even [N, H, rows, cols] with cols contiguous
  }

  // The output: forward through Transpose and Reshape nodes that only this path reads, then the
  // view of y over the farthest of them that fits.
  std::vector<const Node*> after;
  std::vector<std::string> outs = {a.outputs[0]};
  for (int guard = 0; guard < 4; ++guard) {
    const Node* r = sole_reader(outs.back());
    if (!r || !r->domain.empty() || (r->op != "Transpose" && r->op != "Reshape") || r->inputs[0] != outs.back() ||
        !shape(r->outputs[0]))
      break;
    after.push_back(r);
    outs.push_back(r->outputs[0]);
  }
  std::string z = a.outputs[0];
  std::size_t used = 0;   // how many of `after` the node absorbs
  views[3] = {0, s * dv, dv};
  for (std::size_t k = after.size(); k > 0; --k) {
    // From z = outs[k] (contiguous) back to y.
    View v{outs[k], 0, *shape(outs[k]), contiguous(*shape(outs[k]))};
    bool ok = true;
    for (std::size_t t = k; t-- > 0 && ok;) {
      const Node& node = *after[t];
      const Shape& in = *shape(node.inputs[0]);
      Strides st;
      if (node.op == "Reshape") {
        ok = reshape_strides(v.shape, v.strides, in, st);
      } else {
        std::vector<int64_t> perm = node.get_ints("perm");
        if (perm.empty())
          for (std::size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
        ok = perm.size() == in.size() && v.strides.size() == in.size();
        st.assign(in.size(), 0);
        for (std::size_t i = 0; ok && i < perm.size(); ++i) {
          ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(in.size());
          if (ok) st[static_cast<std::size_t>(perm[i])] = v.strides[i];
        }
      }
      v.shape = in;
      v.strides = st;
    }
    std::vector<int64_t> yv;
    if (ok && fits(v, a.outputs[0], false, yv)) {
      z = outs[k];
      used = k;
      views[3] = yv;
      changed = true;
      break;
    }
  }
  if (!changed) return false;

  const Shape& zs = *shape(z);
  a.inputs[0] = src[0];
  a.inputs[1] = src[1];
  a.inputs[2] = src[2];
  a.attrs["layout"] = Attribute::of_string("strided");
  a.attrs["heads"] = Attribute::of_int(h);
  a.attrs["sizes"] = Attribute::of_ints({s, skv, d, dv});
  a.attrs["q_view"] = Attribute::of_ints(views[0]);
  a.attrs["k_view"] = Attribute::of_ints(views[1]);
  a.attrs["v_view"] = Attribute::of_ints(views[2]);
  a.attrs["y_view"] = Attribute::of_ints(views[3]);
  a.attrs["y_shape"] = Attribute::of_ints(Shape(zs.begin() + 1, zs.end()));
  if (used > 0) {
    a.outputs[0] = z;
    for (std::size_t t = 0; t < used; ++t) removed_.insert(after[t]);
  }
  return true;
}

}  // namespace

int attention_layout(Graph& g) {
  if (switched_off("SLUICE_ATTENTION_LAYOUT")) return 0;
  bool any = false;
  for (const Node& n : g.nodes) any = any || (n.op == "Attention" && n.domain == "sluice");
  if (!any) return 0;
  LayoutPass p(g);
  int rewired = 0;
  for (Node& n : g.nodes) rewired += p.rewrite(n) ? 1 : 0;
  if (rewired == 0) return 0;
  // The Transpose and Reshape nodes whose output the attention now writes itself.
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (Node& n : g.nodes)
    if (!p.removed().count(&n)) kept.push_back(std::move(n));
  g.nodes = std::move(kept);
  eliminate_dead_nodes(g);
  log_debug(g.source, ": ", rewired, " attention steps read and write the projections' layouts");
  return rewired;
}

}  // namespace sluice
