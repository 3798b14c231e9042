// The batch-axis trace (model/batch_trace.h).  Each rule below answers for one op both questions:
// where the batch axis goes (the same for both), and what would mix samples.  Where the answers
// differ, `strict` (Respecialize) adds what equivariance at another batch needs on top of keeping
// rows apart.  A rule's reason reads after the node: "Reshape 'r' merges or splits the batch axis".
#include "model/batch_trace.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/einsum.h"
#include "model/graph_util.h"
#include "model/op_classes.h"

namespace sluice {

namespace {

int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  int64_t p = 1;
  for (std::size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

int64_t norm(int64_t axis, int64_t r) { return axis < 0 ? axis + r : axis; }

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

// Whether every slice of `t` along `axis` holds the same bytes (a row broadcast to the batch).
bool rows_equal(const Tensor& t, std::size_t axis) {
  const std::size_t outer = static_cast<std::size_t>(product(t.shape, 0, axis));
  const std::size_t rows = static_cast<std::size_t>(t.shape[axis]);
  const std::size_t inner = t.bytes.size() / std::max<std::size_t>(outer * rows, 1);
  for (std::size_t o = 0; o < outer; ++o) {
    const uint8_t* base = t.bytes.data() + o * rows * inner;
    for (std::size_t r = 1; r < rows; ++r)
      if (std::memcmp(base, base + r * inner, inner) != 0) return false;
  }
  return true;
}

// The first slice of `t` along `axis` (size 1 there).
Tensor first_row(const Tensor& t, std::size_t axis) {
  Shape shape = t.shape;
  const std::size_t outer = static_cast<std::size_t>(product(t.shape, 0, axis));
  const std::size_t rows = static_cast<std::size_t>(t.shape[axis]);
  const std::size_t inner = t.bytes.size() / std::max<std::size_t>(outer * rows, 1);
  shape[axis] = 1;
  Tensor out(t.dtype, shape);
  for (std::size_t o = 0; o < outer; ++o) std::memcpy(out.bytes.data() + o * inner, t.bytes.data() + o * rows * inner, inner);
  return out;
}

class Tracer {
 public:
  using Rule = bool (Tracer::*)(const Node&);

  // `choices`: for Reshape nodes (by index) whose batch axis is ambiguous, which candidate to take
  // (0, the likeliest, when absent).
  Tracer(const Graph& g, BatchQuestion q, int64_t b0, int64_t batch,
         std::unordered_map<std::size_t, std::size_t> choices = {})
      : g_(g), strict_(q == BatchQuestion::Respecialize), b0_(b0), batch_(batch), choices_(std::move(choices)) {}

  // The Reshape nodes visited whose batch axis could go to more than one axis, and how many.
  const std::vector<std::pair<std::size_t, std::size_t>>& ambiguous() const { return ambiguous_; }

  BatchTrace run() {
    if (!g_.inputs.empty()) t_.states[g_.inputs[0].name] = BatchState{0, "", 0};
    for (node_ = 0; node_ < g_.nodes.size(); ++node_)
      if (!visit(g_.nodes[node_])) break;
    return std::move(t_);
  }

 private:
  // ---- what the rules read and write ----
  const Shape& shape(const std::string& name) const {
    const ValueInfo* v = g_.value(name);
    if (!v) throw InputError(str(g_.source, ": no shape for '", name, "'"));
    return v->shape;
  }
  int rank(const std::string& name) const { return static_cast<int>(shape(name).size()); }
  const Tensor* constant(const Node& n, std::size_t i) const { return n.input(i).empty() ? nullptr : g_.constant(n.inputs[i]); }
  std::vector<int64_t> ints(const Node& n, std::size_t i) const {
    const Tensor* t = constant(n, i);
    return t ? t->as_int64() : std::vector<int64_t>{};
  }
  // The batch axis of input i: >= 0, or kNoBatch (absent, constant or independent of the input).
  int ax(const Node& n, std::size_t i) const { return t_.of(g_, n.input(i)).axis; }
  int64_t attr_axis(const Node& n, int64_t dflt, int r) const { return norm(n.get_int("axis", dflt), r); }
  bool fail(const std::string& reason) {
    why_ = reason;
    return false;
  }
  // Inputs from `from` on are parameters: one that carries the batch would be applied across samples.
  bool params_free(const Node& n, std::size_t from) {
    for (std::size_t i = from; i < n.inputs.size(); ++i)
      if (ax(n, i) != kNoBatch)
        return fail(str("takes a parameter from the input data (its input ", i, ", '", n.inputs[i], "')"));
    return true;
  }
  const BatchState& state(const Node& n, std::size_t i) const {
    static const BatchState none;
    const auto it = n.input(i).empty() ? t_.states.end() : t_.states.find(n.input(i));
    return it == t_.states.end() || g_.is_constant(n.input(i)) ? none : it->second;
  }
  // The outputs keep the data inputs' merge of the batch axis (same_merge) unless a rule says other.
  void set(std::size_t k, int axis) {
    if (k < out_.size()) out_[k] = BatchState{axis, merge_note_, first_, outer_, inner_};
  }
  void all(int axis) {
    for (std::size_t k = 0; k < out_.size(); ++k) set(k, axis);
  }

  bool visit(const Node& n);
  bool single_sample(const Node& n, const std::vector<std::size_t>& data);
  bool same_samples(const Node& n, const std::vector<std::size_t>& data);
  bool same_merge(const Node& n, const std::vector<std::size_t>& data);
  bool unmerged(const char* what);
  bool tile_operand(const Node& n, std::size_t i, int at);
  static Rule rule_of(const std::string& op);

  // ---- the rules, one per op or family ----
  bool unary(const Node& n);
  bool channelwise(const Node& n);
  bool broadcast(const Node& n);
  bool per_sample(const Node& n);
  bool detections(const Node& n);
  bool matmul(const Node& n);
  bool gemm(const Node& n);
  bool einsum(const Node& n);
  bool gather_nd(const Node& n);
  bool scatter_nd(const Node& n);
  bool elements(const Node& n);
  bool grid_sample(const Node& n);
  bool constant_rows(const Node& n, int a);
  bool transpose(const Node& n);
  bool reshape(const Node& n);
  bool squeeze(const Node& n);
  bool layer_norm(const Node& n);
  bool attention(const Node& n);
  bool along_axis(const Node& n);
  bool trilu(const Node& n);
  bool expand(const Node& n);
  bool tile(const Node& n);
  bool reduce(const Node& n);
  bool softmax(const Node& n);
  bool select(const Node& n);
  bool concat(const Node& n);
  bool gather(const Node& n);
  bool slice(const Node& n);
  bool pad(const Node& n);
  bool resize(const Node& n);
  bool shape_op(const Node& n);

  const Graph& g_;
  const bool strict_;
  const int64_t b0_, batch_;
  BatchTrace t_;
  std::size_t node_ = 0;
  std::vector<BatchState> out_;  // the node being visited: its outputs' states
  int64_t first_ = 0;            // ... and the sample its first data input starts at
  int64_t outer_ = 1, inner_ = 1;  // ... and how its data inputs' batch axis is merged
  std::string merge_note_;         // ... and by which node
  std::string why_;
  std::unordered_map<std::size_t, std::size_t> choices_;
  std::vector<std::pair<std::size_t, std::size_t>> ambiguous_;
};

// How each op moves the batch axis.  An op without an entry here or in an op class of
// model/op_classes.h is refused: Sluice cannot tell whether it keeps samples apart.
Tracer::Rule Tracer::rule_of(const std::string& op) {
  static const std::unordered_map<std::string, Rule> table = {
      {"Normalize", &Tracer::channelwise},
      {"BatchNormalization", &Tracer::channelwise},
      {"MatMul", &Tracer::matmul},
      {"Gemm", &Tracer::gemm},
      {"Einsum", &Tracer::einsum},
      {"GatherND", &Tracer::gather_nd},
      {"ScatterND", &Tracer::scatter_nd},
      {"GatherElements", &Tracer::elements},
      {"ScatterElements", &Tracer::elements},
      {"GridSample", &Tracer::grid_sample},
      {"Transpose", &Tracer::transpose},
      {"Reshape", &Tracer::reshape},
      {"Flatten", &Tracer::reshape},
      {"Squeeze", &Tracer::squeeze},
      {"Unsqueeze", &Tracer::squeeze},
      {"LayerNormalization", &Tracer::layer_norm},
      {"Attention", &Tracer::attention},
      {"Split", &Tracer::along_axis},
      {"CumSum", &Tracer::along_axis},
      {"Trilu", &Tracer::trilu},
      {"Expand", &Tracer::expand},
      {"Tile", &Tracer::tile},
      {"Softmax", &Tracer::softmax},
      {"LogSoftmax", &Tracer::softmax},
      {"ArgMax", &Tracer::select},
      {"ArgMin", &Tracer::select},
      {"ArgMaxCast", &Tracer::select},
      {"TopK", &Tracer::select},
      {"Concat", &Tracer::concat},
      {"Gather", &Tracer::gather},
      {"Slice", &Tracer::slice},
      {"Pad", &Tracer::pad},
      {"Resize", &Tracer::resize},
      {"Shape", &Tracer::shape_op},
      {"Detections", &Tracer::detections},
  };
  const auto it = table.find(op);
  if (it != table.end()) return it->second;
  if (is_unary_elementwise(op)) return &Tracer::unary;
  if (is_broadcasting_elementwise(op)) return &Tracer::broadcast;
  if (is_per_sample_op(op)) return &Tracer::per_sample;
  if (is_reduction(op)) return &Tracer::reduce;
  return nullptr;
}

bool Tracer::visit(const Node& n) {
  out_.assign(n.outputs.size(), BatchState{});
  first_ = 0;
  outer_ = inner_ = 1;
  merge_note_.clear();
  // Which inputs depend on the input data.  A node none of whose inputs does computes the same for
  // every sample (position tables, masks), whatever the op.
  std::vector<std::size_t> data;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const BatchState s = t_.of(g_, n.input(i));
    if (s.axis == kMixed) {  // keep the first reason
      for (const auto& o : n.outputs)
        if (!o.empty()) t_.states[o] = s;
      return true;
    }
    if (s.axis != kNoBatch) data.push_back(i);
  }
  if (data.empty()) return true;
  bool ok = true;
  if (!strict_ && single_sample(n, data)) {
    ok = why_.empty();
  } else if (strict_ || same_samples(n, data)) {
    const Rule rule = rule_of(n.op);
    ok = same_merge(n, data) &&
         (rule ? (this->*rule)(n) : fail("is an op whose effect on the batch axis Sluice does not know"));
  } else {
    ok = false;
  }
  if (!ok) {
    if (strict_) {
      t_.why = node_context(g_, n) + "it " + why_;
      return false;
    }
    out_.assign(n.outputs.size(), BatchState{kMixed, str(n.describe(), " ", why_), 0});
  }
  why_.clear();
  for (std::size_t k = 0; k < n.outputs.size(); ++k)
    if (!n.outputs[k].empty()) t_.states[n.outputs[k]] = out_[k];
  return true;
}

// Check: one sample's rows cannot mix with others', whatever the op does, so a fixed-batch-1 model
// run as sub-batches of one keeps samples apart through any reshape or reduction.  Returns whether
// every data input holds one sample (and then sets the outputs, or why_ when they mix).
bool Tracer::single_sample(const Node& n, const std::vector<std::size_t>& data) {
  auto single = [&](std::size_t i) {
    const BatchState s = t_.of(g_, n.input(i));
    if (s.axis == kSingle) return true;
    const Shape& sh = shape(n.input(i));
    return s.axis >= 0 && static_cast<std::size_t>(s.axis) < sh.size() && sh[static_cast<std::size_t>(s.axis)] == 1;
  };
  if (!std::all_of(data.begin(), data.end(), single)) return false;
  const int64_t s0 = t_.of(g_, n.input(data.front())).first;
  if (n.op == "Concat" && data.size() == n.inputs.size() && attr_axis(n, 0, rank(n.outputs[0])) == 0) {
    // Sub-batches of one joined along axis 0, in sample order: a batch window again.
    for (std::size_t k = 0; k < data.size(); ++k) {
      const Shape& sh = shape(n.input(data[k]));
      if (sh.empty() || sh[0] != 1 || t_.of(g_, n.input(data[k])).first != s0 + static_cast<int64_t>(k)) {
        fail("joins single samples out of order");
        return true;
      }
    }
    for (auto& o : out_) o = BatchState{0, "", s0};
    return true;
  }
  for (std::size_t i : data)
    if (t_.of(g_, n.input(i)).first != s0) {
      fail("combines rows of different samples");
      return true;
    }
  for (auto& o : out_) o = BatchState{kSingle, "", s0};
  return true;
}

// Check: several data inputs must hold the same samples row by row (a Concat along the batch
// aside), and none may be a single sample among others.  Sets first_ to the samples they start at.
bool Tracer::same_samples(const Node& n, const std::vector<std::size_t>& data) {
  auto st = [&](std::size_t i) { return t_.of(g_, n.input(i)); };
  first_ = st(data.front()).first;
  const bool joins_batch = n.op == "Concat" && attr_axis(n, 0, rank(n.input(data.front()))) == st(data.front()).axis;
  for (std::size_t i : data) {
    if (st(i).axis == kSingle) return fail("combines one sample with other samples");
    if (!joins_batch && st(i).first != first_) return fail("combines rows of different samples");
  }
  return true;
}

// Data inputs that carry the batch must have it merged the same way (or not at all): rows i of two
// tensors then hold the same sample.  Sets the outputs' merge to theirs.
bool Tracer::same_merge(const Node& n, const std::vector<std::size_t>& data) {
  bool seen = false;
  for (std::size_t i : data) {
    const BatchState& s = state(n, i);
    if (s.axis < 0) continue;
    if (!seen) {
      outer_ = s.outer, inner_ = s.inner;
      if (s.merged()) merge_note_ = s.why;
      seen = true;
    } else if (s.outer != outer_ || s.inner != inner_) {
      return fail("combines tensors whose batch axes are merged with other axes in different ways");
    }
  }
  return true;
}

// For rules that index the batch axis itself: only where it holds the samples alone.
bool Tracer::unmerged(const char* what) {
  if (outer_ == 1 && inner_ == 1) return true;
  return fail(str(what, " a batch axis that holds the samples merged with other axes (", merge_note_, ")"));
}

// Respecialize: input i of n does not depend on the input data and meets the data operands' batch
// axis on its axis `at` with more than one row, where broadcasting would need one.  At a model batch
// of one with the batch unmerged or merged only with axes after it (inner rows per sample), those
// rows are one sample's, the same for every sample: at the new batch they are repeated once per
// sample (a Tile, row b x inner + j = row j), which the graph does in front of the node.
bool Tracer::tile_operand(const Node& n, std::size_t i, int at) {
  const Shape& s = shape(n.inputs[i]);
  const std::string what = str("takes operand '", n.inputs[i], "' ", shape_str(s));
  if (b0_ != 1 || outer_ != 1 || at < 0 || static_cast<std::size_t>(at) >= s.size() || s[static_cast<std::size_t>(at)] != inner_)
    return fail(str(what, " that neither broadcasts over the batch axis nor holds one sample's rows along it"));
  if (shape_numel(s) * batch_ > (int64_t(1) << 25)) return fail(str(what, ", too large to repeat for every sample"));
  std::vector<int64_t> reps(s.size(), 1);
  reps[static_cast<std::size_t>(at)] = batch_;
  t_.rewrites.push_back({node_, i, Tensor::from(DType::I64, Shape{static_cast<int64_t>(reps.size())}, reps), true});
  return true;
}

// ---- element-wise ----

// Element by element on input 0; any further inputs are parameters (Clip's bounds).
bool Tracer::unary(const Node& n) {
  if (ax(n, 0) == kNoBatch) return fail("takes a parameter from the input data");
  if (strict_ && !params_free(n, 1)) return false;
  all(ax(n, 0));
  return true;
}

// Per channel on axis 1 (Normalize's mean and std, BatchNormalization's statistics).
bool Tracer::channelwise(const Node& n) {
  if (!params_free(n, 1)) return false;
  if (ax(n, 0) == 1) return fail("works per channel, and the batch is on its channel axis");
  set(0, ax(n, 0));  // BatchNormalization's optional mean/var outputs are per channel
  return true;
}

// Numpy broadcasting aligns trailing axes: the batch must sit on one aligned axis; at another batch
// every operand without it must have size 1 there.
bool Tracer::broadcast(const Node& n) {
  int rmax = 0;
  for (const auto& in : n.inputs) rmax = std::max(rmax, rank(in));
  int at = kNoBatch;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (ax(n, i) == kNoBatch) continue;
    const int aligned = ax(n, i) + rmax - rank(n.inputs[i]);
    if (at != kNoBatch && at != aligned) return fail("combines two tensors whose batch axes do not line up");
    at = aligned;
  }
  for (std::size_t i = 0; strict_ && i < n.inputs.size(); ++i) {
    const std::string& in = n.inputs[i];
    if (ax(n, i) != kNoBatch) continue;
    const int k = at - (rmax - rank(in));
    if (k >= 0 && shape(in)[static_cast<std::size_t>(k)] != 1 && !tile_operand(n, i, k))
      return fail(str("takes operand '", in, "' ", shape_str(shape(in)), " of size ", shape(in)[static_cast<std::size_t>(k)],
                      " on the batch axis instead of broadcasting over it"));
  }
  all(at);
  return true;
}

// ---- per sample: [N, C, ...] with the batch on axis 0 of input 0 ----

bool Tracer::per_sample(const Node& n) {
  const int a = ax(n, 0);
  if (a != kNoBatch && a != 0) return fail(str("runs over the batch as a feature axis (the batch is on axis ", a, ")"));
  // Weights and bias never carry the batch; FusedConv's residual Z (input 3) must follow X.
  const bool fused = n.op == "FusedConv";
  for (std::size_t i = 1; i < n.inputs.size(); ++i)
    if (!(fused && i == 3) && ax(n, i) != kNoBatch) return fail("takes its weights from the input data");
  if (fused && !n.input(3).empty() && ax(n, 3) != a)
    return fail("adds a residual that does not carry the batch where its input does");
  all(0);
  return true;
}

// sluice.Detections: every detector output [B, ...] and both results per sample on axis 0.
bool Tracer::detections(const Node& n) {
  for (std::size_t i = 0; i < n.inputs.size(); ++i)
    if (ax(n, i) != 0) return fail("reads a detector output whose batch is not on axis 0");
  if (!unmerged("reads detector outputs from")) return false;
  all(0);
  return true;
}

// ---- products ----

// sluice.Attention: q, k and v with the batch on one leading axis (not the sequence or feature
// axes), and a bias that does not depend on the input data or carries the batch outermost too.  One of q, k, v may not depend on the
// input (DETR's decoder queries, SigLIP's pooling probe): it is the same for every sample, and at
// the new batch it is repeated for every sample (the op does not broadcast).
bool Tracer::attention(const Node& n) {
  int a = kNoBatch;
  for (std::size_t i = 0; i < 3; ++i) {
    if (ax(n, i) == kNoBatch) continue;
    if (a != kNoBatch && ax(n, i) != a) a = kMixed;
    else a = ax(n, i);
  }
  const bool strided = n.get_string("layout", "") == "strided";
  if (a < 0 || a >= rank(n.input(0)) - 2 || (strided && a != 0))
    return fail("mixes rows of attention across the batch (q, k and v do not carry it on one leading axis)");
  // A bias computed from the data (a text encoder's padding mask, [B, ...]) keeps the samples apart when it
  // carries the batch outermost, as q, k and v do: the op reads it by flat matrix index, batch first.
  if (n.inputs.size() > 3 && !n.input(3).empty() && ax(n, 3) != kNoBatch &&
      (ax(n, 3) != 0 || a != 0 || t_.of(g_, n.input(3)).merged()))
    return fail("adds an attention bias computed from the input data");
  for (std::size_t i = 0; strict_ && i < 3; ++i)
    if (ax(n, i) == kNoBatch && !tile_operand(n, i, a)) return false;
  all(a);
  return true;
}

bool Tracer::matmul(const Node& n) {
  const std::string &A = n.input(0), &B = n.input(1);
  const int ra = rank(A), rb = rank(B), aa = ax(n, 0), ab = ax(n, 1);
  const int R = std::max(ra, rb);
  if ((aa != kNoBatch && (ra < 2 || aa == ra - 1)) || (ab != kNoBatch && (rb < 2 || ab == rb - 2)))
    return fail("sums over the batch axis");
  const int at = aa != kNoBatch ? aa + R - ra : ab + R - rb;
  if (aa != kNoBatch && ab != kNoBatch && (ab + R - rb != at || at >= R - 2))
    return fail("multiplies two tensors whose batch axes do not line up");
  // Leading (broadcast) axes: at another batch, the operand without the batch must have size 1 there.
  if (strict_ && at < R - 2) {
    for (const std::string* x : {&A, &B}) {
      if (t_.of(g_, *x).axis != kNoBatch) continue;
      const int i = at - (R - rank(*x));
      if (i >= 0 && shape(*x)[static_cast<std::size_t>(i)] != 1 && !tile_operand(n, x == &A ? 0 : 1, i)) return false;
    }
  }
  set(0, at);
  return true;
}

bool Tracer::gemm(const Node& n) {
  const int aa = ax(n, 0), ab = ax(n, 1);
  if (aa != kNoBatch && ab != kNoBatch) return fail("multiplies two tensors that both carry the batch");
  const bool ta = n.get_int("transA", 0) != 0, tb = n.get_int("transB", 0) != 0;
  if (aa != kNoBatch && aa != (ta ? 1 : 0)) return fail("multiplies across the batch axis (A's inner, summed axis)");
  if (ab != kNoBatch && ab != (tb ? 0 : 1)) return fail("multiplies across the batch axis (B's inner, summed axis)");
  const int o = aa != kNoBatch ? 0 : ab != kNoBatch ? 1 : kNoBatch;
  if (!n.input(2).empty()) {
    const std::string& c = n.inputs[2];
    const int ac = ax(n, 2);
    if (ac != kNoBatch && (o == kNoBatch || ac + 2 - rank(c) != o))
      return fail("adds a C that carries the batch where A x B does not");
    if (strict_ && ac == kNoBatch) {
      const int i = o - (2 - rank(c));
      if (i >= 0 && shape(c)[static_cast<std::size_t>(i)] != 1)
        return fail("adds a C that does not broadcast over the batch axis");
    }
  }
  set(0, o);
  return true;
}

// The batch is one label, carried by every operand that has it and kept in the output.
bool Tracer::einsum(const Node& n) {
  std::vector<Shape> shapes;
  for (const auto& in : n.inputs) shapes.push_back(shape(in));
  const EinsumSpec spec = parse_einsum(n.get_string("equation", ""), shapes, node_context(g_, n));
  int label = -1;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (ax(n, i) == kNoBatch) continue;
    const int l = spec.inputs[i][static_cast<std::size_t>(ax(n, i))];
    if (label >= 0 && l != label) return fail("multiplies tensors whose batch axes do not line up");
    label = l;
  }
  for (std::size_t i = 0; i < n.inputs.size(); ++i)
    for (std::size_t d = 0; d < spec.inputs[i].size(); ++d)
      if (spec.inputs[i][d] == label && static_cast<int>(d) != ax(n, i))
        return fail(str("sums over the batch axis (operand ", i, " has the batch's label on an axis without the batch)"));
  const auto it = std::find(spec.output.begin(), spec.output.end(), label);
  if (it == spec.output.end()) return fail("sums over the batch axis");
  set(0, static_cast<int>(it - spec.output.begin()));
  return true;
}

