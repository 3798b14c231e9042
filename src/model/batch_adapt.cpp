// Re-specializing a static-batch graph to another batch, or unrolling it into sub-batches
// (model/batch_adapt.h says when each applies).
//
// The proof behind re-specialization: every op is checked to be batch-equivariant along the axis
// the trace assigns to its input, i.e. op(samples stacked on that axis) == the op on each sample,
// stacked.  A graph of such ops is equivariant as a whole, so at batch B it computes, row by row,
// what the model computes at its own batch.  The shape check afterwards guards the rewrites.
#include "model/batch_adapt.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "model/einsum.h"
#include "model/graph_util.h"
#include "model/op_classes.h"
#include "model/prepare.h"

namespace sluice {

namespace {

constexpr int kNone = -1;  // the tensor has no batch axis (weights, shape values)

int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  int64_t p = 1;
  for (std::size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// A copy of an integer constant with element `i` set to `v` (int32 or int64, as the original).
Tensor with_element(const Tensor& t, std::size_t i, int64_t v) {
  Tensor c = t;
  if (c.dtype == DType::I64) c.data<int64_t>()[i] = v;
  else if (c.dtype == DType::I32) c.data<int32_t>()[i] = static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
  else throw InputError("an integer constant was expected");
  return c;
}

// `t` (size 1 on `axis`) repeated `count` times along that axis.
Tensor repeat_rows(const Tensor& t, std::size_t axis, int64_t count) {
  Shape shape = t.shape;
  shape[axis] = count;
  Tensor out(t.dtype, shape);
  const std::size_t outer = static_cast<std::size_t>(product(t.shape, 0, axis));
  const std::size_t inner = t.bytes.size() / std::max<std::size_t>(outer, 1);
  uint8_t* dst = out.bytes.data();
  for (std::size_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k, dst += inner) std::memcpy(dst, t.bytes.data() + o * inner, inner);
  return out;
}

struct Rewrite {
  std::size_t node;
  std::size_t input;
  Tensor value;
};

// Walks the graph once in topological order, giving each tensor its batch axis (or kNone).
class Tracer {
 public:
  Tracer(const Graph& g, int64_t b0, int64_t batch) : g_(g), b0_(b0), batch_(batch) {}

  bool run(std::string& why) {
    axis_[g_.inputs.at(0).name] = 0;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      node_ = i;
      const Node& n = g_.nodes[i];
      std::vector<int> out(n.outputs.size(), kNone);
      if (!visit(n, out)) {
        why = node_context(g_, n) + why_;
        return false;
      }
      for (std::size_t k = 0; k < out.size(); ++k)
        if (!n.outputs[k].empty()) axis_[n.outputs[k]] = out[k];
    }
    for (const ValueInfo& o : g_.outputs) {
      if (axis_of(o.name) != 0) {
        why = str("graph output '", o.name, "' ", axis_of(o.name) == kNone ? std::string("does not carry the batch")
                                                                            : str("carries the batch on axis ", axis_of(o.name)),
                  "; outputs need it on axis 0");
        return false;
      }
    }
    return true;
  }

  int axis_of(const std::string& name) const {
    auto it = axis_.find(name);
    return it == axis_.end() ? kNone : it->second;
  }
  const std::vector<Rewrite>& rewrites() const { return rewrites_; }

 private:
  const Shape& shape(const std::string& name) const {
    const ValueInfo* v = g_.value(name);
    if (!v) throw InputError(str("no shape for '", name, "'"));
    return v->shape;
  }
  int rank(const std::string& name) const { return static_cast<int>(shape(name).size()); }
  bool fail(const std::string& msg) {
    why_ = msg;
    return false;
  }
  bool inputs_without_batch(const Node& n, std::size_t from) {
    for (std::size_t i = from; i < n.inputs.size(); ++i)
      if (!n.input(i).empty() && axis_of(n.inputs[i]) != kNone)
        return fail(str("its input ", i, " ('", n.inputs[i], "') carries the batch, which this op would mix"));
    return true;
  }
  const Tensor* constant(const Node& n, std::size_t i) const { return n.input(i).empty() ? nullptr : g_.constant(n.inputs[i]); }
  int64_t attr_axis(const Node& n, int64_t dflt, int r) const {
    const int64_t a = n.get_int("axis", dflt);
    return a < 0 ? a + r : a;
  }

  bool visit(const Node& n, std::vector<int>& out);
  bool broadcast(const Node& n, std::vector<int>& out);
  bool gemm(const Node& n, std::vector<int>& out);
  bool matmul(const Node& n, std::vector<int>& out);
  bool reshape(const Node& n, std::vector<int>& out);
  bool resize(const Node& n, std::vector<int>& out);
  bool slice(const Node& n, std::vector<int>& out);
  bool expand(const Node& n, std::vector<int>& out);
  bool gather_scatter_nd(const Node& n, std::vector<int>& out);
  bool einsum(const Node& n, std::vector<int>& out);

  const Graph& g_;
  int64_t b0_, batch_;
  std::size_t node_ = 0;
  std::unordered_map<std::string, int> axis_;
  std::vector<Rewrite> rewrites_;
  std::string why_;
};

bool Tracer::visit(const Node& n, std::vector<int>& out) {
  const std::string& op = n.op;
  const int a = n.inputs.empty() ? kNone : axis_of(n.input(0));
  const int r = n.inputs.empty() || n.input(0).empty() ? 0 : rank(n.inputs[0]);
  auto same = [&](std::size_t first_param) {
    if (!inputs_without_batch(n, first_param)) return false;
    std::fill(out.begin(), out.end(), a);
    return true;
  };
  // A node none of whose inputs carries the batch computes the same for every sample (position
  // tables, masks): whatever the op, its outputs carry no batch either.
  bool any = false;
  for (const auto& in : n.inputs) any = any || (!in.empty() && axis_of(in) != kNone);
  if (!any) return true;
  if (op == "Constant") return true;
  if (op == "Detections") {  // every input [B, ...] on axis 0, both outputs too
    for (const auto& in : n.inputs)
      if (axis_of(in) != 0) return fail("a detector output does not carry the batch on axis 0");
    std::fill(out.begin(), out.end(), 0);
    return true;
  }
  if (is_unary_elementwise(op)) return same(1);
  if (is_broadcasting_elementwise(op)) return broadcast(n, out);
  if (op == "LayerNormalization") {
    if (a == kNone) return fail("its scale or bias carries the batch");
    if (a >= attr_axis(n, -1, r)) return fail("it normalizes over the batch axis");
    return same(1);
  }
  if (op == "Split" || op == "CumSum") {
    if (!inputs_without_batch(n, 1)) return false;
    int64_t ax = attr_axis(n, 0, r);
    if (op == "CumSum") {
      const Tensor* t = constant(n, 1);
      if (!t || t->numel() != 1) return fail("its axis is not constant");
      ax = t->as_int64()[0] < 0 ? t->as_int64()[0] + r : t->as_int64()[0];
    }
    if (ax == a) return fail(op == "Split" ? "it splits the batch axis" : "it sums along the batch axis");
    std::fill(out.begin(), out.end(), a);
    return true;
  }
  if (op == "Trilu") {
    if (a >= r - 2) return fail("the batch is on one of its matrix axes");
    return same(1);
  }
  if (op == "Expand" || op == "Tile") return expand(n, out);
  if (op == "GatherND" || op == "ScatterND") return gather_scatter_nd(n, out);
  if (op == "Einsum") return einsum(n, out);
  if (op == "Normalize" || op == "BatchNormalization") {  // per channel, axis 1
    if (a == 1) return fail("the batch is on its channel axis");
    if (!inputs_without_batch(n, 1)) return false;
    out[0] = a;  // BatchNormalization's optional mean/var outputs are per channel
    return true;
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    if (a != kNone && attr_axis(n, -1, r) == a) return fail("it normalizes over the batch axis");
    return same(1);
  }
  if (is_per_sample_op(op)) {
    if (a != kNone && a != 0) return fail(str("the batch is on axis ", a, ", not on the samples axis 0"));
    // Weights and bias never carry the batch; FusedConv's residual Z (input 3) must follow X.
    const std::size_t params_end = op == "FusedConv" ? 3 : n.inputs.size();
    for (std::size_t i = 1; i < params_end; ++i)
      if (axis_of(n.input(i)) != kNone) return fail(str("its input ", i, " ('", n.inputs[i], "') carries the batch"));
    if (op == "FusedConv" && !n.input(3).empty() && axis_of(n.inputs[3]) != a)
      return fail("its residual input does not carry the batch where its input does");
    std::fill(out.begin(), out.end(), a);
    return true;
  }
  if (op == "Gemm") return gemm(n, out);
  if (op == "MatMul") return matmul(n, out);
  if (op == "Reshape" || op == "Flatten") return reshape(n, out);
  if (op == "Resize") return resize(n, out);
  if (op == "Slice") return slice(n, out);
  if (op == "Squeeze" || op == "Unsqueeze") {
    if (!inputs_without_batch(n, 1)) return false;
    if (a == kNone) return true;
    const Tensor* axes_t = constant(n, 1);
    if (!axes_t) return fail("its axes are not constant");
    std::vector<int64_t> axes = axes_t->as_int64();
    const int out_rank = op == "Squeeze" ? r - static_cast<int>(axes.size()) : r + static_cast<int>(axes.size());
    for (auto& x : axes) x = x < 0 ? x + (op == "Squeeze" ? r : out_rank) : x;
    if (op == "Squeeze") {
      if (axes.empty()) return fail("it squeezes every axis of size 1, which would drop the batch at batch 1");
      if (std::count(axes.begin(), axes.end(), a)) return fail("it squeezes the batch axis");
      out[0] = a - static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t x) { return x < a; }));
    } else {
      int j = 0;  // the a-th axis not inserted
      for (int i = 0; i < out_rank; ++i) {
        if (std::count(axes.begin(), axes.end(), i)) continue;
        if (j++ == a) { out[0] = i; break; }
      }
    }
    return true;
  }
  if (op == "Transpose") {
    if (a == kNone) return true;
    std::vector<int64_t> perm = n.get_ints("perm");
    if (perm.empty()) for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    for (std::size_t i = 0; i < perm.size(); ++i)
      if (perm[i] == a) out[0] = static_cast<int>(i);
    return true;
  }
  if (op == "Concat") {
    int at = kNone;
    for (const auto& in : n.inputs) at = axis_of(in) != kNone ? axis_of(in) : at;
    if (attr_axis(n, 0, r) == at) return fail("it concatenates along the batch axis");
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const int ai = axis_of(n.inputs[i]);
      if (ai == at) continue;
      // A constant row joined to every sample (a class token expanded to the batch of one): at the
      // new batch, the constant repeated once per sample.
      const Tensor* t = constant(n, i);
      if (ai != kNone || !t || b0_ != 1 || static_cast<int>(t->shape.size()) <= at || t->shape[static_cast<std::size_t>(at)] != 1)
        return fail("it joins tensors that carry the batch with tensors that do not");
      if (t->numel() * batch_ > (int64_t(1) << 25)) return fail("it joins a large constant to every sample");
      rewrites_.push_back({node_, i, repeat_rows(*t, static_cast<std::size_t>(at), batch_)});
    }
    out[0] = at;
    return true;
  }
  if (op == "Gather") {
    const int ai = axis_of(n.input(1));
    const int64_t ax = attr_axis(n, 0, r);
    if (a != kNone && ai != kNone) return fail("both its data and its indices carry the batch");
    if (a != kNone) {
      if (ax == a) return fail("it gathers along the batch axis");
      out[0] = ax > a ? a : a + rank(n.inputs[1]) - 1;
    } else if (ai != kNone) {
      out[0] = static_cast<int>(ax) + ai;
    }
    return true;
  }
  if (op == "Pad") {
    if (!inputs_without_batch(n, 1)) return false;
    if (a != kNone) {
      const Tensor* pads = constant(n, 1);
      if (!pads) return fail("its pads are not constant");
      const std::vector<int64_t> p = pads->as_int64();
      std::vector<int64_t> axes;
      if (const Tensor* t = constant(n, 3)) axes = t->as_int64();
      else for (int i = 0; i < r; ++i) axes.push_back(i);
      for (std::size_t i = 0; i < axes.size() && i + axes.size() < p.size(); ++i)
        if ((axes[i] < 0 ? axes[i] + r : axes[i]) == a && (p[i] != 0 || p[i + axes.size()] != 0))
          return fail("it pads the batch axis");
    }
    out[0] = a;
    return true;
  }
  if (op.rfind("Reduce", 0) == 0) {
    if (!inputs_without_batch(n, 1)) return false;
    if (a == kNone) return true;
    std::vector<int64_t> axes;
    if (const Tensor* t = constant(n, 1)) axes = t->as_int64();
    else if (!n.input(1).empty()) return fail("its axes are not constant");
    for (auto& x : axes) x = x < 0 ? x + r : x;
    if (axes.empty() && n.get_int("noop_with_empty_axes", 0) == 0) return fail("it reduces over every axis, the batch too");
    if (std::count(axes.begin(), axes.end(), a)) return fail("it reduces over the batch axis");
    out[0] = n.get_int("keepdims", 1) ? a : a - static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t x) { return x < a; }));
    return true;
  }
  if (op == "ArgMax" || op == "ArgMin" || op == "ArgMaxCast" || op == "TopK") {
    if (!inputs_without_batch(n, 1)) return false;
    if (a == kNone) return true;
    const int64_t ax = attr_axis(n, op == "TopK" ? -1 : op == "ArgMaxCast" ? 1 : 0, r);
    if (ax == a) return fail("it selects along the batch axis");
    const bool drops = op == "ArgMaxCast" || (op != "TopK" && n.get_int("keepdims", 1) == 0);
    std::fill(out.begin(), out.end(), drops && ax < a ? a - 1 : a);
    return true;
  }
  if (op == "Shape") {
    if (a != kNone) return fail("it reads the batch size at run time");
    return true;
  }
  return fail(str("Sluice does not know whether op ", op, " keeps the samples of a batch independent"));
}

