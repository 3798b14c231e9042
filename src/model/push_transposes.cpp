// push_transposes: a Transpose that leaves the last axis in place commutes with every op that works
// on the rows (last-axis vectors) of a tensor one by one, the same way for every row:
//   MatMul by a constant [K, F] matrix, an element-wise op whose other operands are constants that
//   broadcast along the last axis only (a bias, a scale), a unary element-wise op, LayerNormalization
//   and Softmax over the last axis.
// So  x -> Transpose p -> row ops -> z  computes  x -> row ops -> Transpose p -> z,  and the
// Transpose can be moved to the other end of such a chain.  A Reshape [rows..., K] -> [M, K] that
// feeds a 2-D Gemm (constant B, no transA) whose output a Reshape [M, F] -> [rows..., F] takes back
// to the row axes is row-wise as well: the Gemm's M rows may come in any order.
//
// A moved Transpose is worth it where it meets what makes it free:
//   - its inverse on the other side of the chain: both go;
//   - sunk down: a tensor read only through view ops (Reshape, Transpose, Squeeze, Unsqueeze,
//     Split, Slice, Gather) as sluice.Attention's q, k or v;
//   - hoisted up: a tensor that view ops (Transpose, Reshape) make of sluice.Attention's output.
// attention_layout (model/attention_layout.cpp), which runs next, then reads the views strided from
// the tensor behind them.  This is what torchvision's sequence-first nn.MultiheadAttention needs:
//   x [N, S, E] -> LayerNorm -> Transpose (1, 0, 2) -> MatMul + bias -> qkv [S, N, 3E] -> views -> Attention
//   Attention -> y [N, H, S, D] -> Transpose (2, 0, 1, 3) -> Reshape [S N, E] -> Gemm -> Reshape [S, N, E]
//     -> Transpose (1, 0, 2) -> residual Add
// The first Transpose sinks below the in-projection (qkv [N, S, 3E] carries the batch on axis 0, so
// q, k and v become strided views of it); the last one rises above the out-projection's Gemm and
// joins the views of y, which attention_layout then writes as [N, S, E] directly.  Nothing else is
// moved: a Transpose moved onto a larger tensor (the in-projection's 3E columns) that stayed a copy
// would cost more than before.  SLUICE_PUSH_TRANSPOSES=0 turns the pass off.
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/log.h"
#include "model/graph_util.h"
#include "model/op_classes.h"
#include "model/passes.h"

