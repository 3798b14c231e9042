// The CUDA engine's ops for transformer-era vision models against host references written from the
// ONNX definitions: LayerNormalization, Gelu, GroupNormalization, InstanceNormalization, Softmax on
// any axis, Einsum, batched MatMul of two computed tensors, comparisons, logic, Where, IsNaN/IsInf,
// integer arithmetic, Gather with run-time indices, GatherND, ScatterND, CumSum, Trilu, Range, Sign,
// ReduceL2, ReduceL1, ReduceSumSquare and Col2Im (against the CPU engine); a block of them in a
// captured CUDA graph; the op table.
// The references round the input and the float constants to the compute type the way the engine
// does, so mask and index outputs must match exactly at every precision; float outputs are held to
// the precision's tolerance (gpu_test_util.cpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "gpu_test_util.h"
#include "model/graph_util.h"
#include "model/canonicalize.h"
#include "model/prepare.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class TransformerOps : public ::testing::TestWithParam<Precision> {};

// The input's values as the engine sees them at precision p.
std::vector<float> seen(const Tensor& x, Precision p) {
  std::vector<float> v = x.as_float();
  for (auto& f : v) f = round_to(p, f);
  return v;
}
std::vector<float> seen(const Graph& g, const std::string& constant, Precision p) {
  std::vector<float> v = g.constants.at(constant).as_float();
  for (auto& f : v) f = round_to(p, f);
  return v;
}

Tensor floats(const Shape& s, const std::vector<float>& v) { return Tensor::from(DType::F32, s, v); }
Tensor bools(const Shape& s, const std::vector<bool>& v) {
  Tensor t(DType::Bool, s);
  for (std::size_t i = 0; i < v.size(); ++i) t.bytes[i] = v[i] ? 1 : 0;
  return t;
}

// ---- normalizations --------------------------------------------------------------------------------

// Normalization of `groups` contiguous runs of x (in double), then per-element scale and bias.
std::vector<float> normalized(const std::vector<float>& x, int64_t runs, float eps) {
  std::vector<float> y(x.size());
  const std::size_t len = x.size() / static_cast<std::size_t>(runs);
  for (std::size_t r = 0; r < static_cast<std::size_t>(runs); ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < len; ++j) mean += x[r * len + j];
    mean /= static_cast<double>(len);
    for (std::size_t j = 0; j < len; ++j) var += (x[r * len + j] - mean) * (x[r * len + j] - mean);
    var /= static_cast<double>(len);
    for (std::size_t j = 0; j < len; ++j) y[r * len + j] = static_cast<float>((x[r * len + j] - mean) / std::sqrt(var + eps));
  }
  return y;
}

TEST_P(TransformerOps, LayerNormalizationOverTheLastAxisMatchesTheDefinition) {
  const Precision p = GetParam();
  GraphBuilder b({2, 7, 48});
  b.random_f("g", {48}, 11, 0.5f, 1.5f).random_f("bias", {48}, 12);
  Node& n = b.node("LayerNormalization", {"x", "g", "bias"}, {f32("y", {2, 7, 48})});
  set_int(n, "axis", -1);
  set_float(n, "epsilon", 1e-6f);
  b.output("y");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    std::vector<float> y = normalized(seen(x, p), 14, 1e-6f);
    const auto gm = g.constants.at("g").as_float(), bs = g.constants.at("bias").as_float();
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = y[i] * gm[i % 48] + bs[i % 48];
    return std::vector<Tensor>{floats({2, 7, 48}, y)};
  });
}

TEST_P(TransformerOps, GroupNormalizationWithPerChannelAndPerGroupScalesMatchesTheDefinition) {
  const Precision p = GetParam();
  for (const bool per_group : {false, true}) {
    SCOPED_TRACE(per_group ? "scale per group (opset 18)" : "scale per channel (opset 21)");
    const int64_t c = 8, groups = 4, scales = per_group ? groups : c;
    GraphBuilder b({2, c, 5, 6});
    b.random_f("s", {scales}, 13, 0.5f, 1.5f).random_f("bias", {scales}, 14);
    Node& n = b.node("GroupNormalization", {"x", "s", "bias"}, {f32("y", {2, c, 5, 6})});
    set_int(n, "num_groups", groups);
    b.output("y");
    const Graph g = b.g;
    expect_matches_reference(g, p, [&](const Tensor& x) {
      std::vector<float> y = normalized(seen(x, p), 2 * groups, 1e-5f);
      const auto sv = g.constants.at("s").as_float(), bv = g.constants.at("bias").as_float();
      for (std::size_t i = 0; i < y.size(); ++i) {
        const std::size_t ch = (i / 30) % static_cast<std::size_t>(c);
        const std::size_t k = per_group ? ch / static_cast<std::size_t>(c / groups) : ch;
        y[i] = y[i] * sv[k] + bv[k];
      }
      return std::vector<Tensor>{floats({2, c, 5, 6}, y)};
    });
  }
}

TEST_P(TransformerOps, InstanceNormalizationMatchesTheDefinition) {
  const Precision p = GetParam();
  GraphBuilder b({3, 6, 4, 9});
  b.random_f("s", {6}, 15, 0.5f, 1.5f).random_f("bias", {6}, 16);
  Node& n = b.node("InstanceNormalization", {"x", "s", "bias"}, {f32("y", {3, 6, 4, 9})});
  set_float(n, "epsilon", 1e-3f);
  b.output("y");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    std::vector<float> y = normalized(seen(x, p), 18, 1e-3f);
    const auto sv = g.constants.at("s").as_float(), bv = g.constants.at("bias").as_float();
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = y[i] * sv[(i / 36) % 6] + bv[(i / 36) % 6];
    return std::vector<Tensor>{floats({3, 6, 4, 9}, y)};
  });
}