// ---- indexing with constant indices: the batch must lie past the indexed axes ----

bool Tracer::gather_nd(const Node& n) {
  if (!params_free(n, 1)) return false;
  const Shape& is = shape(n.inputs[1]);
  const int a = ax(n, 0), q = static_cast<int>(is.size()), k = is.empty() ? 0 : static_cast<int>(is.back());
  if (n.get_int("batch_dims", 0) != 0 || a < k) return fail("selects along the batch axis");
  set(0, q - 1 + a - k);
  return true;
}

bool Tracer::scatter_nd(const Node& n) {
  const Shape& is = shape(n.inputs[1]);
  const int a = ax(n, 0), q = static_cast<int>(is.size()), k = is.empty() ? 0 : static_cast<int>(is.back());
  if (ax(n, 1) != kNoBatch || a == kNoBatch || a < k) return fail("scatters along the batch axis");
  if (ax(n, 2) != q - 1 + a - k) return fail("scatters rows of other samples");
  set(0, a);
  return true;
}

// GatherElements, ScatterElements: element by element along `axis`, so the batch must lie on
// another axis, the same in data, indices and updates.  A constant operand holds a row per sample
// of the model's batch (Check: any rows; Respecialize: the same row for every sample, repeated).
bool Tracer::elements(const Node& n) {
  int a = kNoBatch;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (ax(n, i) == kNoBatch) continue;
    if (a != kNoBatch && ax(n, i) != a) return fail("indexes with tensors whose batch axes do not line up");
    a = ax(n, i);
  }
  const bool gather = n.op == "GatherElements";
  if (attr_axis(n, 0, rank(n.inputs[0])) == a)
    return fail(gather ? "selects along the batch axis" : "scatters along the batch axis");
  const std::size_t at = static_cast<std::size_t>(a);
  if (gather && ax(n, 1) == kNoBatch && shape(n.inputs[1])[at] != shape(n.inputs[0])[at])
    return fail("changes the batch axis' length");
  if (!constant_rows(n, a)) return false;
  set(0, a);
  return true;
}