namespace sluice {

namespace {

using Perm = std::vector<int64_t>;

// Name suffixes of the Transposes this pass moved; a moved one is not moved back.
const char* const kSunk = "/sunk";
const char* const kHoisted = "/hoisted";

bool single_use(const Graph& g, const std::string& name) { return g.consumers(name) == 1 && !is_graph_output(g, name); }

Node* producer_of(Graph& g, const std::string& name) {
  const int p = g.producer(name);
  return p < 0 ? nullptr : &g.nodes[static_cast<std::size_t>(p)];
}

std::vector<Node*> readers_of(Graph& g, const std::string& name) {
  std::vector<Node*> r;
  for (Node& n : g.nodes)
    for (const auto& in : n.inputs)
      if (in == name) {
        r.push_back(&n);
        break;
      }
  return r;
}

std::size_t index_of(const Graph& g, const Node* n) { return static_cast<std::size_t>(n - g.nodes.data()); }

bool is_identity(const Perm& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// The axes of a tensor [.., d_i, ..] after Transpose p: out[i] = in[p[i]].
Shape permuted(const Shape& in, const Perm& p) {
  Shape out(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) out[i] = in[static_cast<std::size_t>(p[i])];
  return out;
}

// The shape whose Transpose p is `out`: in[p[i]] = out[i].
Shape unpermuted(const Shape& out, const Perm& p) {
  Shape in(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) in[static_cast<std::size_t>(p[i])] = out[i];
  return in;
}

// A constant that broadcasts against a tensor of rank r along the last axis only (or is a scalar).
bool along_last_axis(const Tensor& c, std::size_t r) {
  if (c.shape.size() > r) return false;
  for (std::size_t i = 0; i + 1 < c.shape.size(); ++i)
    if (c.shape[i] != 1) return false;
  return true;
}

// Whether node n computes each row of its output from the same row of `x` alone, the same way for
// every row: its output has x's rank and leading axes, and the other inputs are constants that do
// not vary along the leading axes.
bool row_wise(const Graph& g, const Node& n, const std::string& x) {
  if (!n.domain.empty() || n.outputs.empty() || n.inputs.empty()) return false;
  for (std::size_t i = 1; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty() && g.consumers(n.outputs[i]) > 0) return false;   // LayerNorm's Mean, InvStdDev
  const Shape* xs = static_shape(g, x);
  const Shape* ys = static_shape(g, n.outputs[0]);
  if (!xs || !ys || xs->size() < 2 || ys->size() != xs->size()) return false;
  const std::size_t r = xs->size();
  for (std::size_t i = 0; i + 1 < r; ++i)
    if ((*xs)[i] != (*ys)[i]) return false;
  auto others_constant = [&](std::size_t from, auto&& ok) {
    for (std::size_t i = from; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty() || n.inputs[i] == x) continue;
      const Tensor* c = g.constant(n.inputs[i]);
      if (!c || !ok(*c)) return false;
    }
    return true;
  };
  const std::string& op = n.op;
  if (op == "MatMul")
    return n.inputs.size() == 2 && n.inputs[0] == x && n.inputs[1] != x && others_constant(1, [](const Tensor& c) {
             return c.shape.size() == 2;
           });
  if (op == "LayerNormalization" || op == "Softmax" || op == "LogSoftmax") {
    const int64_t axis = n.get_int("axis", -1);
    return n.inputs[0] == x && (axis == -1 || axis == static_cast<int64_t>(r) - 1) &&
           others_constant(1, [&](const Tensor& c) { return along_last_axis(c, r); });
  }
  if (is_unary_elementwise(op) && op != "IsNaN" && op != "IsInf" && op != "Not")
    return n.inputs[0] == x && others_constant(1, [](const Tensor& c) { return c.numel() == 1; });
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Min" || op == "Max") {
    bool reads = false;
    for (const auto& in : n.inputs) reads = reads || in == x;
    return reads && others_constant(0, [&](const Tensor& c) { return along_last_axis(c, r); });
  }
  return false;
}

// The input of a row-wise node that is not a constant (the row operand), or "".
std::string row_operand(const Graph& g, const Node& n) {
  for (const auto& in : n.inputs)
    if (!in.empty() && !g.is_constant(in)) return in;
  return "";
}

bool is_view_op(const Node& n) {
  static const std::unordered_set<std::string> views = {"Reshape", "Transpose", "Squeeze", "Unsqueeze",
                                                         "Flatten", "Split",     "Slice",   "Gather"};
  return n.domain.empty() && views.count(n.op) != 0;
}

// A sluice.Attention node of the kind attention_layout rewrites: packed [N, H, S, D] operands.  (The
// [N H, S, D] operands of torch 1.13's sequence-first export are left packed: a Transpose sunk to
// their in-projection would stay a copy, of three times the bytes.)
bool is_attention(const Graph& g, const Node& n) {
  if (n.domain != "sluice" || n.op != "Attention" || n.inputs.size() < 3 || n.outputs.empty()) return false;
  const std::string layout = n.get_string("layout", "bhsd");
  if (layout != "bhsd" && layout != "bhds") return false;
  for (const std::string& t : {n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0]}) {
    const Shape* s = static_shape(g, t);
    if (!s || s->size() != 4) return false;
  }
  return true;
}

// Whether every read of `name` goes through view ops to sluice.Attention's q, k or v, at most 10
// of them on each path (attention_layout follows 12 from an operand back, the moved Transpose one).
bool read_as_attention_operands(Graph& g, const std::string& name, int depth = 0) {
  if (depth > 10 || is_graph_output(g, name)) return false;
  const std::vector<Node*> readers = readers_of(g, name);
  if (readers.empty()) return false;
  for (Node* r : readers) {
    if (is_attention(g, *r)) {
      for (std::size_t i = 3; i < r->inputs.size(); ++i)
        if (r->inputs[i] == name) return false;   // a bias is no view
      continue;
    }
    if (!is_view_op(*r) || r->inputs[0] != name) return false;
    for (std::size_t i = 1; i < r->inputs.size(); ++i)
      if (!r->inputs[i].empty() && (r->inputs[i] == name || !g.is_constant(r->inputs[i]))) return false;
    for (const auto& o : r->outputs)
      if (!o.empty() && !read_as_attention_operands(g, o, depth + 1)) return false;
  }
  return true;
}