// Elementwise with numpy broadcasting: the batch must sit on one aligned axis, where every operand
// without it has size 1.
bool Tracer::broadcast(const Node& n, std::vector<int>& out) {
  int rmax = 0;
  for (const auto& in : n.inputs) rmax = std::max(rmax, rank(in));
  int at = kNone;
  for (const auto& in : n.inputs) {
    const int a = axis_of(in);
    if (a == kNone) continue;
    const int aligned = a + rmax - rank(in);
    if (at != kNone && at != aligned) return fail("its operands carry the batch on different axes");
    at = aligned;
  }
  if (at == kNone) return true;
  for (const auto& in : n.inputs) {
    if (axis_of(in) != kNone) continue;
    const int i = at - (rmax - rank(in));
    if (i >= 0 && shape(in)[static_cast<std::size_t>(i)] != 1)
      return fail(str("operand '", in, "' ", shape_str(shape(in)), " has size ", shape(in)[static_cast<std::size_t>(i)],
                      " on the batch axis instead of broadcasting over it"));
  }
  out[0] = at;
  return true;
}

bool Tracer::gemm(const Node& n, std::vector<int>& out) {
  const int aa = axis_of(n.input(0)), ab = axis_of(n.input(1));
  if (aa != kNone && ab != kNone) return fail("both A and B carry the batch");
  const bool ta = n.get_int("transA", 0) != 0, tb = n.get_int("transB", 0) != 0;
  if (aa != kNone && aa != (ta ? 1 : 0)) return fail("the batch is on A's inner (summed) axis");
  if (ab != kNone && ab != (tb ? 0 : 1)) return fail("the batch is on B's inner (summed) axis");
  const int o = aa != kNone ? 0 : ab != kNone ? 1 : kNone;
  if (!n.input(2).empty()) {
    const std::string& c = n.inputs[2];
    const int ac = axis_of(c);
    const int aligned = ac == kNone ? kNone : ac + 2 - rank(c);
    if (ac != kNone && aligned != o) return fail("C carries the batch where A x B does not");
    if (ac == kNone && o != kNone) {
      const int i = o - (2 - rank(c));
      if (i >= 0 && shape(c)[static_cast<std::size_t>(i)] != 1) return fail("C does not broadcast over the batch axis");
    }
    if (ac != kNone && o == kNone) return fail("only C carries the batch");
  }
  out[0] = o;
  return true;
}