// ---- activations -----------------------------------------------------------------------------------

TEST_P(TransformerOps, GeluSignErfSinCosNegMatchTheDefinitions) {
  const Precision p = GetParam();
  struct U { const char* op; const char* approx; double (*f)(double); };
  const U cases[] = {
      {"Gelu", "none", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"Gelu", "tanh", [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }},
      {"Sign", nullptr, [](double v) { return static_cast<double>((v > 0) - (v < 0)); }},
      {"Erf", nullptr, [](double v) { return std::erf(v); }},
      {"Sin", nullptr, [](double v) { return std::sin(v); }},
      {"Cos", nullptr, [](double v) { return std::cos(v); }},
      {"Neg", nullptr, [](double v) { return -v; }}};
  for (const U& u : cases) {
    SCOPED_TRACE(str(u.op, " ", u.approx ? u.approx : ""));
    GraphBuilder b({3, 50});
    Node& n = b.node(u.op, {"x"}, {f32("y", {3, 50})});
    if (u.approx) set_string(n, "approximate", u.approx);
    b.output("y");
    CompareOptions c;
    c.lo = -4.f;
    c.hi = 4.f;
    expect_matches_reference(b.g, p, [&](const Tensor& x) {
      std::vector<float> y = seen(x, p);
      for (auto& v : y) v = static_cast<float>(u.f(v));
      return std::vector<Tensor>{floats({3, 50}, y)};
    }, c);
  }
}

// ---- softmax and reductions --------------------------------------------------------------------------

TEST_P(TransformerOps, SoftmaxOnEveryAxisMatchesTheDefinition) {
  const Precision p = GetParam();
  const Shape s = {2, 3, 4, 5};
  for (int64_t axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(str("axis ", axis));
    GraphBuilder b(s);
    Node& n = b.node("Softmax", {"x"}, {f32("y", s)});
    set_int(n, "axis", axis);
    b.output("y");
    CompareOptions c;
    c.lo = -3.f;
    c.hi = 3.f;
    expect_matches_reference(b.g, p, [&](const Tensor& x) {
      const std::vector<float> v = seen(x, p);
      const int64_t a = axis < 0 ? axis + 4 : axis;
      int64_t inner = 1;
      for (int64_t d = a + 1; d < 4; ++d) inner *= s[static_cast<std::size_t>(d)];
      const int64_t r = s[static_cast<std::size_t>(a)];
      std::vector<float> y(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        const int64_t base = static_cast<int64_t>(i) - ((static_cast<int64_t>(i) / inner) % r) * inner;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < r; ++j) mx = std::max<double>(mx, v[static_cast<std::size_t>(base + j * inner)]);
        for (int64_t j = 0; j < r; ++j) sum += std::exp(v[static_cast<std::size_t>(base + j * inner)] - mx);
        y[i] = static_cast<float>(std::exp(v[i] - mx) / sum);
      }
      return std::vector<Tensor>{floats(s, y)};
    }, c);
  }
}

TEST_P(TransformerOps, ReduceL2OverTheLastAxisMatchesTheDefinition) {
  const Precision p = GetParam();
  GraphBuilder b({4, 6, 64});
  b.constant_i("axes", {1}, {-1});
  Node& n = b.node("ReduceL2", {"x", "axes"}, {f32("y", {4, 6, 1})});
  set_int(n, "keepdims", 1);
  b.output("y");
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    std::vector<float> y(24);
    for (std::size_t r = 0; r < 24; ++r) {
      double sq = 0;
      for (std::size_t j = 0; j < 64; ++j) sq += static_cast<double>(v[r * 64 + j]) * v[r * 64 + j];
      y[r] = static_cast<float>(std::sqrt(sq));
    }
    return std::vector<Tensor>{floats({4, 6, 1}, y)};
  });
}

// ReduceL1 and ReduceSumSquare: sum |x| and sum x^2, over the last axis and over the first and the
// last (the loader accepts both ops: model/shape_inference.cpp's op table).
TEST_P(TransformerOps, ReduceL1AndReduceSumSquareMatchTheDefinition) {
  const Precision p = GetParam();
  for (const std::string op : {"ReduceL1", "ReduceSumSquare"}) {
    for (const bool both : {false, true}) {
      SCOPED_TRACE(op + (both ? " over axes 0 and 2" : " over the last axis"));
      GraphBuilder b({4, 6, 64});
      if (both) b.constant_i("axes", {2}, {0, -1});
      else b.constant_i("axes", {1}, {-1});
      const Shape ys = both ? Shape{1, 6, 1} : Shape{4, 6, 1};
      Node& n = b.node(op, {"x", "axes"}, {f32("y", ys)});
      set_int(n, "keepdims", 1);
      b.output("y");
      expect_matches_reference(b.g, p, [&](const Tensor& x) {
        const std::vector<float> v = seen(x, p);
        std::vector<double> acc(24, 0.0);
        for (std::size_t r = 0; r < 24; ++r)
          for (std::size_t j = 0; j < 64; ++j) {
            const double e = v[r * 64 + j];
            acc[both ? r % 6 : r] += op == "ReduceL1" ? std::fabs(e) : e * e;
          }
        std::vector<float> y(static_cast<std::size_t>(shape_numel(ys)));
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(acc[i]);
        return std::vector<Tensor>{floats(ys, y)};
      });
    }
  }
}

// ---- Einsum and batched products ---------------------------------------------------------------------