// Whether `name` is sluice.Attention's output seen through at most two Transpose and Reshape nodes
// that only this path reads (attention_layout absorbs four after the output: those, and the hoisted
// Transpose with its Reshape).
bool made_of_attention_output(Graph& g, const std::string& name) {
  std::string cur = name;
  for (int guard = 0; guard < 3; ++guard) {
    const Node* p = producer_of(g, cur);
    if (!p) return false;
    if (is_attention(g, *p)) return p->outputs[0] == cur && single_use(g, cur);
    if (!p->domain.empty() || (p->op != "Transpose" && p->op != "Reshape") || !single_use(g, p->inputs[0]) ||
        (p->op == "Reshape" && !g.is_constant(p->input(1))))
      return false;
    cur = p->inputs[0];
  }
  return false;
}

// The row-wise chain read by Transpose t: the nodes (in order) from t's sole reader on, each the
// sole reader of the one before.
std::vector<Node*> chain_below(Graph& g, const std::string& t) {
  std::vector<Node*> c;
  std::string cur = t;
  while (single_use(g, cur) && c.size() < 32) {
    const std::vector<Node*> r = readers_of(g, cur);
    if (r.size() != 1 || !row_wise(g, *r[0], cur) || r[0]->outputs.size() < 1) break;
    c.push_back(r[0]);
    cur = r[0]->outputs[0];
  }
  return c;
}

void set_shape(Graph& g, const std::string& name, const Shape& s, DType t) { g.values[name] = ValueInfo{name, t, s}; }

DType type_of(const Graph& g, const std::string& name) {
  const ValueInfo* v = g.value(name);
  return v ? v->dtype : DType::Undefined;
}

Node transpose_node(Graph& g, const std::string& base, const std::string& in, const std::string& out, const Perm& p) {
  Node n;
  n.op = "Transpose";
  n.name = unique_tensor_name(g, base);
  n.inputs = {in};
  n.outputs = {out};
  n.attrs["perm"] = Attribute::of_ints(p);
  return n;
}

// Sinks Transpose node `index` below its row-wise readers; false when that would not free it.
bool sink_at(Graph& g, std::size_t index) {
  const Node t = g.nodes[index];
  if (t.op != "Transpose" || !t.domain.empty() || t.inputs.size() != 1 || t.outputs.size() != 1) return false;
  if (t.name.find(kHoisted) != std::string::npos) return false;   // moved up once: not back down
  const Shape* xs = static_shape(g, t.inputs[0]);
  if (!xs || xs->size() < 3) return false;
  const Perm p = transpose_permutation(t, xs->size());
  if (p.empty() || is_identity(p) || p.back() != static_cast<int64_t>(xs->size()) - 1) return false;
  const std::vector<Node*> chain = chain_below(g, t.outputs[0]);
  if (chain.empty()) return false;
  const std::string z = chain.back()->outputs[0];
  // Where it ends: its inverse (both go), or attention operands' views (attention_layout reads them).
  Node* inverse = nullptr;
  if (single_use(g, z)) {
    const std::vector<Node*> r = readers_of(g, z);
    if (r.size() == 1 && r[0]->op == "Transpose" && r[0]->domain.empty() && r[0]->outputs.size() == 1) {
      const Perm q = transpose_permutation(*r[0], xs->size());
      if (!q.empty() && is_identity(permuted(p, q))) inverse = r[0];
    }
  }
  if (!inverse && !read_as_attention_operands(g, z)) return false;

  // The chain reads x; each of its tensors holds the rows in x's order.
  const std::string x = t.inputs[0];
  for (Node* n : chain) {
    for (auto& in : n->inputs)
      if (in == t.outputs[0]) in = x;
    const std::string& o = n->outputs[0];
    set_shape(g, o, unpermuted(g.value(o)->shape, p), type_of(g, o));
  }
  Node* last = chain.back();
  std::size_t at = index_of(g, last) + 1;
  if (inverse) {
    // The chain's last tensor becomes the inverse Transpose's output.
    const std::string y = inverse->outputs[0];
    const std::size_t inv = index_of(g, inverse);
    g.values.erase(z);
    const ValueInfo yv = *g.value(y);
    g.nodes.erase(g.nodes.begin() + static_cast<long>(inv));
    for (auto& n : g.nodes)
      for (auto& o : n.outputs)
        if (o == z) o = y;
    g.values[y] = yv;
  } else {
    const std::string rows = unique_tensor_name(g, z + "_rows");
    const ValueInfo zv = *g.value(z);
    last->outputs[0] = rows;
    set_shape(g, rows, zv.shape, zv.dtype);
    set_shape(g, z, permuted(zv.shape, p), zv.dtype);
    g.nodes.insert(g.nodes.begin() + static_cast<long>(at), transpose_node(g, t.name + kSunk, rows, z, p));
  }
  g.values.erase(t.outputs[0]);
  g.nodes.erase(g.nodes.begin() + static_cast<long>(index));
  return true;
}