bool Tracer::matmul(const Node& n, std::vector<int>& out) {
  const std::string &A = n.input(0), &B = n.input(1);
  const int ra = rank(A), rb = rank(B), aa = axis_of(A), ab = axis_of(B);
  if (aa == kNone && ab == kNone) return true;
  if (ra < 2 || rb < 2) return fail("a vector operand with the batch is not supported");
  const int R = std::max(ra, rb);
  int at = kNone;
  if (aa != kNone) {
    if (aa == ra - 1) return fail("the batch is on A's inner (summed) axis");
    at = aa + R - ra;
  }
  if (ab != kNone) {
    if (ab == rb - 2) return fail("the batch is on B's inner (summed) axis");
    const int bt = ab + R - rb;
    if (at != kNone && (at != bt || at >= R - 2)) return fail("A and B carry the batch on different axes");
    at = bt;
  }
  // Leading (broadcast) axes: the operand without the batch must have size 1 there.
  if (at < R - 2) {
    for (const std::string* x : {&A, &B}) {
      if (axis_of(*x) != kNone) continue;
      const int i = at - (R - rank(*x));
      if (i >= 0 && shape(*x)[static_cast<std::size_t>(i)] != 1) return fail("an operand does not broadcast over the batch axis");
    }
  }
  out[0] = at;
  return true;
}