// GridSample: X [N, C, H, W] and grid [N, Ho, Wo, 2] pair up sample by sample on axis 0.
bool Tracer::grid_sample(const Node& n) {
  for (std::size_t i = 0; i < 2; ++i)
    if (ax(n, i) != kNoBatch && ax(n, i) != 0)
      return fail(str("samples with its input ", i, " carrying the batch on axis ", ax(n, i), ", not 0"));
  if (!constant_rows(n, 0)) return false;
  set(0, 0);
  return true;
}

// Respecialize: every input without the batch is a constant with the model's batch on axis a and
// the same row for each sample, rewritten to that row repeated at the new batch.
bool Tracer::constant_rows(const Node& n, int a) {
  for (std::size_t i = 0; strict_ && i < n.inputs.size(); ++i) {
    if (n.input(i).empty() || ax(n, i) != kNoBatch) continue;
    if (!unmerged("pairs a constant with")) return false;
    const Tensor* t = constant(n, i);
    const std::size_t at = static_cast<std::size_t>(a);
    if (!t || t->shape.size() <= at || t->shape[at] != b0_ || (b0_ != 1 && !rows_equal(*t, at)))
      return fail(str("pairs the samples with input ", i, " ('", n.inputs[i], "'), which is not one constant row for every sample"));
    if (t->numel() / b0_ * batch_ > (int64_t(1) << 25)) return fail("pairs the samples with a large constant");
    t_.rewrites.push_back({node_, i, repeat_rows(b0_ == 1 ? *t : first_row(*t, at), at, batch_)});
  }
  return true;
}