// The 2-D Gemm between a Reshape to [M, K] and a Reshape back to row axes [d..., F]:
// r2's input is the Gemm's output, the Gemm's A is r1's output.
struct Sandwich {
  Node* r1 = nullptr;
  Node* gemm = nullptr;
  Node* r2 = nullptr;
};

bool gemm_sandwich(Graph& g, Node* r2, std::size_t rank, Sandwich& s) {
  if (!r2 || r2->op != "Reshape" || !r2->domain.empty() || !single_use(g, r2->inputs[0])) return false;
  Node* gemm = producer_of(g, r2->inputs[0]);
  if (!gemm || gemm->op != "Gemm" || !gemm->domain.empty() || gemm->inputs.size() < 2 || gemm->outputs.size() != 1)
    return false;
  if (gemm->get_int("transA", 0) != 0 || !g.is_constant(gemm->inputs[1]) || !single_use(g, gemm->inputs[0])) return false;
  if (!gemm->input(2).empty()) {
    const Tensor* c = g.constant(gemm->input(2));
    if (!c || !along_last_axis(*c, 2)) return false;
  }
  Node* r1 = producer_of(g, gemm->inputs[0]);
  if (!r1 || r1->op != "Reshape" || !r1->domain.empty()) return false;
  const Shape* ms = static_shape(g, gemm->inputs[0]);
  const Shape* fs = static_shape(g, gemm->outputs[0]);
  const Shape* ys = static_shape(g, r2->outputs[0]);
  const Shape* ws = static_shape(g, r1->inputs[0]);
  if (!ms || !fs || !ys || !ws || ms->size() != 2 || fs->size() != 2 || ys->size() != rank || ys->back() != (*fs)[1])
    return false;
  int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < rank; ++i) rows *= (*ys)[i];
  if (rows != (*ms)[0] || rows != (*fs)[0]) return false;
  s = {r1, gemm, r2};
  return true;
}