// Reshape and Flatten keep each sample's elements together when the batch axis maps onto one output
// axis q of the same size with the same number of elements before it (row-major order then moves
// whole samples).  Reshape's target gets the new batch at q.
bool Tracer::reshape(const Node& n, std::vector<int>& out) {
  if (!inputs_without_batch(n, 1)) return false;
  const int a = axis_of(n.input(0));
  if (a == kNone) return true;
  const Shape& in = shape(n.inputs[0]);
  const Shape& res = shape(n.outputs.at(0));
  const int64_t before = product(in, 0, static_cast<std::size_t>(a));
  std::vector<int> candidates;
  for (std::size_t q = 0; q < res.size(); ++q)
    if (product(res, 0, q) == before && res[q] == in[static_cast<std::size_t>(a)]) candidates.push_back(static_cast<int>(q));
  if (n.op == "Flatten") {
    const int64_t axis = attr_axis(n, 1, static_cast<int>(in.size()));
    const int side = a < axis ? 0 : 1;
    if (!std::count(candidates.begin(), candidates.end(), side))
      return fail(str("it flattens the batch together with other axes: ", shape_str(in), " -> ", shape_str(res)));
    out[0] = side;
    return true;
  }
  if (candidates.empty())
    return fail(str("it merges or splits the batch axis: ", shape_str(in), " -> ", shape_str(res)));
  // Several candidates only differ by axes of size 1 next to the batch; keep the batch where it was
  // when that is one of them.
  const int q = std::count(candidates.begin(), candidates.end(), a) ? a : candidates.front();
  const Tensor* target = constant(n, 1);
  if (!target) return fail("its target shape is not constant");
  const std::vector<int64_t> t = target->as_int64();
  const bool copies = t[static_cast<std::size_t>(q)] == 0 && n.get_int("allowzero", 0) == 0 && q == a;
  if (t[static_cast<std::size_t>(q)] != -1 && !copies)
    rewrites_.push_back({node_, 1, with_element(*target, static_cast<std::size_t>(q), batch_)});
  out[0] = q;
  return true;
}

