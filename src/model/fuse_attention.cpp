// Fusion of scaled dot-product attention into one sluice.Attention node.  The exporters write it
// as a chain around a Softmax over the last axis:
//   scores = MatMul(q', k')          q' = q | q * c | q / c,  k' = kT | kT * c   (torch's SDPA
//                                    decomposition scales q and k by sqrt(scale) each)
//            [* c | / c]             scale after the product (HF eager, timm before SDPA)
//            [+ bias ...]            relative position bias (Swin, BEiT), masks, the shift mask of
//                                    shifted windows (added in a [B, nW, H, N, N] view: Reshape,
//                                    Add, Reshape)
//   p      = Softmax(scores, -1)     [Where(IsNaN(p), 0, p): SDPA's fully masked rows]
//   y      = MatMul(p, v)
// kT is k with its last two axes swapped; the node takes k itself where the graph spells the swap
// as a Transpose (re-permuted to give k), or as Reshape(Transpose(...)) (the Reshape rewired).
// Constant bias terms are summed on the host into one bias whose leading axis repeats along the
// scores' leading axes (flattened): [P, S, S_kv] with P dividing them (graph.h).  The nodes left
// without readers go in eliminate_dead_nodes.  SLUICE_FUSE_ATTENTION=0 turns the pass off (for
// measurements against the unfused graph).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <unordered_set>

#include "core/log.h"
#include "model/graph_util.h"
#include "model/passes.h"

namespace sluice {

namespace {

// A bias term met on the way from the softmax back to the scores product.
struct BiasTerm {
  std::string name;
  Shape view;        // the scores' shape where it is added
  double coeff = 1;  // the scale factors between it and the softmax
};

class AttentionMatcher {
 public:
  explicit AttentionMatcher(Graph& g) : g_(g) {
    for (const auto& o : g.outputs) outputs_.insert(o.name);
  }

  bool fuse_at(std::size_t index);

 private:
  Node* producer(const std::string& name) {
    const int i = g_.producer(name);
    return i < 0 ? nullptr : &g_.nodes[static_cast<std::size_t>(i)];
  }
  bool internal(const std::string& name, int k = 1) const { return !outputs_.count(name) && g_.consumers(name) == k; }
  Node* sole_reader(const std::string& name) {
    if (!internal(name)) return nullptr;
    for (Node& n : g_.nodes)
      for (const auto& in : n.inputs)
        if (in == name) return &n;
    return nullptr;
  }
  const Shape* shape(const std::string& name) const {
    const ValueInfo* v = g_.value(name);
    if (!v || v->dtype != DType::F32) return nullptr;
    for (int64_t d : v->shape)
      if (d < 0) return nullptr;
    return &v->shape;
  }
  // The value of a scalar float constant, or NaN.
  double scalar(const std::string& name) const {
    const Tensor* t = g_.constant(name);
    if (!t || t->numel() != 1 || (t->dtype != DType::F32 && t->dtype != DType::F64)) return NAN;
    return t->as_float()[0];
  }
  // A Mul or Div of `name` by a scalar constant: the factor (1/c for Div) and the other operand.
  bool scaled(const Node* n, double& factor, std::string& x) const {
    if (!n || !n->domain.empty() || n->inputs.size() != 2) return false;
    if (n->op == "Mul") {
      for (int k = 0; k < 2; ++k) {
        const double c = scalar(n->inputs[static_cast<std::size_t>(1 - k)]);
        if (std::isfinite(c) && !g_.is_constant(n->inputs[static_cast<std::size_t>(k)])) {
          factor = c;
          x = n->inputs[static_cast<std::size_t>(k)];
          return true;
        }
      }
    } else if (n->op == "Div") {
      const double c = scalar(n->inputs[1]);
      if (std::isfinite(c) && c != 0) {
        factor = 1.0 / c;
        x = n->inputs[0];
        return true;
      }
    }
    return false;
  }
  std::string combine_bias(const std::vector<BiasTerm>& terms, int64_t bh, int64_t s, int64_t skv, const std::string& base);

