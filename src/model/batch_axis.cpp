// The batch-axis check: a forward pass over the graph that tracks, for every tensor, where the
// input's batch axis went.  A tensor is either independent of the input (kConst: weights, shapes),
// has the batch on one axis with every row depending on its own sample only, or is kMixed (rows
// mixed, or the axis dropped), with the reason kept for the message.  A data tensor also knows
// which samples its batch axis holds (rows 0.. hold samples first..): a Slice along the batch takes
// a window of them and a Concat along the batch may join consecutive windows again, which is how a
// fixed-batch model runs as sub-batches (model/batch_adapt.h) without mixing samples.
#include "model/batch_axis.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "model/einsum.h"
#include "model/graph_util.h"
#include "model/op_classes.h"

namespace sluice {

namespace {

constexpr int kConst = -1;
constexpr int kMixed = -2;
constexpr int kSingle = -3;  // a tensor computed from one sample only (a sub-batch of one), any layout

struct State {
  int axis = kConst;
  std::string why;    // for kMixed: the node and what it did
  int64_t first = 0;  // a data tensor: the sample its batch axis' row 0 holds
};

class Tracker {
 public:
  explicit Tracker(const Graph& g) : g_(g) {}

  void run() {
    if (!g_.inputs.empty()) state_[g_.inputs[0].name] = State{0, ""};
    for (const Node& n : g_.nodes) visit(n);
  }

  State of(const std::string& name) const {
    if (name.empty() || g_.is_constant(name)) return {};
    auto it = state_.find(name);
    return it == state_.end() ? State{} : it->second;
  }

 private:
  const Shape& shape(const std::string& name) const {
    static const Shape none;
    const ValueInfo* v = g_.value(name);
    return v ? v->shape : none;
  }
  int64_t rank(const std::string& name) const { return static_cast<int64_t>(shape(name).size()); }
  std::vector<int64_t> const_ints(const Node& n, std::size_t i) const {
    const Tensor* t = n.input(i).empty() ? nullptr : g_.constant(n.input(i));
    return t ? t->as_int64() : std::vector<int64_t>{};
  }
  static int64_t norm(int64_t axis, int64_t r) { return axis < 0 ? axis + r : axis; }

  void set_all(const Node& n, State s) {
    for (const auto& o : n.outputs)
      if (!o.empty()) state_[o] = s;
  }
  void mixed(const Node& n, const std::string& what) { set_all(n, State{kMixed, str(n.describe(), " ", what)}); }
  void axis(const Node& n, int a) { set_all(n, State{a, "", first_}); }
  void axis_at(const Node& n, int a, int64_t first) { set_all(n, State{a, "", first}); }

  // The output axis that holds input `x`'s batch axis `a` after a reshape to the output's shape:
  // the one whose preceding dimensions hold as many elements and whose size is the batch's.
  int reshaped(const std::string& x, int a, const std::string& y) const {
    const Shape& in = shape(x);
    const Shape& out = shape(y);
    int64_t before = 1;
    for (int i = 0; i < a; ++i) before *= in[static_cast<std::size_t>(i)];
    int64_t acc = 1;
    for (std::size_t b = 0; b < out.size(); ++b) {
      if (acc == before && out[b] == in[static_cast<std::size_t>(a)]) return static_cast<int>(b);
      acc *= out[b];
      if (acc > before) break;
    }
    return kMixed;
  }

  void visit(const Node& n) {
    // Which inputs depend on the input data, and where their batch axis is.
    std::vector<std::pair<std::size_t, State>> data;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const State s = of(n.input(i));
      if (s.axis == kMixed) return set_all(n, s);  // keep the first reason
      if (s.axis >= 0) data.emplace_back(i, s);
    }
    if (data.empty()) return set_all(n, State{});
    const std::string& op = n.op;
    // One sample's rows cannot mix with others', whatever the op does: a fixed-batch-1 model run as
    // sub-batches of one keeps samples apart through any reshape or reduction.
    auto single = [&](std::size_t i, const State& st) {
      if (st.axis == kSingle) return true;
      const Shape& sh = shape(n.input(i));
      return st.axis >= 0 && static_cast<std::size_t>(st.axis) < sh.size() && sh[static_cast<std::size_t>(st.axis)] == 1;
    };
    if (std::all_of(data.begin(), data.end(), [&](const auto& d) { return single(d.first, d.second); })) {
      const int64_t s0 = data.front().second.first;
      if (op == "Concat" && data.size() == n.inputs.size() && norm(n.get_int("axis", 0), rank(n.outputs[0])) == 0) {
        // Sub-batches of one joined along axis 0, in sample order: a batch window again.
        for (std::size_t k = 0; k < data.size(); ++k) {
          const Shape& sh = shape(n.input(data[k].first));
          if (sh.empty() || sh[0] != 1 || data[k].second.first != s0 + static_cast<int64_t>(k))
            return mixed(n, "joins single samples out of order");
        }
        return set_all(n, State{0, "", s0});
      }
      for (const auto& d : data)
        if (d.second.first != s0) return mixed(n, "combines rows of different samples");
      return set_all(n, State{kSingle, "", s0});
    }
    for (const auto& d : data)
      if (d.second.axis == kSingle) return mixed(n, "combines one sample with other samples");
    const std::size_t first = data.front().first;
    const int a = data.front().second.axis;
    first_ = data.front().second.first;
    // Several data inputs must hold the same samples row by row (a Concat along the batch aside).
    if (!(op_is(n, "Concat") && norm(n.get_int("axis", 0), rank(n.input(first))) == a))
      for (const auto& d : data)
        if (d.second.first != first_) return mixed(n, "combines rows of different samples");
    const std::string& x = n.input(first);
    const std::string y = n.outputs.empty() ? std::string() : n.outputs[0];