// Einsum by brute force over every letter assignment: operands with their letters, the output's
// letters and the size of every letter.
std::vector<float> host_einsum(const std::vector<std::pair<std::string, std::vector<float>>>& ops, const std::string& out,
                               const std::map<char, int64_t>& dims) {
  std::string letters;
  for (const auto& [c, d] : dims) letters += c;
  auto offset = [&](const std::string& term, const std::map<char, int64_t>& at) {
    int64_t off = 0;
    for (char c : term) off = off * dims.at(c) + at.at(c);
    return off;
  };
  int64_t out_n = 1, all = 1;
  for (char c : out) out_n *= dims.at(c);
  for (const auto& [c, d] : dims) all *= d;
  std::vector<double> acc(static_cast<std::size_t>(out_n), 0.0);
  std::map<char, int64_t> at;
  for (int64_t i = 0; i < all; ++i) {
    int64_t rem = i;
    for (std::size_t k = letters.size(); k-- > 0;) {
      at[letters[k]] = rem % dims.at(letters[k]);
      rem /= dims.at(letters[k]);
    }
    double prod = 1;
    for (const auto& [term, v] : ops) prod *= v[static_cast<std::size_t>(offset(term, at))];
    acc[static_cast<std::size_t>(offset(out, at))] += prod;
  }
  return std::vector<float>(acc.begin(), acc.end());
}

struct EinsumCase {
  std::string equation;    // as the node has it
  std::string a, w, out;   // the letters spelled out for the reference (w empty: one operand)
  std::map<char, int64_t> dims;
};

TEST_P(TransformerOps, EinsumContractionsOfAttentionAndRelativePositionsMatchTheDefinition) {
  const Precision p = GetParam();
  const std::vector<EinsumCase> cases = {
      {"bhqd,bhkd->bhqk", "bhqd", "bhkd", "bhqk", {{'b', 2}, {'h', 3}, {'q', 5}, {'k', 6}, {'d', 16}}},   // q k^T
      {"bhqk,bhkd->bhqd", "bhqk", "bhkd", "bhqd", {{'b', 2}, {'h', 3}, {'q', 5}, {'k', 6}, {'d', 8}}},    // attn v
      {"bhwc,wkc->bhwk", "bhwc", "wkc", "bhwk", {{'b', 2}, {'h', 4}, {'w', 3}, {'c', 8}, {'k', 5}}},      // rel-pos
      {"bnij,jk->bnik", "bnij", "jk", "bnik", {{'b', 2}, {'n', 2}, {'i', 3}, {'j', 7}, {'k', 4}}},
      {"ij,jk", "ij", "jk", "ik", {{'i', 6}, {'j', 9}, {'k', 5}}},                                         // implicit output
      {"...ij,...jk->...ik", "zij", "zjk", "zik", {{'z', 3}, {'i', 4}, {'j', 6}, {'k', 2}}},                // ellipsis
      {"bij,bkj->bik", "bij", "bkj", "bik", {{'b', 1}, {'i', 4}, {'j', 5}, {'k', 3}}},
      {"abc,ca->b", "abc", "ca", "b", {{'a', 3}, {'b', 4}, {'c', 5}}},                                     // contraction over 2 letters
      {"abcd,e->abe", "abcd", "e", "abe", {{'a', 2}, {'b', 3}, {'c', 4}, {'d', 2}, {'e', 3}}},             // sums over c, d first
      {"nchw->nhwc", "nchw", "", "nhwc", {{'n', 2}, {'c', 3}, {'h', 4}, {'w', 5}}},                        // one operand: permute
      {"bij->bj", "bij", "", "bj", {{'b', 3}, {'i', 6}, {'j', 4}}}};                                      // one operand: sum
  for (const EinsumCase& e : cases) {
    SCOPED_TRACE(e.equation);
    auto shape_of = [&](const std::string& t) {
      Shape s;
      for (char c : t) s.push_back(e.dims.at(c));
      return s;
    };
    GraphBuilder b(shape_of(e.a));
    std::vector<std::string> ins = {"x"};
    if (!e.w.empty()) {
      b.random_f("w", shape_of(e.w), 21);
      ins.push_back("w");
    }
    Node& n = b.node("Einsum", ins, {f32("y", shape_of(e.out))});
    set_string(n, "equation", e.equation);
    b.output("y");
    const Graph g = b.g;
    expect_matches_reference(g, p, [&](const Tensor& x) {
      std::vector<std::pair<std::string, std::vector<float>>> ops = {{e.a, seen(x, p)}};
      if (!e.w.empty()) ops.emplace_back(e.w, seen(g, "w", p));
      return std::vector<Tensor>{floats(shape_of(e.out), host_einsum(ops, e.out, e.dims))};
    });
  }
}

TEST_P(TransformerOps, BatchedMatMulOfTwoComputedTensorsMatchesTheDefinition) {
  // Attention scores: x times its own transpose, both computed at run time; then a product whose
  // left operand is shared by the whole batch (a constant [4, 8] against [2, 3, 8, 5]).
  const Precision p = GetParam();
  GraphBuilder b({2, 3, 4, 8});
  b.random_f("c", {8, 5}, 22).random_f("left", {4, 8}, 23);
  Node& t = b.node("Transpose", {"x"}, {f32("xt", {2, 3, 8, 4})});
  set_ints(t, "perm", {0, 1, 3, 2});
  b.node("MatMul", {"x", "xt"}, {f32("scores", {2, 3, 4, 4})});
  b.node("MatMul", {"x", "c"}, {f32("v", {2, 3, 4, 5})});
  b.node("MatMul", {"left", "xt"}, {f32("shared", {2, 3, 4, 4})});
  b.output("scores").output("shared");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    const std::map<char, int64_t> d = {{'b', 6}, {'i', 4}, {'j', 8}, {'k', 4}};
    const std::vector<float> xv = seen(x, p), left = seen(g, "left", p);
    return std::vector<Tensor>{floats({2, 3, 4, 4}, host_einsum({{"bij", xv}, {"bkj", xv}}, "bik", d)),
                               floats({2, 3, 4, 4}, host_einsum({{"ij", left}, {"bkj", xv}}, "bik", d))};
  });
}