// ---- moving axes ----

bool Tracer::transpose(const Node& n) {
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  std::vector<int64_t> perm = n.get_ints("perm");
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  const auto it = std::find(perm.begin(), perm.end(), a);
  set(0, static_cast<int>(it - perm.begin()));
  return true;
}

// Reshape and Flatten keep each sample's elements together when, in row-major order, the input's
// [elements before the samples, samples, elements after] lands with its samples inside one output
// axis q: the batch is then on q, merged with what shares q (heads, windows, sequence positions).
// Where q holds the samples alone, the batch is its own axis again.  With more than one sample that
// q is unique; a batch of one fits several, each a layout that keeps the samples apart at any batch
// (the rules after it prove or refuse the rest, and a refusal leaves sub-batches), and the trace
// takes the likeliest: the batch alone, else on its own axis with the same elements before it, else
// anywhere but merged into the last axis (the features the next product sums over).  Reshape's
// target gets the new batch at q.
bool Tracer::reshape(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0);
  const BatchState& s = state(n, 0);
  const Shape& in = shape(n.inputs[0]);
  const Shape& res = shape(n.outputs.at(0));
  const int64_t samples = in[static_cast<std::size_t>(a)] / (s.outer * s.inner);
  const int64_t lead = product(in, 0, static_cast<std::size_t>(a)), before = lead * s.outer;
  struct Candidate {
    int rank, q;
    int64_t outer, inner;
  };
  std::vector<Candidate> cands;
  for (std::size_t k = 0; k < res.size(); ++k) {
    const int64_t pb = product(res, 0, k), pa = pb * res[k];
    if (pb == 0 || before % pb != 0 || pa % (before * samples) != 0) continue;
    const int64_t o = before / pb, i = pa / (before * samples);
    const bool alone = o == 1 && i == 1, here = static_cast<int>(k) == a;
    const bool last = k + 1 == res.size() && i > 1;  // into the features that the next product sums
    const int rank = alone ? (here ? 5 : 4) : last ? 0 : here && pb == lead ? 3 : 2;
    cands.push_back({rank, static_cast<int>(k), o, i});
  }
  // The likeliest first; Respecialize tries the others where the likeliest fails further on
  // (trace_batch): a batch of one cannot tell [1, 1, C]'s axes apart, which a sequence-first
  // attention's [L = 1, N, C] needs (SigLIP's pooling head).
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) { return x.rank > y.rank; });
  int q = -1;
  int64_t outer = 1, inner = 1;
  if (!cands.empty()) {
    if (strict_ && cands.size() > 1) ambiguous_.push_back({node_, cands.size()});
    const auto it = choices_.find(node_);
    const Candidate& c = cands[it == choices_.end() ? 0 : std::min(it->second, cands.size() - 1)];
    q = c.q, outer = c.outer, inner = c.inner;
  }
  const bool flatten = n.op == "Flatten";
  if (q < 0)
    return fail(str(flatten ? "flattens the batch axis together with other axes: " : "merges or splits the batch axis: ",
                    shape_str(in), " -> ", shape_str(res)));
  if (strict_ && !flatten) {
    const Tensor* target = constant(n, 1);
    if (!target) return fail("reshapes to a target shape that is not constant");
    const std::vector<int64_t> t = target->as_int64();
    const bool copies = t[static_cast<std::size_t>(q)] == 0 && n.get_int("allowzero", 0) == 0 && q == a &&
                        outer == s.outer && inner == s.inner;
    if (t[static_cast<std::size_t>(q)] != -1 && !copies)
      t_.rewrites.push_back({node_, 1, with_element(*target, static_cast<std::size_t>(q), outer * batch_ * inner)});
  }
  outer_ = outer, inner_ = inner;
  merge_note_ = outer == 1 && inner == 1 ? "" : str(n.describe(), " merges it: ", shape_str(in), " -> ", shape_str(res));
  set(0, q);
  return true;
}