// Hoists Transpose node `index` above the row-wise producers of its input; false when that would
// not free it.
bool hoist_at(Graph& g, std::size_t index) {
  const Node t = g.nodes[index];
  if (t.op != "Transpose" || !t.domain.empty() || t.inputs.size() != 1 || t.outputs.size() != 1) return false;
  if (t.name.find(kSunk) != std::string::npos) return false;   // moved down once: not back up
  const std::string u = t.inputs[0];
  const Shape* us = static_shape(g, u);
  if (!us || us->size() < 3 || !single_use(g, u)) return false;
  const std::size_t r = us->size();
  const Perm p = transpose_permutation(t, r);
  if (p.empty() || is_identity(p) || p.back() != static_cast<int64_t>(r) - 1) return false;
  // Up through the row-wise producers (nearest first), each output read only by the next.
  std::vector<Node*> chain;
  std::string w = u;
  for (int guard = 0; guard < 32; ++guard) {
    Node* n = producer_of(g, w);
    if (!n || n->outputs.empty() || n->outputs[0] != w) break;
    const std::string x = row_operand(g, *n);
    if (x.empty() || !row_wise(g, *n, x) || !single_use(g, x)) break;
    chain.push_back(n);
    w = x;
  }
  Sandwich s;
  const bool sandwich = gemm_sandwich(g, producer_of(g, w), r, s);
  if (sandwich) {
    if (!single_use(g, s.r1->inputs[0])) return false;
    w = s.r1->inputs[0];
  }
  if (chain.empty() && !sandwich) return false;
  // Where it ends: its inverse (both go), or the views of an attention output.
  Node* inverse = nullptr;
  if (Node* q = producer_of(g, w); q && q->op == "Transpose" && q->domain.empty() && single_use(g, w) && !sandwich) {
    const Perm qp = transpose_permutation(*q, r);
    if (!qp.empty() && is_identity(permuted(qp, p))) inverse = q;
  }
  if (!inverse && (!single_use(g, w) || !made_of_attention_output(g, w))) return false;

  const Shape ys = *static_shape(g, sandwich ? s.r2->outputs[0] : w);   // rows in the old order
  // Every tensor of the chain (and the sandwich's) holds its rows in t's order from here on.
  std::vector<Node> before;   // new nodes to insert before the first node that reads the new rows
  std::string rows;           // the rows in t's order: what the first row-wise node reads
  if (inverse) {
    rows = inverse->inputs[0];
  } else if (sandwich) {
    const std::string base = s.r1->name.empty() ? std::string("rows") : s.r1->name;
    Shape split = ys;
    split.back() = (*static_shape(g, s.gemm->inputs[0]))[1];
    const std::string grid = unique_tensor_name(g, base + "_grid");
    Node rs;
    rs.op = "Reshape";
    rs.name = unique_tensor_name(g, base + "/rows");
    rs.inputs = {w, add_int64_constant(g, base + "_rows_shape", std::vector<int64_t>(split.begin(), split.end()))};
    rs.outputs = {grid};
    set_shape(g, grid, split, type_of(g, w));
    before.push_back(std::move(rs));
    rows = unique_tensor_name(g, base + "_rows");
    set_shape(g, rows, permuted(split, p), type_of(g, w));
    before.push_back(transpose_node(g, t.name + kHoisted, grid, rows, p));
  } else {
    rows = unique_tensor_name(g, w + "_rows");
    set_shape(g, rows, permuted(*static_shape(g, w), p), type_of(g, w));
    before.push_back(transpose_node(g, t.name + kHoisted, w, rows, p));
  }
  // The first node reading the new rows: the sandwich's first Reshape or the chain's top node.
  Node* first = sandwich ? s.r1 : chain.back();
  for (auto& in : first->inputs)
    if (in == w) in = rows;
  if (sandwich) {
    // The Gemm's rows come in t's order: the way back to the row axes permuted.
    const Shape back = permuted(ys, p);
    const std::string base = s.r2->name.empty() ? std::string("rows") : s.r2->name;
    s.r2->inputs[1] = add_int64_constant(g, base + "_rows_shape", std::vector<int64_t>(back.begin(), back.end()));
    set_shape(g, s.r2->outputs[0], back, type_of(g, s.r2->outputs[0]));
  }
  for (Node* n : chain) set_shape(g, n->outputs[0], permuted(*static_shape(g, n->outputs[0]), p), type_of(g, n->outputs[0]));
  // The last tensor (u, or the sandwich's output when the chain is empty) is t's output now.
  const std::string last = chain.empty() ? s.r2->outputs[0] : chain.front()->outputs[0];
  const ValueInfo tv = *g.value(t.outputs[0]);
  for (auto& n : g.nodes)
    for (auto& o : n.outputs)
      if (o == last) o = t.outputs[0];
  g.values.erase(last);
  g.values[t.outputs[0]] = tv;
  const std::size_t first_at = index_of(g, first);
  std::size_t drop = index;
  if (inverse) {
    const std::size_t inv = index_of(g, inverse);
    g.values.erase(inverse->outputs[0]);
    replace_uses(g, inverse->outputs[0], inverse->inputs[0]);
    g.nodes.erase(g.nodes.begin() + static_cast<long>(std::max(inv, drop)));
    g.nodes.erase(g.nodes.begin() + static_cast<long>(std::min(inv, drop)));
    return true;
  }
  g.nodes.erase(g.nodes.begin() + static_cast<long>(drop));   // after every node above it
  g.nodes.insert(g.nodes.begin() + static_cast<long>(first_at), before.begin(), before.end());
  return true;
}

}  // namespace

int push_transposes(Graph& g) {
  if (switched_off("SLUICE_PUSH_TRANSPOSES")) return 0;
  bool any = false;
  for (const Node& n : g.nodes) any = any || (n.op == "Transpose" && n.domain.empty());
  if (!any) return 0;
  eliminate_dead_nodes(g);   // the chains fuse_attention replaced
  infer_known_shapes(g);
  int sunk = 0, hoisted = 0;
  for (std::size_t i = 0; i < g.nodes.size();) {
    if (sink_at(g, i)) ++sunk;
    else if (hoist_at(g, i)) ++hoisted;
    else ++i;
  }
  if (sunk + hoisted == 0) return 0;
  g.topo_sort();
  infer_known_shapes(g);
  log_debug(g.source, ": ", sunk, " transpose(s) sunk and ", hoisted, " hoisted through row-wise ops");
  return sunk + hoisted;
}

}  // namespace sluice