// ---- masks -------------------------------------------------------------------------------------------

TEST_P(TransformerOps, ComparisonsLogicAndWhereMatchTheDefinitionsExactly) {
  const Precision p = GetParam();
  const Shape s = {3, 4, 10};
  GraphBuilder b(s);
  b.constant_f("t", {}, {0.25f}).random_f("row", {10}, 24).constant_f("fill", {}, {-100.f});
  b.node("Greater", {"x", "t"}, {typed("gt", DType::Bool, s)});
  b.node("Less", {"x", "row"}, {typed("lt", DType::Bool, s)});
  b.node("LessOrEqual", {"x", "row"}, {typed("le", DType::Bool, s)});
  b.node("GreaterOrEqual", {"x", "t"}, {typed("ge", DType::Bool, s)});
  b.node("Equal", {"gt", "lt"}, {typed("eq", DType::Bool, s)});
  b.node("And", {"gt", "le"}, {typed("and", DType::Bool, s)});
  b.node("Or", {"lt", "ge"}, {typed("or", DType::Bool, s)});
  b.node("Xor", {"gt", "lt"}, {typed("xor", DType::Bool, s)});
  b.node("Not", {"and"}, {typed("not", DType::Bool, s)});
  b.node("Where", {"not", "x", "fill"}, {f32("masked", s)});
  for (const char* o : {"gt", "lt", "le", "ge", "eq", "and", "or", "xor", "not", "masked"}) b.output(o);
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p), row = seen(g, "row", p);
    const float t = round_to(p, 0.25f);
    const std::size_t n = v.size();
    std::vector<bool> gt(n), lt(n), le(n), ge(n), eq(n), an(n), orr(n), xr(n), nt(n);
    std::vector<float> masked(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float r = row[i % 10];
      gt[i] = v[i] > t;
      lt[i] = v[i] < r;
      le[i] = v[i] <= r;
      ge[i] = v[i] >= t;
      eq[i] = gt[i] == lt[i];
      an[i] = gt[i] && le[i];
      orr[i] = lt[i] || ge[i];
      xr[i] = gt[i] != lt[i];
      nt[i] = !an[i];
      masked[i] = nt[i] ? v[i] : -100.f;
    }
    return std::vector<Tensor>{bools(s, gt), bools(s, lt), bools(s, le), bools(s, ge), bools(s, eq),
                               bools(s, an), bools(s, orr), bools(s, xr), bools(s, nt), floats(s, masked)};
  });
}

TEST_P(TransformerOps, WhereBroadcastsConditionAndBothBranches) {
  const Precision p = GetParam();
  GraphBuilder b({2, 1, 6});
  b.random_f("alt", {3, 1}, 25);
  Tensor cond(DType::Bool, {3, 6});
  for (std::size_t i = 0; i < 18; ++i) cond.bytes[i] = (i * 7 % 5) < 2;
  b.constant("cond", cond);
  b.node("Where", {"cond", "x", "alt"}, {f32("y", {2, 3, 6})});
  b.output("y");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p), alt = seen(g, "alt", p);
    std::vector<float> y(36);
    for (std::size_t i = 0; i < 36; ++i) {
      const std::size_t n = i / 18, r = (i / 6) % 3, c = i % 6;
      y[i] = cond.bytes[r * 6 + c] ? v[n * 6 + c] : alt[r];
    }
    return std::vector<Tensor>{floats({2, 3, 6}, y)};
  });
}

TEST_P(TransformerOps, IsNaNAndIsInfFindTheValuesTheyName) {
  // log of negative values is NaN; x / 0 is +inf or -inf by the sign of x.
  const Precision p = GetParam();
  const Shape s = {4, 25};
  GraphBuilder b(s);
  b.constant_f("zero", {}, {0.f});
  b.node("Log", {"x"}, {f32("log", s)});
  b.node("Div", {"x", "zero"}, {f32("inf", s)});
  b.node("IsNaN", {"log"}, {typed("nan?", DType::Bool, s)});
  b.node("IsInf", {"inf"}, {typed("inf?", DType::Bool, s)});
  Node& pos = b.node("IsInf", {"inf"}, {typed("+inf?", DType::Bool, s)});
  set_int(pos, "detect_negative", 0);
  Node& neg = b.node("IsInf", {"x"}, {typed("finite inf?", DType::Bool, s)});
  set_int(neg, "detect_positive", 0);
  b.output("nan?").output("inf?").output("+inf?").output("finite inf?");
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    std::vector<bool> nan(v.size()), inf(v.size()), pinf(v.size()), none(v.size(), false);
    for (std::size_t i = 0; i < v.size(); ++i) {
      nan[i] = v[i] < 0;
      inf[i] = v[i] != 0;
      pinf[i] = v[i] > 0;
    }
    return std::vector<Tensor>{bools(s, nan), bools(s, inf), bools(s, pinf), bools(s, none)};
  });
}

// ---- indexing ----------------------------------------------------------------------------------------