bool Tracer::squeeze(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  const bool sq = n.op == "Squeeze";
  std::vector<int64_t> axes = ints(n, 1);
  if (!n.input(1).empty() && !constant(n, 1)) return fail("takes axes that are not constant");
  if (sq && axes.empty()) {
    if (strict_) return fail("squeezes every axis of size 1, which would drop the batch at batch 1");
    const Shape& s = shape(n.inputs[0]);
    for (int i = 0; i < r; ++i)
      if (s[static_cast<std::size_t>(i)] == 1) axes.push_back(i);
  }
  const int out_rank = sq ? r - static_cast<int>(axes.size()) : r + static_cast<int>(axes.size());
  for (auto& x : axes) x = norm(x, sq ? r : out_rank);
  if (sq) {
    if (std::count(axes.begin(), axes.end(), a)) return fail("squeezes the batch axis");
    set(0, a - static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t x) { return x < a; })));
    return true;
  }
  for (int i = 0, j = 0; i < out_rank; ++i) {  // j: the input axes not inserted so far
    if (std::count(axes.begin(), axes.end(), i)) continue;
    if (j++ == a) {
      set(0, i);
      break;
    }
  }
  return true;
}

// ---- along one axis ----

bool Tracer::layer_norm(const Node& n) {
  if (!params_free(n, 1)) return false;
  if (ax(n, 0) >= attr_axis(n, -1, rank(n.inputs[0]))) return fail("normalizes over the batch axis");
  all(ax(n, 0));
  return true;
}