    if (op == "Detections") {  // per sample: every input and both outputs [B, ...]
      for (const auto& [i, s] : data)
        if (s.axis != 0) return mixed(n, "reads a detector output whose batch is not on axis 0");
      return axis(n, 0);
    }
    if (is_unary_elementwise(op) || op == "Normalize") {
      if (first != 0) return mixed(n, "takes a parameter from the input data");
      return axis(n, a);
    }
    if (is_broadcasting_elementwise(op)) {
      // Broadcasting aligns trailing axes: input axis a of rank r is output axis a + (R - r).
      const int64_t R = rank(y);
      int out = -1;
      for (const auto& [i, s] : data) {
        const int o = static_cast<int>(s.axis + (R - rank(n.input(i))));
        if (out >= 0 && o != out) return mixed(n, "combines two tensors whose batch axes do not line up");
        out = o;
      }
      return axis(n, out);
    }
    if (is_per_sample_op(op) || op == "BatchNormalization") {
      for (const auto& [i, s] : data) {
        if (i == 0 || (op == "FusedConv" && i == 3)) {
          if (s.axis != 0) return mixed(n, str("runs over the batch as a feature axis (the batch is on axis ", s.axis, ")"));
        } else {
          return mixed(n, "takes its weights from the input data");
        }
      }
      return axis(n, 0);
    }
    if (op == "MatMul") {
      const int64_t R = rank(y);
      int out = -1;
      for (const auto& [i, s] : data) {
        const int64_t ri = rank(n.input(i));
        const bool contracted = (i == 0 && s.axis == ri - 1) || (i == 1 && s.axis == ri - 2);
        if (contracted || ri < 2) return mixed(n, "sums over the batch axis");
        const int o = static_cast<int>(s.axis + (R - ri));
        if (out >= 0 && o != out) return mixed(n, "multiplies two tensors whose batch axes do not line up");
        out = o;
      }
      return axis(n, out);
    }
    if (op == "Einsum") {
      std::vector<Shape> shapes;
      for (const auto& in : n.inputs) shapes.push_back(shape(in));
      const EinsumSpec spec = parse_einsum(n.get_string("equation", ""), shapes, node_context(g_, n));
      int label = -1;
      for (const auto& [i, s] : data) {
        const int l = spec.inputs[i][static_cast<std::size_t>(s.axis)];
        if (label >= 0 && l != label) return mixed(n, "multiplies tensors whose batch axes do not line up");
        label = l;
      }
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const int ai = of(n.input(i)).axis;
        for (std::size_t d = 0; d < spec.inputs[i].size(); ++d)
          if (spec.inputs[i][d] == label && static_cast<int>(d) != ai) return mixed(n, "sums over the batch axis");
      }
      const auto it = std::find(spec.output.begin(), spec.output.end(), label);
      if (it == spec.output.end()) return mixed(n, "sums over the batch axis");
      return axis(n, static_cast<int>(it - spec.output.begin()));
    }
    if (op == "ScatterND") {
      // Constant indices past the batch axis; the updates carry the batch where the data does.
      const int64_t q = rank(n.input(1)), k = shape(n.input(1)).empty() ? 0 : shape(n.input(1)).back();
      if (of(n.input(1)).axis != kConst || of(n.input(0)).axis < k) return mixed(n, "scatters along the batch axis");
      if (of(n.input(2)).axis != q - 1 + of(n.input(0)).axis - k) return mixed(n, "scatters rows of other samples");
      return axis(n, of(n.input(0)).axis);
    }
    if (first != 0 && op != "Concat") return mixed(n, "takes a parameter from the input data");
    if (data.size() > 1 && op != "Concat" && op != "MatMul") return mixed(n, "combines several inputs along the batch");