TEST_P(TransformerOps, GatherWithRunTimeAndManyConstantIndicesMatchesTheDefinition) {
  // Run-time indices from ArgMax pick rows of a table; 100 constant indices (negative ones too)
  // take the device kernel as well.
  const Precision p = GetParam();
  GraphBuilder b({3, 10, 4});
  b.random_f("table", {10, 7}, 26);
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 100; ++i) many.push_back((i * 37) % 20 - 10);
  b.constant_i("many", {100}, many).constant_i("axes", {1}, {2});
  Node& r = b.node("ReduceMax", {"x", "axes"}, {f32("m", {3, 10})});
  set_int(r, "keepdims", 0);
  Node& a = b.node("ArgMax", {"m"}, {typed("i", DType::I64, {3})});
  set_int(a, "axis", 1);
  set_int(a, "keepdims", 0);
  b.node("Gather", {"table", "i"}, {f32("rows", {3, 7})});
  Node& gm = b.node("Gather", {"x", "many"}, {f32("picked", {3, 100, 4})});
  set_int(gm, "axis", 1);
  b.output("rows").output("picked");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p), table = seen(g, "table", p);
    std::vector<float> rows(21), picked(1200);
    for (std::size_t n = 0; n < 3; ++n) {
      std::size_t best = 0;
      float bv = -INFINITY;
      for (std::size_t c = 0; c < 10; ++c) {
        float m = -INFINITY;
        for (std::size_t k = 0; k < 4; ++k) m = std::max(m, v[(n * 10 + c) * 4 + k]);
        if (m > bv) { bv = m; best = c; }
      }
      for (std::size_t j = 0; j < 7; ++j) rows[n * 7 + j] = table[best * 7 + j];
      for (std::size_t j = 0; j < 100; ++j)
        for (std::size_t k = 0; k < 4; ++k)
          picked[(n * 100 + j) * 4 + k] = v[(n * 10 + static_cast<std::size_t>(many[j] < 0 ? many[j] + 10 : many[j])) * 4 + k];
    }
    return std::vector<Tensor>{floats({3, 7}, rows), floats({3, 100, 4}, picked)};
  });
}

TEST_P(TransformerOps, GatherNDWithAndWithoutBatchDimsMatchesTheDefinition) {
  const Precision p = GetParam();
  GraphBuilder b({2, 5, 6});
  b.constant_i("pairs", {2, 3, 2}, {0, 1, 1, 4, -1, 0, 1, 2, 0, 0, 1, -2});   // [row, col] into [2, 5]
  b.constant_i("per_batch", {2, 4, 1}, {4, 0, 2, 2, 1, 3, -1, 0});            // a row of each batch's [5, 6]
  b.node("GatherND", {"x", "pairs"}, {f32("a", {2, 3, 6})});
  Node& n = b.node("GatherND", {"x", "per_batch"}, {f32("c", {2, 4, 6})});
  set_int(n, "batch_dims", 1);
  b.output("a").output("c");
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    const int64_t pairs[6][2] = {{0, 1}, {1, 4}, {1, 0}, {1, 2}, {0, 0}, {1, 3}};
    const int64_t per_batch[2][4] = {{4, 0, 2, 2}, {1, 3, 4, 0}};
    std::vector<float> a(36), c(48);
    for (std::size_t r = 0; r < 6; ++r)
      for (std::size_t j = 0; j < 6; ++j) a[r * 6 + j] = v[static_cast<std::size_t>((pairs[r][0] * 5 + pairs[r][1]) * 6) + j];
    for (std::size_t bt = 0; bt < 2; ++bt)
      for (std::size_t r = 0; r < 4; ++r)
        for (std::size_t j = 0; j < 6; ++j)
          c[(bt * 4 + r) * 6 + j] = v[(bt * 5 + static_cast<std::size_t>(per_batch[bt][r])) * 6 + j];
    return std::vector<Tensor>{floats({2, 3, 6}, a), floats({2, 4, 6}, c)};
  });
}

TEST_P(TransformerOps, ScatterNDWritesSlicesAndElementsIntoACopyOfTheData) {
  const Precision p = GetParam();
  GraphBuilder b({4, 5, 6});
  b.constant_i("rows", {2, 1}, {3, 1}).random_f("slices", {2, 5, 6}, 27);
  b.constant_i("points", {3, 2}, {0, 4, 2, 2, -1, 0}).random_f("vectors", {3, 6}, 28);
  b.node("ScatterND", {"x", "rows", "slices"}, {f32("a", {4, 5, 6})});
  b.node("ScatterND", {"a", "points", "vectors"}, {f32("y", {4, 5, 6})});
  b.output("a").output("y");
  const Graph g = b.g;
  expect_matches_reference(g, p, [&](const Tensor& x) {
    std::vector<float> a = seen(x, p);
    const std::vector<float> slices = seen(g, "slices", p), vectors = seen(g, "vectors", p);
    const std::size_t rows[2] = {3, 1};
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t j = 0; j < 30; ++j) a[rows[r] * 30 + j] = slices[r * 30 + j];
    std::vector<float> y = a;
    const std::size_t points[3][2] = {{0, 4}, {2, 2}, {3, 0}};
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t j = 0; j < 6; ++j) y[(points[r][0] * 5 + points[r][1]) * 6 + j] = vectors[r * 6 + j];
    return std::vector<Tensor>{floats({4, 5, 6}, a), floats({4, 5, 6}, y)};
  });
}