bool Tracer::along_axis(const Node& n) {  // Split, CumSum
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  int64_t axis = attr_axis(n, 0, r);
  if (n.op == "CumSum") {
    const Tensor* t = constant(n, 1);
    if (!t || t->numel() != 1) return fail("sums along an axis computed at run time");
    axis = norm(t->as_int64()[0], r);
  }
  if (axis == a) return fail(n.op == "Split" ? "splits the batch axis" : "sums along the batch axis");
  all(a);
  return true;
}

bool Tracer::trilu(const Node& n) {
  if (!params_free(n, 1)) return false;
  if (ax(n, 0) >= rank(n.inputs[0]) - 2) return fail("masks along the batch axis");
  set(0, ax(n, 0));
  return true;
}

// Expand broadcasts the batch axis against the target shape's value there: 1 keeps it, the model's
// batch is rewritten to the new one.
bool Tracer::expand(const Node& n) {
  if (!params_free(n, 1)) return false;
  const Tensor* t = constant(n, 1);
  if (!t) return fail("expands to a shape that is not constant");
  const std::vector<int64_t> v = t->as_int64();
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  const int R = std::max(r, static_cast<int>(v.size()));
  const int at = a + R - r;
  const Shape& y = shape(n.outputs.at(0));
  const int64_t len = shape(n.inputs[0])[static_cast<std::size_t>(a)];
  if (y.size() <= static_cast<std::size_t>(at) || y[static_cast<std::size_t>(at)] != len)
    return fail("changes the batch axis' length");
  const int i = at - (R - static_cast<int>(v.size()));
  if (strict_ && i >= 0 && v[static_cast<std::size_t>(i)] == len && len != 1)
    t_.rewrites.push_back({node_, 1, with_element(*t, static_cast<std::size_t>(i), len / b0_ * batch_)});
  set(0, at);
  return true;
}