bool Tracer::resize(const Node& n, std::vector<int>& out) {
  if (!inputs_without_batch(n, 1)) return false;
  const int a = axis_of(n.input(0));
  out[0] = a;
  if (a == kNone) return true;
  const int r = rank(n.inputs[0]);
  std::vector<int64_t> axes = n.get_ints("axes");
  if (axes.empty()) for (int i = 0; i < r; ++i) axes.push_back(i);
  std::size_t at = axes.size();
  for (std::size_t i = 0; i < axes.size(); ++i)
    if ((axes[i] < 0 ? axes[i] + r : axes[i]) == a) at = i;
  if (at == axes.size()) return true;
  if (n.get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return fail("it crops along the batch axis");
  if (const Tensor* sizes = constant(n, 3)) {
    if (sizes->as_int64().at(at) != b0_) return fail("it resizes the batch axis");
    rewrites_.push_back({node_, 3, with_element(*sizes, at, batch_)});
    return true;
  }
  if (const Tensor* scales = constant(n, 2)) {
    if (scales->as_float().at(at) != 1.f) return fail("it resizes the batch axis");
    return true;
  }
  return fail("its sizes and scales are not constant");
}

// A slice that keeps the whole batch axis stays whole at the new batch.
bool Tracer::slice(const Node& n, std::vector<int>& out) {
  if (!inputs_without_batch(n, 1)) return false;
  const int a = axis_of(n.input(0));
  out[0] = a;
  if (a == kNone) return true;
  const int r = rank(n.inputs[0]);
  const Tensor *st = constant(n, 1), *en = constant(n, 2), *ax = constant(n, 3), *sp = constant(n, 4);
  if (!st || !en || (!n.input(3).empty() && !ax) || (!n.input(4).empty() && !sp)) return fail("its bounds are not constant");
  const std::vector<int64_t> starts = st->as_int64(), ends = en->as_int64();
  for (std::size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = ax ? ax->as_int64().at(i) : static_cast<int64_t>(i);
    if (axis < 0) axis += r;
    if (axis != a) continue;
    const int64_t step = sp ? sp->as_int64().at(i) : 1;
    if (starts[i] != 0 || step != 1 || ends[i] < b0_) return fail("it cuts the batch axis");
    rewrites_.push_back({node_, 2, with_element(*en, i, std::numeric_limits<int64_t>::max())});
  }
  return true;
}


// Expand broadcasts the batch axis against the target shape's value there: 1 keeps it, the model's
// batch is rewritten to the new one.  Tile must not repeat it.
bool Tracer::expand(const Node& n, std::vector<int>& out) {
  if (!inputs_without_batch(n, 1)) return false;
  const int a = axis_of(n.input(0));
  const Tensor* t = constant(n, 1);
  if (!t) return fail(n.op == "Expand" ? "its target shape is not constant" : "its repeats are not constant");
  const std::vector<int64_t> v = t->as_int64();
  const int r = rank(n.inputs[0]);
  if (n.op == "Tile") {
    if (static_cast<std::size_t>(a) >= v.size() || v[static_cast<std::size_t>(a)] != 1) return fail("it repeats the batch axis");
    out[0] = a;
    return true;
  }
  const int R = std::max(r, static_cast<int>(v.size()));
  const int at = a + R - r;
  const int i = at - (R - static_cast<int>(v.size()));
  if (i >= 0) {
    const int64_t d = v[static_cast<std::size_t>(i)];
    if (d != 1 && d != b0_) return fail("it expands the batch axis");
    if (d == b0_ && d != 1) rewrites_.push_back({node_, 1, with_element(*t, static_cast<std::size_t>(i), batch_)});
  }
  out[0] = at;
  return true;
}

// GatherND and ScatterND with constant indices: the batch must lie past the indexed axes.
bool Tracer::gather_scatter_nd(const Node& n, std::vector<int>& out) {
  const int a = axis_of(n.input(0));
  if (axis_of(n.input(1)) != kNone) return fail("its indices carry the batch");
  if (a == kNone) return fail("only its updates carry the batch");
  const Shape& is = shape(n.inputs[1]);
  const int q = static_cast<int>(is.size());
  const int b = static_cast<int>(n.get_int("batch_dims", 0));
  const int k = static_cast<int>(is.back());
  if (b != 0) return fail("batch_dims is not supported with the batch on the data");
  if (a < k) return fail("it indexes along the batch axis");
  if (n.op == "GatherND") {
    out[0] = q - 1 + a - k;
    return true;
  }
  if (axis_of(n.input(2)) != q - 1 + a - k) return fail("its updates do not carry the batch where its data does");
  out[0] = a;
  return true;
}

// Einsum: the batch is one label, carried by every operand that has it and kept in the output.
bool Tracer::einsum(const Node& n, std::vector<int>& out) {
  std::vector<Shape> shapes;
  for (const auto& in : n.inputs) shapes.push_back(shape(in));
  const EinsumSpec spec = parse_einsum(n.get_string("equation", ""), shapes, node_context(g_, n));
  int label = -1;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const int ai = axis_of(n.inputs[i]);
    if (ai == kNone) continue;
    const int l = spec.inputs[i][static_cast<std::size_t>(ai)];
    if (label >= 0 && l != label) return fail("its operands carry the batch on different labels");
    label = l;
  }
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const auto& ls = spec.inputs[i];
    const int ai = axis_of(n.inputs[i]);
    for (std::size_t d = 0; d < ls.size(); ++d)
      if (ls[d] == label && static_cast<int>(d) != ai)
        return fail(str("operand ", i, " has the batch's label on an axis that does not carry the batch"));
  }
  const auto it = std::find(spec.output.begin(), spec.output.end(), label);
  if (it == spec.output.end()) return fail("it sums over the batch axis");
  out[0] = static_cast<int>(it - spec.output.begin());
  return true;
}

}  // namespace