TEST_P(TransformerOps, IntegerArithmeticOnRunTimeIndicesMatchesTheDefinition) {
  // Indices from ArgMax, shifted to negative values too, through the integer kernels: Div
  // truncates, Mod follows the divisor's sign (fmod 0) or the dividend's (fmod 1).
  const Precision p = GetParam();
  GraphBuilder b({4, 9});
  b.constant_i("seven", {}, {7}).constant_i("col", {2, 1}, {3, -2}).constant_i("four", {1}, {4});
  Node& a = b.node("ArgMax", {"x"}, {typed("i", DType::I64, {4})});
  set_int(a, "axis", 1);
  set_int(a, "keepdims", 0);
  b.node("Sub", {"i", "seven"}, {typed("d", DType::I64, {4})});
  b.node("Add", {"d", "col"}, {typed("sum", DType::I64, {2, 4})});
  b.node("Mul", {"d", "col"}, {typed("prod", DType::I64, {2, 4})});
  b.node("Div", {"d", "col"}, {typed("quot", DType::I64, {2, 4})});
  b.node("Mod", {"d", "col"}, {typed("mod", DType::I64, {2, 4})});
  Node& f = b.node("Mod", {"d", "col"}, {typed("fmod", DType::I64, {2, 4})});
  set_int(f, "fmod", 1);
  b.node("Max", {"d", "four"}, {typed("max", DType::I64, {4})});
  b.node("Min", {"i", "four"}, {typed("min", DType::I64, {4})});
  for (const char* o : {"sum", "prod", "quot", "mod", "fmod", "max", "min"}) b.output(o);
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    std::vector<int64_t> i(4), d(4);
    for (std::size_t r = 0; r < 4; ++r) {
      i[r] = std::max_element(v.begin() + static_cast<std::ptrdiff_t>(r * 9), v.begin() + static_cast<std::ptrdiff_t>(r * 9 + 9)) -
             (v.begin() + static_cast<std::ptrdiff_t>(r * 9));
      d[r] = i[r] - 7;
    }
    const int64_t col[2] = {3, -2};
    std::vector<int64_t> sum(8), prod(8), quot(8), mod(8), fm(8), mx(4), mn(4);
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < 4; ++c) {
        const int64_t u = d[c], w = col[r];
        sum[r * 4 + c] = u + w;
        prod[r * 4 + c] = u * w;
        quot[r * 4 + c] = u / w;
        fm[r * 4 + c] = u % w;
        int64_t m = u % w;
        if (m != 0 && ((m < 0) != (w < 0))) m += w;
        mod[r * 4 + c] = m;
      }
    for (std::size_t c = 0; c < 4; ++c) {
      mx[c] = std::max<int64_t>(d[c], 4);
      mn[c] = std::min<int64_t>(i[c], 4);
    }
    auto t = [](Shape s, const std::vector<int64_t>& v) { return Tensor::from(DType::I64, std::move(s), v); };
    return std::vector<Tensor>{t({2, 4}, sum), t({2, 4}, prod), t({2, 4}, quot), t({2, 4}, mod), t({2, 4}, fm), t({4}, mx), t({4}, mn)};
  });
}

TEST_P(TransformerOps, Col2ImFoldsOverlappingBlocksLikeTheCpuEngine) {
  // Overlapping strided, dilated and padded blocks (each pixel sums up to 4), and MobileViT-V2's
  // non-overlapping 2x2 patches.
  struct C { int64_t c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr; };
  for (const C& k : {C{3, 7, 8, 3, 2, 2, 1, 1, 2, 1, 0, 1, 1}, C{4, 6, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0}}) {
    SCOPED_TRACE(str("block ", k.kh, "x", k.kw, " stride ", k.sh, "x", k.sw));
    const int64_t oh = (k.h + k.pt + k.pb - (k.dh * (k.kh - 1) + 1)) / k.sh + 1;
    const int64_t ow = (k.w + k.pl + k.pr - (k.dw * (k.kw - 1) + 1)) / k.sw + 1;
    GraphBuilder b({2, k.c * k.kh * k.kw, oh * ow});
    b.constant_i("image", {2}, {k.h, k.w}).constant_i("block", {2}, {k.kh, k.kw});
    Node& n = b.node("Col2Im", {"x", "image", "block"}, {f32("y", {2, k.c, k.h, k.w})});
    set_ints(n, "strides", {k.sh, k.sw});
    set_ints(n, "dilations", {k.dh, k.dw});
    set_ints(n, "pads", {k.pt, k.pl, k.pb, k.pr});
    b.output("y");
    expect_matches_cpu(b.g, GetParam());
  }
}

// ---- scans, triangles, ranges ------------------------------------------------------------------------

TEST_P(TransformerOps, CumSumForwardReverseAndExclusiveMatchesTheDefinition) {
  const Precision p = GetParam();
  const Shape s = {2, 7, 3};
  GraphBuilder b(s);
  b.constant_i("axis", {}, {1}).constant_i("ints", {2, 5}, {1, -2, 3, 4, 5, 6, 7, -8, 9, 10}).constant_i("last", {}, {-1});
  struct C { bool exclusive, reverse; };
  const C cases[] = {{false, false}, {true, false}, {false, true}, {true, true}};
  std::vector<std::string> names;
  for (const C& c : cases) {
    const std::string name = str("cumsum", c.exclusive ? "_excl" : "", c.reverse ? "_rev" : "");
    Node& n = b.node("CumSum", {"x", "axis"}, {f32(name, s)});
    set_int(n, "exclusive", c.exclusive);
    set_int(n, "reverse", c.reverse);
    b.output(name);
  }
  b.node("CumSum", {"ints", "last"}, {typed("int_sums", DType::I64, {2, 5})});
  b.output("int_sums");
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    std::vector<Tensor> out;
    for (const C& c : cases) {
      std::vector<float> y(v.size());
      for (std::size_t o = 0; o < 2; ++o)
        for (std::size_t in = 0; in < 3; ++in) {
          double acc = 0;
          for (std::size_t step = 0; step < 7; ++step) {
            const std::size_t j = c.reverse ? 6 - step : step;
            const std::size_t at = (o * 7 + j) * 3 + in;
            if (c.exclusive) { y[at] = static_cast<float>(acc); acc += v[at]; }
            else { acc += v[at]; y[at] = static_cast<float>(acc); }
          }
        }
      out.push_back(floats(s, y));
    }
    out.push_back(Tensor::from(DType::I64, {2, 5}, std::vector<int64_t>{1, -1, 2, 6, 11, 6, 13, 5, 14, 24}));
    return out;
  });
}