    const int64_t r = rank(x);
    if (op == "Transpose") {
      std::vector<int64_t> perm = n.get_ints("perm");
      if (perm.empty())
        for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
      const auto it = std::find(perm.begin(), perm.end(), a);
      return axis(n, static_cast<int>(it - perm.begin()));
    }
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      const int b = reshaped(x, a, y);
      if (b == kMixed) return mixed(n, "merges the batch axis with another one");
      return axis(n, b);
    }
    if (op == "LayerNormalization") {
      if (a >= norm(n.get_int("axis", -1), r)) return mixed(n, "normalizes over the batch axis");
      return axis(n, a);
    }
    if (op == "Split" || op == "CumSum") {
      int64_t ax = norm(n.get_int("axis", 0), r);
      if (op == "CumSum") {
        const std::vector<int64_t> v = const_ints(n, 1);
        if (v.size() != 1) return mixed(n, "sums along an axis computed at run time");
        ax = norm(v[0], r);
      }
      if (ax == a) return mixed(n, op == "Split" ? "splits the batch axis" : "sums along the batch axis");
      return axis(n, a);
    }
    if (op == "Trilu") {
      if (a >= r - 2) return mixed(n, "masks along the batch axis");
      return axis(n, a);
    }
    if (op == "Expand" || op == "Tile") {
      const std::vector<int64_t> v = const_ints(n, 1);
      const int64_t R = rank(y);
      const int out = static_cast<int>(op == "Tile" ? a : a + (R - r));
      if (op == "Tile" && (static_cast<std::size_t>(a) >= v.size() || v[static_cast<std::size_t>(a)] != 1))
        return mixed(n, "repeats the batch axis");
      if (shape(y).size() <= static_cast<std::size_t>(out) || shape(y)[static_cast<std::size_t>(out)] != shape(x)[static_cast<std::size_t>(a)])
        return mixed(n, "changes the batch axis' length");
      return axis(n, out);
    }
    if (op == "GatherND") {
      const int64_t q = rank(n.input(1)), k = shape(n.input(1)).empty() ? 0 : shape(n.input(1)).back();
      if (n.get_int("batch_dims", 0) != 0 || a < k) return mixed(n, "selects along the batch axis");
      return axis(n, static_cast<int>(q - 1 + a - k));
    }
    if (op.rfind("Reduce", 0) == 0) {
      std::vector<bool> red(static_cast<std::size_t>(r), false);
      for (int64_t v : n.inputs.size() > 1 ? const_ints(n, 1) : n.get_ints("axes")) red[static_cast<std::size_t>(norm(v, r))] = true;
      if (std::none_of(red.begin(), red.end(), [](bool b) { return b; }) && n.get_int("noop_with_empty_axes", 0) == 0)
        red.assign(static_cast<std::size_t>(r), true);
      if (red[static_cast<std::size_t>(a)]) return mixed(n, "reduces over the batch axis");
      if (n.get_int("keepdims", 1) != 0) return axis(n, a);
      return axis(n, static_cast<int>(a - std::count(red.begin(), red.begin() + a, true)));
    }
    if (op == "Softmax" || op == "LogSoftmax" || op == "TopK" || op == "ArgMax" || op == "ArgMin" || op == "ArgMaxCast") {
      const int64_t dflt = (op == "ArgMax" || op == "ArgMin" || op == "ArgMaxCast") ? 0 : -1;
      const int64_t ax = norm(n.get_int("axis", dflt), r);
      if (ax == a) return mixed(n, "works along the batch axis, across samples");
      const bool drops = op == "ArgMaxCast" || ((op == "ArgMax" || op == "ArgMin") && n.get_int("keepdims", 1) == 0);
      return axis(n, drops && ax < a ? a - 1 : a);
    }
    if (op == "Concat") {
      const int64_t ax = norm(n.get_int("axis", 0), r);
      for (const auto& [i, s] : data)
        if (s.axis != a) return mixed(n, "joins tensors whose batch axes do not line up");
      if (ax == a) {
        // Along the batch: only consecutive windows of samples, every input data (sub-batches joined).
        if (data.size() != n.inputs.size()) return mixed(n, "joins other data to the batch axis");
        int64_t next = data.front().second.first;
        for (const auto& [i, s] : data) {
          if (s.first != next) return mixed(n, "joins tensors along the batch axis out of sample order");
          next += shape(n.input(i))[static_cast<std::size_t>(a)];
        }
        return axis_at(n, a, data.front().second.first);
      }
      return axis(n, a);
    }
    if (op == "Gather") {
      const int64_t ax = norm(n.get_int("axis", 0), r);
      if (ax == a) return mixed(n, "selects along the batch axis");
      return axis(n, static_cast<int>(a < ax ? a : a + rank(n.input(1)) - 1));
    }
    if (op == "Slice") {
      // A window of the batch (step 1) is a sub-batch: its rows hold the samples from first + start.
      const std::vector<int64_t> starts = const_ints(n, 1), axes = const_ints(n, 3), steps = const_ints(n, 4);
      int64_t shift = 0;
      bool on_batch = false;
      for (std::size_t k = 0; k < starts.size(); ++k) {
        const int64_t ax = axes.empty() ? static_cast<int64_t>(k) : norm(axes[k], r);
        const int64_t step = k < steps.size() ? steps[k] : 1;
        if (ax != a) continue;
        if (step != 1) return mixed(n, "reorders the batch axis");
        const int64_t len = shape(x)[static_cast<std::size_t>(a)];
        shift = std::min(std::max<int64_t>(starts[k] < 0 ? starts[k] + len : starts[k], 0), len);
        on_batch = true;
      }
      if (shape(y).size() != static_cast<std::size_t>(r)) return mixed(n, "changes the rank around the batch axis");
      if (!on_batch && shape(y)[static_cast<std::size_t>(a)] != shape(x)[static_cast<std::size_t>(a)])
        return mixed(n, "changes the batch axis' length");
      return axis_at(n, a, first_ + shift);
    }
    if (op == "Pad" || op == "Resize") {
      // Position-preserving along the batch only if it keeps every row where it was.
      if (shape(y).size() != static_cast<std::size_t>(r) || shape(y)[static_cast<std::size_t>(a)] != shape(x)[static_cast<std::size_t>(a)])
        return mixed(n, "changes the batch axis' length");
      if (op == "Pad") {
        const std::vector<int64_t> pads = const_ints(n, 1), axes = const_ints(n, 3);
        const std::size_t k = axes.empty() ? static_cast<std::size_t>(r) : axes.size();
        for (std::size_t i = 0; i < k && i < pads.size(); ++i)
          if ((axes.empty() ? static_cast<int64_t>(i) : norm(axes[i], r)) == a && pads[i] != 0)
            return mixed(n, "shifts the batch axis");
      }
      return axis(n, a);
    }
    if (op == "Gemm") {
      const bool ta = n.get_int("transA", 0) != 0;
      if (a != (ta ? 1 : 0)) return mixed(n, "multiplies across the batch axis");
      return axis(n, 0);
    }
    if (op == "Shape") return set_all(n, State{});
    return mixed(n, "is an op whose effect on the batch axis is not known");
  }

  static bool op_is(const Node& n, const char* op) { return n.op == op; }

  const Graph& g_;
  std::unordered_map<std::string, State> state_;
  int64_t first_ = 0;  // the node being visited: the samples its first data input starts at
};

}  // namespace