bool Tracer::tile(const Node& n) {
  if (!params_free(n, 1)) return false;
  const Tensor* t = constant(n, 1);
  if (!t) return fail("repeats by counts that are not constant");
  const std::vector<int64_t> v = t->as_int64();
  const int a = ax(n, 0);
  if (static_cast<std::size_t>(a) >= v.size() || v[static_cast<std::size_t>(a)] != 1) return fail("repeats the batch axis");
  set(0, a);
  return true;
}

bool Tracer::reduce(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  if (!n.input(1).empty() && !constant(n, 1)) return fail("reduces over axes computed at run time");
  std::vector<bool> red(static_cast<std::size_t>(r), false);
  for (int64_t v : ints(n, 1)) red[static_cast<std::size_t>(norm(v, r))] = true;  // canonical: axes as input 1
  if (std::none_of(red.begin(), red.end(), [](bool b) { return b; }) && n.get_int("noop_with_empty_axes", 0) == 0)
    red.assign(static_cast<std::size_t>(r), true);
  if (red[static_cast<std::size_t>(a)]) return fail("reduces over the batch axis");
  set(0, n.get_int("keepdims", 1) != 0 ? a : static_cast<int>(a - std::count(red.begin(), red.begin() + a, true)));
  return true;
}

bool Tracer::softmax(const Node& n) {  // Softmax, LogSoftmax
  if (attr_axis(n, -1, rank(n.inputs[0])) == ax(n, 0)) return fail("works along the batch axis, across samples");
  set(0, ax(n, 0));
  return true;
}

bool Tracer::select(const Node& n) {  // ArgMax, ArgMin, ArgMaxCast, TopK
  if (!params_free(n, 1)) return false;
  const std::string& op = n.op;
  const int a = ax(n, 0);
  const int64_t axis = attr_axis(n, op == "TopK" ? -1 : op == "ArgMaxCast" ? 1 : 0, rank(n.inputs[0]));
  if (axis == a) return fail("works along the batch axis, across samples");
  const bool drops = op == "ArgMaxCast" || (op != "TopK" && n.get_int("keepdims", 1) == 0);
  all(drops && axis < a ? a - 1 : a);
  return true;
}

// ---- joining, selecting, cutting ----

bool Tracer::concat(const Node& n) {
  int a = kNoBatch;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    if (ax(n, i) == kNoBatch) continue;
    if (a != kNoBatch && ax(n, i) != a) return fail("joins tensors whose batch axes do not line up");
    a = ax(n, i);
  }
  const int r = rank(n.outputs.at(0));
  if (attr_axis(n, 0, r) == a) {
    if (strict_) return fail("joins tensors along the batch axis");
    if (!unmerged("joins tensors along")) return false;
    // Check: only consecutive windows of samples, every input data (sub-batches joined).
    int64_t next = t_.of(g_, n.inputs[0]).first;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const BatchState s = t_.of(g_, n.inputs[i]);
      if (s.axis == kNoBatch) return fail("joins other data to the batch axis");
      if (s.first != next) return fail("joins tensors along the batch axis out of sample order");
      next += shape(n.inputs[i])[static_cast<std::size_t>(a)];
    }
    first_ = t_.of(g_, n.inputs[0]).first;
    set(0, a);
    return true;
  }
  for (std::size_t i = 0; strict_ && i < n.inputs.size(); ++i) {
    if (ax(n, i) != kNoBatch) continue;
    // A constant row joined to every sample (a class token expanded to the model's batch, folded
    // into a constant): at the new batch, that row repeated once per sample.
    const Tensor* t = constant(n, i);
    if (!unmerged("joins a constant to")) return false;
    const std::size_t at = static_cast<std::size_t>(a);
    if (!t || t->shape.size() <= at || t->shape[at] != b0_ || (b0_ != 1 && !rows_equal(*t, at)))
      return fail("joins tensors that carry the batch with tensors that do not");
    if (t->numel() / b0_ * batch_ > (int64_t(1) << 25)) return fail("joins a large constant to every sample");
    t_.rewrites.push_back({node_, i, repeat_rows(b0_ == 1 ? *t : first_row(*t, at), at, batch_)});
  }
  set(0, a);
  return true;
}

bool Tracer::gather(const Node& n) {
  const int a = ax(n, 0), ai = ax(n, 1);
  const int64_t axis = attr_axis(n, 0, rank(n.inputs[0]));
  if (a != kNoBatch && ai != kNoBatch) return fail("selects along the batch axis with indices from the input data");
  if (a == kNoBatch) {  // indices from the data into a constant table (an embedding)
    set(0, static_cast<int>(axis) + ai);
    return true;
  }
  if (axis == a) return fail("selects along the batch axis");
  set(0, static_cast<int>(a < axis ? a : a + rank(n.inputs[1]) - 1));
  return true;
}