  Graph& g_;
  std::unordered_set<std::string> outputs_;
};

// Whether a bias of shape `t` broadcast over `view` repeats along the flat index with a period
// that is a suffix product of `view`: leading axes of size 1, then exactly the view's.  The period.
int64_t flat_period(const Shape& t, const Shape& view) {
  if (t.size() > view.size()) return -1;
  const std::size_t lead = view.size() - t.size();
  std::size_t first = view.size();
  for (std::size_t i = 0; i < t.size(); ++i)
    if (t[i] != 1) {
      first = lead + i;
      break;
    }
  int64_t p = 1;
  for (std::size_t i = first; i < view.size(); ++i) {
    const int64_t ti = t[i - lead];
    if (ti != view[i] && ti != 1) return -1;
    p *= view[i];
  }
  return p;
}

// For a data-dependent bias of shape `t` added to scores of shape `view` ([L..., S, S_kv]) that holds
// its last axis whole, its second last whole or of size 1 (*rows: S or 1), and, on the leading axes, one run of the scores' axes followed by
// broadcast ones (leading axes of size 1 anywhere): the product of the broadcast axes after the run,
// G, so that score matrix m (L flattened) adds bias matrix (m / G) mod P, P the run's product.  A
// padding mask [B, 1, S, S_kv] or [B, 1, 1, S_kv] over [B, H, S, S_kv] gives H.  0 when the bias is
// not of that form.
int64_t bias_group(const Shape& t, const Shape& view, int64_t* rows) {
  const std::size_t r = view.size();
  if (r < 3 || t.size() > r || t.size() < 2) return 0;
  Shape b(r - t.size(), 1);
  b.insert(b.end(), t.begin(), t.end());
  if ((b[r - 2] != view[r - 2] && b[r - 2] != 1) || b[r - 1] != view[r - 1]) return 0;
  *rows = b[r - 2];   // 1: one row of keys' bias for every query ([B, 1, 1, S_kv])
  int phase = 0;   // 0: before the run, 1: in it, 2: after it
  int64_t group = 1;
  for (std::size_t i = 0; i + 2 < r; ++i) {
    if (view[i] == 1) continue;
    const bool full = b[i] == view[i];
    if (!full && b[i] != 1) return 0;
    if (full) {
      if (phase == 2) return 0;
      phase = 1;
    } else if (phase == 1) {
      phase = 2;
    }
    if (phase == 2) group *= view[i];
  }
  return group;
}

// What combine_bias returns for terms that sum to zeros everywhere.
const char* const kNoBias = "\n(no bias)";

// Sums the constant terms into one [P, S, S_kv] constant, P * S * S_kv their common period along
// the flat scores index; "" when a term is not constant or the period is too large to keep,
// kNoBias when the sum is zero everywhere.
std::string AttentionMatcher::combine_bias(const std::vector<BiasTerm>& terms, int64_t bh, int64_t s, int64_t skv,
                                           const std::string& base) {
  int64_t period = s * skv;
  for (const auto& t : terms) {
    const Tensor* c = g_.constant(t.name);
    if (!c || (c->dtype != DType::F32 && c->dtype != DType::F64)) return "";
    // The period of a term: the product of the view's axes from its first non-1 one on.
    const std::size_t lead = t.view.size() - c->shape.size();
    int64_t p = 1;
    bool seen = false;
    for (std::size_t i = 0; i < t.view.size(); ++i) {
      const int64_t ci = i < lead ? 1 : c->shape[i - lead];
      seen = seen || ci != 1;
      if (seen) p *= t.view[i];
    }
    period = std::lcm(period, p);
  }
  if (period % (s * skv) != 0 || (bh * s * skv) % period != 0 || period > (int64_t{1} << 26)) return "";
  std::vector<float> sum(static_cast<std::size_t>(period), 0.f);
  for (const auto& t : terms) {
    const Tensor* c = g_.constant(t.name);
    const std::vector<float> vals = c->as_float();
    const std::size_t r = t.view.size(), lead = r - c->shape.size();
    // Strides of the term over the view (0 on broadcast axes).
    std::vector<int64_t> stride(r, 0);
    int64_t acc = 1;
    for (std::size_t i = r; i-- > lead;) {
      const int64_t ci = c->shape[i - lead];
      stride[i] = ci == 1 ? 0 : acc;
      acc *= ci;
    }
    for (int64_t f = 0; f < period; ++f) {
      int64_t rem = f, off = 0;
      for (std::size_t i = r; i-- > 0;) {
        off += (rem % t.view[i]) * stride[i];
        rem /= t.view[i];
      }
      sum[static_cast<std::size_t>(f)] += static_cast<float>(t.coeff * vals[static_cast<std::size_t>(off)]);
    }
  }
  // A bias of zeros (an export's mask that masks nothing) is no bias at all.
  if (std::all_of(sum.begin(), sum.end(), [](float v) { return v == 0.f; })) return kNoBias;
  const std::string name = add_float_constant(g_, base + "_attention_bias", sum);
  g_.constants.at(name).shape = {period / (s * skv), s, skv};
  return name;
}

bool AttentionMatcher::fuse_at(std::size_t index) {
  const Node& sm = g_.nodes[index];
  if (sm.op != "Softmax" || !sm.domain.empty() || sm.inputs.size() != 1) return false;
  const Shape* xs = shape(sm.inputs[0]);
  if (!xs || xs->size() < 3) return false;
  const int64_t rank = static_cast<int64_t>(xs->size());
  int64_t axis = sm.get_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return false;

  // Behind the softmax: [Where(IsNaN(p), 0, p)] then MatMul(p, v).
  std::string p = sm.outputs[0];
  bool zero_rows = false;
  if (internal(p, 2)) {
    Node *isnan = nullptr, *where = nullptr;
    for (Node& n : g_.nodes)
      for (const auto& in : n.inputs)
        if (in == p) {
          if (n.op == "IsNaN" && n.domain.empty()) isnan = &n;
          else if (n.op == "Where" && n.domain.empty()) where = &n;
        }
    if (!isnan || !where || !internal(isnan->outputs[0]) || where->inputs.size() != 3 || where->inputs[0] != isnan->outputs[0] ||
        scalar(where->inputs[1]) != 0.0 || where->inputs[2] != p)
      return false;
    p = where->outputs[0];
    zero_rows = true;
  }
  Node* mm2 = sole_reader(p);
  if (!mm2 || mm2->op != "MatMul" || !mm2->domain.empty() || mm2->inputs.size() != 2 || mm2->inputs[0] != p) return false;
  const std::string v = mm2->inputs[1];
  const Shape* vs = shape(v);
  const Shape* ys = shape(mm2->outputs[0]);
  if (!vs || !ys || *ys == Shape{} || vs->size() != xs->size()) return false;
  const Shape lead(xs->begin(), xs->end() - 2);
  if (!std::equal(lead.begin(), lead.end(), vs->begin())) return false;
  const int64_t s = (*xs)[static_cast<std::size_t>(rank - 2)], skv = xs->back();
  if ((*vs)[static_cast<std::size_t>(rank - 2)] != skv) return false;

  // In front of it: scale factors and bias terms, back to MatMul(q', k').
  std::string cur = sm.inputs[0];
  double coeff = 1;
  std::vector<BiasTerm> terms;
  bool reshaped = false;
  Node* mm1 = nullptr;
  for (int guard = 0; guard < 16 && !mm1; ++guard) {
    if (!internal(cur)) return false;
    Node* n = producer(cur);
    if (!n || !n->domain.empty()) return false;
    const Shape* cs = shape(cur);
    if (!cs) return false;
    double f = 1;
    std::string x;
    if (n->op == "MatMul" && n->inputs.size() == 2) {
      mm1 = n;
    } else if (scaled(n, f, x)) {
      coeff *= f;
      cur = x;
    } else if (n->op == "Add" && n->inputs.size() == 2) {
      // The bias is the constant operand, or the one that does not lead to the product.
      int b = g_.is_constant(n->inputs[1]) ? 1 : g_.is_constant(n->inputs[0]) ? 0 : -1;
      if (b < 0) {
        for (int k = 0; k < 2 && b < 0; ++k) {
          const Node* pk = producer(n->inputs[static_cast<std::size_t>(k)]);
          double f2;
          std::string x2;
          if (pk && (pk->op == "MatMul" || scaled(pk, f2, x2))) b = 1 - k;
        }
      }
      if (b < 0) return false;
      const std::string& other = n->inputs[static_cast<std::size_t>(1 - b)];
      const Shape* os = shape(other);
      if (!os || *os != *cs) return false;   // the bias must not widen the scores
      terms.push_back({n->inputs[static_cast<std::size_t>(b)], *cs, coeff});
      cur = other;
    } else if (n->op == "Reshape") {
      const Shape* is = shape(n->inputs[0]);
      if (!is || is->size() < 2 || (*is)[is->size() - 2] * is->back() == 0) return false;
      reshaped = true;
      cur = n->inputs[0];
    } else {
      return false;
    }
  }
  if (!mm1) return false;
  const Shape* ss = shape(mm1->outputs[0]);
  if (!ss || ss->size() != xs->size() || ss->back() != skv || (*ss)[ss->size() - 2] != s ||
      !std::equal(lead.begin(), lead.end(), ss->begin()))
    return false;
  // q' and k' with their scale factors peeled off.
  std::string q = mm1->inputs[0], kt = mm1->inputs[1];
  for (std::string* operand : {&q, &kt}) {
    double f = 1;
    std::string x;
    if (internal(*operand) && scaled(producer(*operand), f, x)) {
      coeff *= f;
      *operand = x;
    }
  }
  const Shape* qs = shape(q);
  const Shape* kts = shape(kt);
  if (!qs || !kts || qs->size() != xs->size() || kts->size() != xs->size() || !std::equal(lead.begin(), lead.end(), qs->begin()) ||
      !std::equal(lead.begin(), lead.end(), kts->begin()) || (*qs)[static_cast<std::size_t>(rank - 2)] != s || kts->back() != skv ||
      (*kts)[static_cast<std::size_t>(rank - 2)] != qs->back())
    return false;
  // k untransposed where the graph lets us (cuDNN's fused attention reads k with its head axis
  // contiguous): kT = Transpose(x, perm) becomes k = Transpose(x, perm with its last two swapped)
  // (a plain swap: x itself), and Reshape(Transpose(Reshape(k0)), swapping the last two axes) is k0
  // (regrouping leading axes commutes with the swap).
  std::string k = kt, layout = "bhds";
  Node* retranspose = nullptr;   // changed only once the fusion is certain
  std::vector<int64_t> new_perm;
  Node* rewire = nullptr;
  std::string rewire_from;
  auto swaps_last_two = [](const std::vector<int64_t>& perm) {
    const int64_t r = static_cast<int64_t>(perm.size());
    bool swap = r >= 2;
    for (int64_t i = 0; swap && i < r; ++i)
      swap = perm[static_cast<std::size_t>(i)] == (i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i);
    return swap;
  };
  auto last_two = [&](const std::string& name, int64_t a, int64_t b) {
    const Shape* sh = shape(name);
    return sh && sh->size() >= 2 && (*sh)[sh->size() - 2] == a && sh->back() == b;
  };
  const int64_t dk = qs->back();
  if (Node* t = producer(kt); t && t->op == "Transpose" && t->domain.empty() && internal(kt)) {
    std::vector<int64_t> perm = t->get_ints("perm");
    if (static_cast<int64_t>(perm.size()) == rank && swaps_last_two(perm)) {
      k = t->inputs[0];
      layout = "bhsd";
    } else if (static_cast<int64_t>(perm.size()) == rank) {
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      retranspose = t;
      new_perm = perm;
      layout = "bhsd";
    }
  } else if (Node* r2 = producer(kt); r2 && r2->op == "Reshape" && r2->domain.empty() && internal(kt)) {
    Node* t2 = producer(r2->inputs[0]);
    Node* r1 = t2 && internal(r2->inputs[0]) ? producer(t2->inputs[0]) : nullptr;
    if (t2 && t2->op == "Transpose" && t2->domain.empty() && swaps_last_two(t2->get_ints("perm")) && r1 &&
        r1->op == "Reshape" && r1->domain.empty() && internal(t2->inputs[0]) && last_two(t2->inputs[0], skv, dk) &&
        last_two(r2->inputs[0], dk, skv)) {
      const Shape* k0 = shape(r1->inputs[0]);
      if (k0 && k0->size() == xs->size() && std::equal(lead.begin(), lead.end(), k0->begin()) && last_two(r1->inputs[0], skv, dk)) {
        k = r1->inputs[0];
        layout = "bhsd";
      }
    }
    if (layout == "bhds" && t2 && t2->op == "Transpose" && t2->domain.empty() && internal(r2->inputs[0]) &&
        swaps_last_two(t2->get_ints("perm")) && last_two(t2->inputs[0], skv, dk) && last_two(r2->inputs[0], dk, skv)) {
      // Reshape(Transpose(a)) with a [..., S_kv, D] from anything else (torchvision's two transposes):
      // the Reshape is rewired to give k from a directly.
      rewire = r2;
      rewire_from = t2->inputs[0];
      layout = "bhsd";
    }
  }

  int64_t bh = 1;
  for (int64_t d : lead) bh *= d;
  std::string bias;
  int64_t group = 1, bias_rows = s;
  if (!terms.empty()) {
    bool all_const = true;
    for (const auto& t : terms) all_const = all_const && g_.is_constant(t.name);
    if (all_const) {
      bias = combine_bias(terms, bh, s, skv, sm.name);
      if (bias.empty()) return false;
      if (bias == kNoBias) bias.clear();
    } else {
      // One tensor computed from the data: taken as it is when it repeats along the flat index.
      if (terms.size() != 1 || reshaped || terms[0].coeff != 1.0) return false;
      const Shape* bs = shape(terms[0].name);
      if (!bs) return false;
      const int64_t period = flat_period(*bs, *xs);
      if (period >= s * skv && period % (s * skv) == 0 && shape_numel(*bs) == period) {
        // Read by flat matrix index modulo its own size: it holds every element of its period.
        bias = terms[0].name;
      } else {
        // A bias per sample broadcast over the axes after the batch (a text encoder's padding mask
        // [B, 1, S, S_kv] over the heads, or [B, 1, 1, S_kv] over the queries too): matrix m reads
        // bias matrix (m / group) mod P.
        group = bias_group(*bs, *xs, &bias_rows);
        if (group < 1 || (group == 1 && bias_rows == s)) return false;
        bias = terms[0].name;
      }
    }
  }

  Node a;
  a.op = "Attention";
  a.domain = "sluice";
  a.name = unique_tensor_name(g_, sm.name + "_attention");
  a.inputs = {q, k, v};
  if (!bias.empty()) a.inputs.push_back(bias);
  a.outputs = {mm2->outputs[0]};
  a.attrs["scale"] = Attribute::of_float(static_cast<float>(coeff));
  a.attrs["layout"] = Attribute::of_string(layout);
  if (zero_rows) a.attrs["zero_masked_rows"] = Attribute::of_int(1);
  if (group > 1) a.attrs["bias_group"] = Attribute::of_int(group);
  if (bias_rows == 1 && s != 1) a.attrs["bias_rows"] = Attribute::of_int(1);
  if (rewire) {
    Shape ks = *kts;
    std::swap(ks[ks.size() - 1], ks[ks.size() - 2]);
    rewire->inputs = {rewire_from, add_int64_constant(g_, rewire->name + "_k_shape", ks)};
    g_.values[kt].shape = ks;
  }
  if (retranspose) {
    retranspose->attrs["perm"] = Attribute::of_ints(new_perm);
    Shape ks = *kts;
    std::swap(ks[ks.size() - 1], ks[ks.size() - 2]);
    g_.values[kt].shape = ks;
  }
  *mm2 = std::move(a);
  return true;
}

}  // namespace

int fuse_attention(Graph& g) {
  if (switched_off("SLUICE_FUSE_ATTENTION")) return 0;
  AttentionMatcher m(g);
  int fused = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) fused += m.fuse_at(i) ? 1 : 0;
  if (fused > 0) {
    eliminate_dead_nodes(g);
    log_debug(g.source, ": ", fused, " attention blocks fused");
  }
  return fused;
}

}  // namespace sluice