TEST_P(TransformerOps, TriluKeepsTheAskedTriangle) {
  const Precision p = GetParam();
  const Shape s = {2, 5, 6};
  GraphBuilder b(s);
  b.constant_i("one", {}, {1}).constant_i("minus_one", {}, {-1});
  b.node("Trilu", {"x", "one"}, {f32("upper", s)});
  Node& l = b.node("Trilu", {"x", "minus_one"}, {f32("lower", s)});
  set_int(l, "upper", 0);
  b.node("Trilu", {"x"}, {f32("upper0", s)});
  b.output("upper").output("lower").output("upper0");
  expect_matches_reference(b.g, p, [&](const Tensor& x) {
    const std::vector<float> v = seen(x, p);
    std::vector<float> up(60), lo(60), up0(60);
    for (std::size_t i = 0; i < 60; ++i) {
      const int64_t r = static_cast<int64_t>((i / 6) % 5), c = static_cast<int64_t>(i % 6);
      up[i] = c - r >= 1 ? v[i] : 0.f;
      lo[i] = c - r <= -1 ? v[i] : 0.f;
      up0[i] = c - r >= 0 ? v[i] : 0.f;
    }
    return std::vector<Tensor>{floats(s, up), floats(s, lo), floats(s, up0)};
  });
}

TEST_P(TransformerOps, RangeOfConstantsIsWrittenOnTheDevice) {
  const Precision p = GetParam();
  GraphBuilder b({2, 3});
  b.constant_i("s", {}, {2}).constant_i("l", {}, {13}).constant_i("d", {}, {3});
  b.constant_f("fs", {}, {0.5f}).constant_f("fl", {}, {2.f}).constant_f("fd", {}, {0.25f});
  b.node("Range", {"s", "l", "d"}, {typed("ints", DType::I64, {4})});
  b.node("Range", {"fs", "fl", "fd"}, {f32("floats", {6})});
  b.node("Relu", {"x"}, {f32("y", {2, 3})});
  b.output("ints").output("floats");
  expect_matches_reference(b.g, p, [&](const Tensor&) {
    return std::vector<Tensor>{Tensor::from(DType::I64, {4}, std::vector<int64_t>{2, 5, 8, 11}),
                               floats({6}, {0.5f, 0.75f, 1.f, 1.25f, 1.5f, 1.75f})};
  });
}

INSTANTIATE_TEST_SUITE_P(Precisions, TransformerOps,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16),
                         [](const ::testing::TestParamInfo<Precision>& i) { return std::string(precision_name(i.param)); });

// A block of the new ops (LayerNorm, Einsum, Trilu, Equal, Where, Softmax, Gelu, CumSum, GatherND,
// GroupNorm, ScatterND, IsNaN) runs inside the captured CUDA graph: replays of two io sets give
// the eager run's bytes exactly, so no step synchronizes, allocates or runs on the host.
TEST(TransformerOpsGraphs, AMaskedAttentionBlockReplaysInACudaGraphBitForBit) {
  SLUICE_REQUIRE_GPU();
  GraphBuilder b({2, 6, 16});
  b.random_f("g", {16}, 31, 0.5f, 1.5f).random_f("beta", {16}, 32).constant_f("ones", {6, 6}, std::vector<float>(36, 1.f));
  b.constant_f("zero", {}, {0.f}).constant_f("neg", {}, {-1e4f}).constant_i("axis", {}, {1});
  b.constant_i("pick", {3, 2}, {0, 5, 1, 0, 1, 3}).constant_i("shape4", {4}, {2, 6, 4, 4});
  b.random_f("s", {6}, 33).random_f("sb", {6}, 34).constant_i("row", {1, 1}, {1}).random_f("upd", {1, 6, 4, 4}, 35);
  b.node("LayerNormalization", {"x", "g", "beta"}, {f32("ln", {2, 6, 16})});
  Node& e1 = b.node("Einsum", {"ln", "x"}, {f32("scores", {2, 6, 6})});
  set_string(e1, "equation", "bqd,bkd->bqk");
  Node& tri = b.node("Trilu", {"ones"}, {f32("tri", {6, 6})});
  set_int(tri, "upper", 0);
  b.node("Equal", {"tri", "zero"}, {typed("future", DType::Bool, {6, 6})});
  b.node("Where", {"future", "neg", "scores"}, {f32("masked", {2, 6, 6})});
  Node& sm = b.node("Softmax", {"masked"}, {f32("attn", {2, 6, 6})});
  set_int(sm, "axis", -1);
  Node& e2 = b.node("Einsum", {"attn", "x"}, {f32("ctx", {2, 6, 16})});
  set_string(e2, "equation", "bqk,bkd->bqd");
  b.node("Gelu", {"ctx"}, {f32("act", {2, 6, 16})});
  b.node("CumSum", {"act", "axis"}, {f32("cs", {2, 6, 16})});
  b.node("GatherND", {"cs", "pick"}, {f32("picked", {3, 16})});
  b.node("IsNaN", {"cs"}, {typed("nan", DType::Bool, {2, 6, 16})});
  b.node("Reshape", {"cs", "shape4"}, {f32("cs4", {2, 6, 4, 4})});
  Node& gn = b.node("GroupNormalization", {"cs4", "s", "sb"}, {f32("gn", {2, 6, 4, 4})});
  set_int(gn, "num_groups", 3);
  b.node("ScatterND", {"gn", "row", "upd"}, {f32("y", {2, 6, 4, 4})});
  b.output("y").output("picked").output("nan");
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    EngineOptions o;
    o.precision = p;
    o.deterministic = true;
    o.io_sets = 2;
    o.cuda_graphs = false;
    auto eager = create_cuda_engine(b.g, o);
    o.cuda_graphs = true;
    auto replay = create_cuda_engine(b.g, o);
    ASSERT_TRUE(cuda::engine_stats(*replay)->graphs_captured);
    for (int set = 0; set < 2; ++set)
      for (uint32_t seed : {7u, 8u}) {
        const Tensor x = random_tensor(b.g.inputs[0], seed);
        const auto a = cuda::run_forward(*eager, x, set);
        const auto r = cuda::run_forward(*replay, x, set);
        ASSERT_EQ(a.size(), r.size());
        for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].bytes, r[k].bytes) << "output " << k << " set " << set << " seed " << seed;
        // The -1e4 mask fill must not turn into NaN anywhere (inf - inf in the softmax would).
        for (uint8_t v : a[2].bytes) EXPECT_EQ(v, 0);
      }
  }
}