const char* static_batch_name(StaticBatch s) {
  switch (s) {
    case StaticBatch::Auto: return "auto";
    case StaticBatch::Respecialize: return "respecialize";
    case StaticBatch::SubBatch: return "sub-batch";
  }
  return "?";
}

StaticBatch static_batch_from_name(const std::string& name) {
  if (name == "auto") return StaticBatch::Auto;
  if (name == "respecialize") return StaticBatch::Respecialize;
  if (name == "sub-batch") return StaticBatch::SubBatch;
  throw UsageError(str("static batch mode must be auto, respecialize or sub-batch, not '", name, "'"));
}

bool respecialize_batch(Graph& g, int64_t model_batch, int64_t batch, std::string& why) {
  infer_shapes(g);
  const std::unordered_map<std::string, ValueInfo> before = g.values;
  Tracer t(g, model_batch, batch);
  if (!t.run(why)) return false;

  const std::vector<Node> nodes = g.nodes;
  const std::vector<ValueInfo> inputs = g.inputs, outputs = g.outputs;
  std::vector<std::string> added;
  auto undo = [&](const std::string& reason) {
    g.nodes = nodes;
    g.inputs = inputs;
    g.outputs = outputs;
    for (const auto& name : added) g.constants.erase(name);
    g.values = before;
    why = reason;
    return false;
  };
  for (const Rewrite& r : t.rewrites()) {
    Node& n = g.nodes[r.node];
    const std::string name = unique_tensor_name(g, n.inputs[r.input] + "_batch" + std::to_string(batch));
    g.constants[name] = r.value;
    added.push_back(name);
    n.inputs[r.input] = name;
  }
  g.inputs[0].shape[0] = batch;
  try {
    infer_shapes(g);
  } catch (const InputError& e) {
    return undo(str("at batch ", batch, ": ", e.what()));
  }
  for (const auto& kv : before) {
    auto it = g.values.find(kv.first);
    if (it == g.values.end()) continue;  // a constant that was replaced
    Shape expect = kv.second.shape;
    const int a = t.axis_of(kv.first);
    if (a != kNone) expect[static_cast<std::size_t>(a)] = batch;
    if (it->second.shape != expect)
      return undo(str("'", kv.first, "' would have shape ", shape_str(it->second.shape), " at batch ", batch, ", not ",
                      shape_str(expect)));
  }
  g.values.clear();
  return true;
}