void check_batch_axis(const Graph& g, int64_t batch) {
  Tracker t(g);
  t.run();
  for (const ValueInfo& o : g.outputs) {
    const ValueInfo* v = g.value(o.name);
    const Shape& s = v ? v->shape : o.shape;
    const State st = t.of(o.name);
    const std::string what = str(g.source, ": the model's output '", o.name, "' ", shape_str(s));
    const std::string need = "; Sluice stores one row per sample, so every output must keep the batch on axis 0 "
                             "with each row depending on its own sample only";
    const std::string hint = "export the model so that each output row comes from its own sample (no reduction, "
                             "softmax or reshape across axis 0; keep such steps for after the run)";
    if (st.axis == kMixed) throw InputError(str(what, " does not keep the batch apart: ", st.why, need), hint);
    if (st.axis > 0)
      throw InputError(str(what, " holds the batch on axis ", st.axis, ", not axis 0", need,
                           " (end the model with a Transpose that moves it back)"), hint);
    if (st.axis == kSingle && st.first == 0 && !s.empty() && s[0] == batch && batch == 1) continue;
    if (st.axis == kSingle)
      throw InputError(str(what, " holds one sample where the batch of ", batch, " should be", need), hint);
    if (st.axis == 0 && st.first != 0)
      throw InputError(str(what, " starts at sample ", st.first, ", not at the batch's first sample", need), hint);
    if (s.empty() || s[0] != batch)
      throw InputError(str(what, " does not start with the batch size ", batch, need), hint);
  }
}

}  // namespace sluice