// Einsum forms the engine refuses say so when the model is loaded, not with wrong numbers: a
// letter broadcast between operands, and a diagonal over dims of different sizes.
TEST(TransformerOpsErrors, EinsumBroadcastLettersAndUnequalDiagonalsAreRefusedClearly) {
  for (const auto& [eq, shape, w] : std::vector<std::tuple<std::string, Shape, Shape>>{
           {"ii->i", {4, 3}, {}}, {"bij,bjk->bik", {2, 3, 4}, {1, 4, 5}}}) {
    SCOPED_TRACE(eq);
    GraphBuilder b(shape);
    std::vector<std::string> ins = {"x"};
    if (!w.empty()) {
      b.random_f("w", w, 29);
      ins.push_back("w");
    }
    Node& n = b.node("Einsum", ins, {f32("y", {2, 3, 5})});
    set_string(n, "equation", eq);
    b.output("y");
    cuda::Builder cb(b.g, Precision::FP32);
    try {
      cb.lower_all();
      ADD_FAILURE() << "lowered without an error";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("Einsum"), std::string::npos) << m;
      EXPECT_TRUE(m.find("a diagonal needs equal sizes") != std::string::npos || m.find("broadcasting is not supported") != std::string::npos) << m;
    }
  }
}

// The other forms the kernels do not cover are refused at load time with what is unsupported.
TEST(TransformerOpsErrors, UncoveredFormsOfTheMaskAndIndexOpsAreRefusedClearly) {
  auto refusal = [](const Graph& g) -> std::string {
    cuda::Builder cb(g, Precision::FP32);
    try {
      cb.lower_all();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  {
    GraphBuilder b({4, 5});
    b.constant_i("idx", {1, 1}, {2}).random_f("u", {1, 5}, 41);
    Node& n = b.node("ScatterND", {"x", "idx", "u"}, {f32("y", {4, 5})});
    set_string(n, "reduction", "sum");
    b.output("y");
    EXPECT_NE(refusal(b.g).find("reduction 'sum' is not one of none, add, mul, max, min"), std::string::npos) << refusal(b.g);
  }
  {
    GraphBuilder b({4, 5});
    b.constant_f("t", {}, {1.f});
    b.node("Where", {"x", "x", "t"}, {f32("y", {4, 5})});
    b.output("y");
    EXPECT_NE(refusal(b.g).find("condition is float32, not bool"), std::string::npos) << refusal(b.g);
  }
  {
    GraphBuilder b({4, 5});
    b.constant_f("d", {}, {3.f});
    b.node("Mod", {"x", "d"}, {f32("y", {4, 5})});
    b.output("y");
    EXPECT_NE(refusal(b.g).find("needs fmod=1"), std::string::npos) << refusal(b.g);
  }
  {
    GraphBuilder b({3});
    b.constant_f("l", {}, {5.f}).constant_f("d", {}, {1.f});
    b.node("Range", {"x", "l", "d"}, {f32("y", {5})});
    b.output("y");
    EXPECT_NE(refusal(b.g).find("start (input 'x') must be a constant"), std::string::npos) << refusal(b.g);
  }
}

// The op table `sluice check` reads without a GPU says what the builder does: every listed op gets
// past the dispatch (it may still refuse the dummy node's inputs, with its own message), an
// unlisted one is refused as not implemented, and every op the model layer accepts at run time is
// listed, except the ones the CUDA engine still lacks.
TEST(CudaOpTable, ListsExactlyTheOpsTheBuilderLowers) {
  const std::vector<std::string> table = cuda::implemented_ops();
  auto lowering_error = [](const std::string& key) -> std::string {
    const std::size_t dot = key.find('.');
    GraphBuilder b({2, 3, 4, 5});
    Node& n = b.node(dot == std::string::npos ? key : key.substr(dot + 1), {"x"}, {f32("y", {2, 3, 4, 5})},
                     dot == std::string::npos ? "" : key.substr(0, dot));
    (void)n;
    b.output("y");
    try {
      cuda::Builder cb(b.g, Precision::FP32);
      cb.lower_all();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  for (const std::string& op : table) {
    SCOPED_TRACE(op);
    EXPECT_EQ(lowering_error(op).find("is not implemented by the cuda engine"), std::string::npos) << lowering_error(op);
  }
  for (const std::string op : {"Bogus", "sluice.Bogus"}) EXPECT_NE(lowering_error(op).find("is not implemented by the cuda engine"), std::string::npos);
  const std::set<std::string> listed(table.begin(), table.end());
  const std::set<std::string> still_missing = {};
  for (const std::string& op : supported_ops()) {
    if (is_fold_only_op(op) || op == "Constant" || op == "Shape" || op == "ConstantOfShape") continue;
    const std::string key = is_sluice_op(op) ? "sluice." + op : op;
    if (still_missing.count(op)) {
      EXPECT_FALSE(listed.count(key)) << op << " is listed now: take it off still_missing";
      continue;
    }
    EXPECT_TRUE(listed.count(key)) << op << " is accepted by the model layer but not in the CUDA engine's table";
  }
}

}  // namespace