void unroll_batch(Graph& g, int64_t model_batch, int64_t batch) {
  if (batch % model_batch != 0)
    throw InputError(str(g.source, ": the model has a static batch of ", model_batch,
                         " and cannot be re-specialized; it runs on sub-batches of ", model_batch,
                         ", so --batch-size must be a multiple of ", model_batch, " (got ", batch, ")"));
  infer_shapes(g);
  for (const ValueInfo& o : g.outputs)
    if (o.shape.empty() || o.shape[0] != model_batch)
      throw InputError(str(g.source, ": output '", o.name, "' has shape ", shape_str(o.shape), ", not one row per sample (",
                           model_batch, " rows for the model's batch of ", model_batch, "), so it cannot run on sub-batches"));
  const std::string input = g.inputs.at(0).name;
  std::unordered_set<std::string> used;
  for (const Node& n : g.nodes) {
    used.insert(n.name);
    used.insert(n.inputs.begin(), n.inputs.end());
    used.insert(n.outputs.begin(), n.outputs.end());
  }
  std::string tag = "#sb";
  for (bool clash = true; clash;) {  // a suffix no existing name ends with
    clash = false;
    for (const auto& u : used) clash = clash || u.find(tag) != std::string::npos;
    if (clash) tag += "#";
  }
  const std::vector<Node> body = std::move(g.nodes);
  g.nodes.clear();
  const int64_t pieces = batch / model_batch;
  std::vector<std::vector<std::string>> piece_outputs(g.outputs.size());
  for (int64_t j = 0; j < pieces; ++j) {
    const std::string suffix = tag + std::to_string(j);
    auto rename = [&](const std::string& s) { return s.empty() || g.is_constant(s) ? s : s + suffix; };
    Node cut;
    cut.op = "Slice";
    cut.name = "sluice_subbatch" + suffix;
    cut.inputs = {input, add_int64_constant(g, "sluice_subbatch_start" + suffix, {j * model_batch}),
                  add_int64_constant(g, "sluice_subbatch_end" + suffix, {(j + 1) * model_batch}),
                  add_int64_constant(g, "sluice_subbatch_axis" + suffix, {0})};
    cut.outputs = {input + suffix};
    g.nodes.push_back(std::move(cut));
    for (Node n : body) {
      n.name += suffix;
      for (auto& s : n.inputs) s = rename(s);
      for (auto& s : n.outputs) s = rename(s);
      g.nodes.push_back(std::move(n));
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k) piece_outputs[k].push_back(rename(g.outputs[k].name));
  }
  for (std::size_t k = 0; k < g.outputs.size(); ++k) {
    Node join;
    join.op = "Concat";
    join.name = "sluice_subbatch_join_" + g.outputs[k].name;
    join.inputs = piece_outputs[k];
    join.outputs = {g.outputs[k].name};
    join.attrs["axis"] = Attribute::of_int(0);
    g.nodes.push_back(std::move(join));
  }
  g.inputs[0].shape[0] = batch;
  g.values.clear();
}