// Check: a window of the batch (step 1) is a sub-batch whose rows hold the samples from first +
// start.  Respecialize: only a slice that keeps the whole batch axis, which stays whole at the new
// batch.
bool Tracer::slice(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  for (std::size_t i = 1; i < n.inputs.size(); ++i)
    if (!n.input(i).empty() && !constant(n, i)) return fail("takes bounds that are not constant");
  const std::vector<int64_t> starts = ints(n, 1), ends = ints(n, 2), axes = ints(n, 3), steps = ints(n, 4);
  const Shape &x = shape(n.inputs[0]), &y = shape(n.outputs.at(0));
  const int64_t len = x[static_cast<std::size_t>(a)];
  int64_t shift = 0;
  bool on_batch = false;
  for (std::size_t k = 0; k < starts.size(); ++k) {
    if ((axes.empty() ? static_cast<int64_t>(k) : norm(axes[k], r)) != a) continue;
    const int64_t step = k < steps.size() ? steps[k] : 1;
    if (step != 1) return fail("reorders the batch axis");
    if (!unmerged("cuts")) return false;
    if (strict_) {
      if (starts[k] != 0 || k >= ends.size() || ends[k] < b0_) return fail("cuts the batch axis");
      t_.rewrites.push_back({node_, 2, with_element(*constant(n, 2), k, std::numeric_limits<int64_t>::max())});
    }
    shift = std::min(std::max<int64_t>(starts[k] < 0 ? starts[k] + len : starts[k], 0), len);
    on_batch = true;
  }
  if (y.size() != static_cast<std::size_t>(r)) return fail("changes the rank around the batch axis");
  if (!on_batch && y[static_cast<std::size_t>(a)] != len) return fail("changes the batch axis' length");
  first_ += shift;
  set(0, a);
  return true;
}

bool Tracer::pad(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  const Tensor* pads = constant(n, 1);
  if (!pads || (!n.input(3).empty() && !constant(n, 3))) return fail("pads by amounts that are not constant");
  const std::vector<int64_t> p = pads->as_int64();
  std::vector<int64_t> axes = ints(n, 3);
  if (axes.empty())
    for (int i = 0; i < r; ++i) axes.push_back(i);
  for (std::size_t i = 0; i < axes.size() && i + axes.size() < p.size(); ++i)
    if (norm(axes[i], r) == a && (p[i] != 0 || p[i + axes.size()] != 0)) return fail("pads the batch axis");
  set(0, a);
  return true;
}

bool Tracer::resize(const Node& n) {
  if (!params_free(n, 1)) return false;
  const int a = ax(n, 0), r = rank(n.inputs[0]);
  const Shape &x = shape(n.inputs[0]), &y = shape(n.outputs.at(0));
  if (y.size() != x.size() || y[static_cast<std::size_t>(a)] != x[static_cast<std::size_t>(a)])
    return fail("changes the batch axis' length");
  set(0, a);
  std::vector<int64_t> axes = n.get_ints("axes");
  if (axes.empty())
    for (int i = 0; i < r; ++i) axes.push_back(i);
  std::size_t at = axes.size();
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (norm(axes[i], r) == a) at = i;
  if (at == axes.size() || !strict_) return true;
  if (n.get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return fail("crops along the batch axis");
  if (const Tensor* sizes = constant(n, 3)) {
    const int64_t len = x[static_cast<std::size_t>(a)];
    if (sizes->as_int64().at(at) != len) return fail("resizes the batch axis");
    t_.rewrites.push_back({node_, 3, with_element(*sizes, at, len / b0_ * batch_)});
    return true;
  }
  if (const Tensor* scales = constant(n, 2)) {
    if (scales->as_float().at(at) != 1.f) return fail("resizes the batch axis");
    return true;
  }
  return fail("resizes by sizes and scales that are not constant");
}

// The shape of a data tensor does not depend on its values: the same for every sample at the job's
// batch, but the batch size itself at another one.
bool Tracer::shape_op(const Node&) {
  if (strict_) return fail("reads the batch size at run time");
  return true;
}

}  // namespace

BatchState BatchTrace::of(const Graph& g, const std::string& name) const {
  if (name.empty() || g.is_constant(name)) return {};
  const auto it = states.find(name);
  return it == states.end() ? BatchState{} : it->second;
}

namespace {

// Respecialize: the trace proves every op and ends with each output's batch on axis 0, alone.
bool proven(const Graph& g, const BatchTrace& t) {
  if (!t.why.empty()) return false;
  for (const ValueInfo& o : g.outputs) {
    const BatchState st = t.of(g, o.name);
    if (st.axis != 0 || st.merged()) return false;
  }
  return true;
}

}  // namespace

// Respecialize: where the likeliest reading of the Reshapes does not prove the graph, each other
// reading of one ambiguous Reshape is tried, the last one before the failure first (at most 32
// traces).  Any reading that proves the graph is a proof: the rewrites follow that reading.
BatchTrace trace_batch(const Graph& g, BatchQuestion q, int64_t b0, int64_t batch) {
  Tracer first(g, q, b0, batch);
  BatchTrace t = first.run();
  if (q != BatchQuestion::Respecialize || proven(g, t)) return t;
  const auto ambiguous = first.ambiguous();
  int tries = 0;
  for (auto it = ambiguous.rbegin(); it != ambiguous.rend() && tries < 32; ++it)
    for (std::size_t c = 1; c < it->second && tries < 32; ++c, ++tries) {
      BatchTrace other = Tracer(g, q, b0, batch, {{it->first, c}}).run();
      if (proven(g, other)) return other;
    }
  return t;
}

}  // namespace sluice