BatchAdaptation adapt_batch(Graph& g, int64_t model_batch, int64_t batch, StaticBatch mode) {
  BatchAdaptation r;
  r.model_batch = model_batch;
  r.batch = batch;
  std::string why = "--static-batch sub-batch";
  if (mode != StaticBatch::SubBatch && respecialize_batch(g, model_batch, batch, why)) {
    log_info(g.source, ": the model's batch is fixed at ", model_batch, "; re-specialized to batch ", batch,
             " (every shape follows the batch)");
    return r;
  }
  if (mode == StaticBatch::Respecialize)
    throw InputError(str(g.source, ": the model's batch is fixed at ", model_batch, " and cannot be re-specialized to ",
                         batch, ": ", why));
  if (batch % model_batch != 0)
    throw InputError(str(g.source, ": the model's batch is fixed at ", model_batch, " and cannot be re-specialized (", why,
                         "); it can run on sub-batches of ", model_batch, " only, so --batch-size must be a multiple of ",
                         model_batch, " (got ", batch, ")"));
  unroll_batch(g, model_batch, batch);
  r.how = BatchAdaptation::How::SubBatched;
  r.why_not_respecialized = why;
  log_info(g.source, ": the model's batch is fixed at ", model_batch, "; each batch of ", batch, " runs as ",
           batch / model_batch, " sub-batches of ", model_batch, " (not re-specialized: ", why, ")");
  return r;
}

}  // namespace sluice
