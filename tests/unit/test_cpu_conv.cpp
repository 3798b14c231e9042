// Conv, FusedConv and ConvTranspose of the CPU engine against naive loops, over many attribute
// combinations: groups (depthwise included), strides, dilations, pads, auto_pad, 1-D/2-D/3-D, odd
// sizes, bias, residual and activations.
#include <gtest/gtest.h>

#include "test_cpu_util.h"

using namespace sluice;
using namespace sluice::cputest;

namespace {

struct ConvCase {
  int64_t n, c, m, group;
  Shape in, k, s, d;
  std::vector<int64_t> pads;  // begin..., end...
  std::string auto_pad;       // "" = explicit pads
  bool bias;
};

std::string describe(const ConvCase& p) {
  return str("n", p.n, " c", p.c, " m", p.m, " g", p.group, " in", shape_str(p.in), " k", shape_str(p.k), " s",
             shape_str(p.s), " d", shape_str(p.d), " pads", shape_str(p.pads), " auto_pad '", p.auto_pad, "' bias ", p.bias);
}

void PrintTo(const ConvCase& p, std::ostream* os) { *os << describe(p); }

// Output extents and start padding for a case, per the ONNX formulas.
void conv_geometry(const ConvCase& p, Shape* out, std::vector<int64_t>* head) {
  const std::size_t r = p.in.size();
  out->clear();
  head->clear();
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t span = (p.k[i] - 1) * p.d[i] + 1;
    if (p.auto_pad == "SAME_UPPER" || p.auto_pad == "SAME_LOWER") {
      const int64_t o = (p.in[i] + p.s[i] - 1) / p.s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * p.s[i] + span - p.in[i]);
      out->push_back(o);
      head->push_back(p.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
    } else if (p.auto_pad == "VALID") {
      out->push_back((p.in[i] - span) / p.s[i] + 1);
      head->push_back(0);
    } else {
      out->push_back((p.in[i] + p.pads[i] + p.pads[i + r] - span) / p.s[i] + 1);
      head->push_back(p.pads[i]);
    }
  }
}

// Pads a spatial shape to three dimensions (leading ones).
Shape pad3(const Shape& s, int64_t fill) {
  Shape r(3 - s.size(), fill);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

std::vector<double> naive_conv(const ConvCase& p, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& b, const Shape& out, const std::vector<int64_t>& head) {
  const Shape I = pad3(p.in, 1), O = pad3(out, 1), K = pad3(p.k, 1), S = pad3(p.s, 1), D = pad3(p.d, 1), P = pad3(head, 0);
  const int64_t cg = p.c / p.group, mg = p.m / p.group;
  const int64_t isz = I[0] * I[1] * I[2], osz = O[0] * O[1] * O[2], ksz = K[0] * K[1] * K[2];
  std::vector<double> y(static_cast<std::size_t>(p.n * p.m * osz));
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t m = 0; m < p.m; ++m)
      for (int64_t od = 0; od < O[0]; ++od)
        for (int64_t oh = 0; oh < O[1]; ++oh)
          for (int64_t ow = 0; ow < O[2]; ++ow) {
            double acc = p.bias ? b[m] : 0.0;
            const int64_t g = m / mg;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t kd = 0; kd < K[0]; ++kd)
                for (int64_t kh = 0; kh < K[1]; ++kh)
                  for (int64_t kw = 0; kw < K[2]; ++kw) {
                    const int64_t id = od * S[0] - P[0] + kd * D[0], ih = oh * S[1] - P[1] + kh * D[1],
                                  iw = ow * S[2] - P[2] + kw * D[2];
                    if (id < 0 || id >= I[0] || ih < 0 || ih >= I[1] || iw < 0 || iw >= I[2]) continue;
                    acc += static_cast<double>(x[(n * p.c + g * cg + c) * isz + (id * I[1] + ih) * I[2] + iw]) *
                           w[(m * cg + c) * ksz + (kd * K[1] + kh) * K[2] + kw];
                  }
            y[(n * p.m + m) * osz + (od * O[1] + oh) * O[2] + ow] = acc;
          }
  return y;
}

// One `op` node (Conv or ConvTranspose) on x with weights w and, when b is given, a bias, writing
// float y; the attributes both ops share are set, the caller adds its padding ones.
Node& conv_node(GraphBuilder& gb, const std::string& op, const Shape& ws, const std::vector<float>& w,
                const std::vector<float>* b, const Shape& ys, int64_t group, const Shape& strides,
                const Shape& dilations) {
  gb.constant_f("w", ws, w);
  std::vector<std::string> ins = {"x", "w"};
  if (b) {
    gb.constant_f("b", {static_cast<int64_t>(b->size())}, *b);
    ins.push_back("b");
  }
  Node& n = gb.node(op, ins, {f32("y", ys)});
  n.attrs["group"] = Attribute::of_int(group);
  n.attrs["strides"] = Attribute::of_ints(strides);
  n.attrs["dilations"] = Attribute::of_ints(dilations);
  return n;
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, MatchesNaiveLoops) {
  const ConvCase p = GetParam();
  Shape out;
  std::vector<int64_t> head;
  conv_geometry(p, &out, &head);
  Shape xs = {p.n, p.c};
  xs.insert(xs.end(), p.in.begin(), p.in.end());
  Shape ws = {p.m, p.c / p.group};
  ws.insert(ws.end(), p.k.begin(), p.k.end());
  Shape ys = {p.n, p.m};
  ys.insert(ys.end(), out.begin(), out.end());
  const auto x = random_values(shape_numel(xs), 1);
  const auto w = random_values(shape_numel(ws), 2);
  const auto b = random_values(p.m, 3);
  GraphBuilder gb(xs);
  Node& n = conv_node(gb, "Conv", ws, w, p.bias ? &b : nullptr, ys, p.group, p.s, p.d);
  if (p.auto_pad.empty()) n.attrs["pads"] = Attribute::of_ints(p.pads);
  else n.attrs["auto_pad"] = Attribute::of_string(p.auto_pad);
  gb.output("y");
  const auto got = run_f32(gb.g, x);
  EXPECT_LE(rel_error(got, naive_conv(p, x, w, b, out, head)), 1e-5) << describe(p);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvTest,
    ::testing::Values(
        // plain 3x3, odd sizes, pads 1
        ConvCase{2, 5, 7, 1, {7, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},
        // pointwise (no im2col), with and without bias
        ConvCase{3, 6, 4, 1, {5, 9}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", true},
        ConvCase{1, 8, 3, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, "", false},
        // pointwise with a stride goes through im2col
        ConvCase{2, 4, 6, 1, {7, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, "", true},
        // strided, asymmetric pads, non-square kernel
        ConvCase{2, 3, 5, 1, {11, 7}, {3, 2}, {2, 3}, {1, 1}, {1, 0, 2, 1}, "", true},
        // dilated
        ConvCase{1, 4, 4, 1, {13, 12}, {3, 3}, {1, 1}, {2, 3}, {2, 3, 2, 3}, "", false},
        // grouped
        ConvCase{2, 6, 9, 3, {7, 13}, {3, 3}, {1, 2}, {1, 1}, {1, 1, 1, 1}, "", true},
        // depthwise (direct path), strided, dilated, channel multiplier 2
        ConvCase{3, 5, 5, 5, {7, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},
        ConvCase{2, 5, 5, 5, {9, 10}, {5, 3}, {2, 2}, {2, 1}, {4, 1, 3, 0}, "", true},
        ConvCase{2, 4, 8, 4, {6, 7}, {3, 3}, {2, 1}, {1, 1}, {1, 1, 1, 1}, "", false},
        // channel multiplier above the direct path's limit
        ConvCase{1, 2, 12, 2, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},
        // auto_pad
        ConvCase{2, 3, 4, 1, {7, 13}, {3, 3}, {2, 2}, {1, 1}, {}, "SAME_UPPER", true},
        ConvCase{2, 3, 4, 1, {7, 13}, {4, 4}, {2, 3}, {1, 1}, {}, "SAME_LOWER", true},
        ConvCase{1, 3, 4, 1, {8, 8}, {2, 2}, {1, 1}, {1, 1}, {}, "SAME_UPPER", false},
        ConvCase{1, 3, 4, 1, {8, 9}, {3, 2}, {2, 2}, {1, 2}, {}, "VALID", true},
        // kernel larger than the input with padding
        ConvCase{1, 2, 3, 1, {2, 3}, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}, "", true},
        // wide map: several column tiles
        ConvCase{1, 3, 70, 1, {40, 41}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true},
        // 1-D and 3-D
        ConvCase{2, 3, 4, 1, {17}, {3}, {2}, {1}, {1, 2}, "", true},
        ConvCase{2, 4, 4, 4, {15}, {5}, {1}, {2}, {4, 4}, "", false},
        ConvCase{1, 2, 3, 1, {5, 6, 7}, {3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 2, 1, 1, 2}, "", true},
        ConvCase{2, 4, 4, 2, {3, 4, 5}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}, "", true}));

TEST(FusedConv, AddsBiasResidualAndActivation) {
  const ConvCase p{2, 4, 6, 2, {5, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, "", true};
  Shape out;
  std::vector<int64_t> head;
  conv_geometry(p, &out, &head);
  const Shape ys = {2, 6, out[0], out[1]};
  const auto x = random_values(2 * 4 * 5 * 7, 4);
  const auto w = random_values(6 * 2 * 9, 5);
  const auto b = random_values(6, 6);
  const auto z = random_values(shape_numel(ys), 7);
  const auto ref = naive_conv(p, x, w, b, out, head);
  for (const std::string act : {"", "Relu", "Clip", "LeakyRelu"}) {
    GraphBuilder gb({2, 4, 5, 7});
    gb.constant_f("w", {6, 2, 3, 3}, w).constant_f("b", {6}, b).constant_f("z", ys, z);
    Node& n = gb.node("FusedConv", {"x", "w", "b", "z"}, {f32("y", ys)}, "sluice");
    n.attrs["group"] = Attribute::of_int(2);
    n.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
    if (!act.empty()) n.attrs["activation"] = Attribute::of_string(act);
    n.attrs["clip_min"] = Attribute::of_float(-0.5f);
    n.attrs["clip_max"] = Attribute::of_float(0.75f);
    n.attrs["alpha"] = Attribute::of_float(0.1f);
    gb.output("y");
    const auto got = run_f32(gb.g, x);
    std::vector<double> expect(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      double v = ref[i] + z[i];
      if (act == "Relu") v = std::max(v, 0.0);
      if (act == "Clip") v = std::min(std::max(v, -0.5), 0.75);
      if (act == "LeakyRelu" && v < 0) v *= 0.1;
      expect[i] = v;
    }
    EXPECT_LE(rel_error(got, expect), 1e-5) << "activation '" << act << "'";
  }
}

TEST(Conv, RejectsWeightsThatDoNotMatchTheGroups) {
  GraphBuilder gb({1, 6, 5, 5});
  gb.constant_f("w", {4, 4, 3, 3}, std::vector<float>(144, 0.f));
  Node& n = gb.node("Conv", {"x", "w"}, {f32("y", {1, 4, 3, 3})});
  n.attrs["group"] = Attribute::of_int(2);
  gb.output("y");
  try {
    create_cpu_engine(gb.g, EngineOptions{});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("Conv 'Conv0'"), std::string::npos) << e.what();
  }
}

// ---- ConvTranspose -----------------------------------------------------------------------------

struct DeconvCase {
  int64_t n, c, m, group;
  Shape in, k, s, d, outpad;
  std::vector<int64_t> pads;
  bool bias;
};

void PrintTo(const DeconvCase& p, std::ostream* os) {
  *os << "n" << p.n << " c" << p.c << " m" << p.m << " g" << p.group << " in" << shape_str(p.in) << " k" << shape_str(p.k)
      << " s" << shape_str(p.s) << " d" << shape_str(p.d) << " outpad" << shape_str(p.outpad) << " pads" << shape_str(p.pads);
}

class ConvTransposeTest : public ::testing::TestWithParam<DeconvCase> {};

TEST_P(ConvTransposeTest, MatchesNaiveScatter) {
  const DeconvCase p = GetParam();
  const std::size_t r = p.in.size();
  Shape out;
  for (std::size_t i = 0; i < r; ++i)
    out.push_back(p.s[i] * (p.in[i] - 1) + p.outpad[i] + (p.k[i] - 1) * p.d[i] + 1 - p.pads[i] - p.pads[i + r]);
  const int64_t cg = p.c / p.group, mg = p.m / p.group;
  Shape xs = {p.n, p.c}, ws = {p.c, mg}, ys = {p.n, p.m};
  xs.insert(xs.end(), p.in.begin(), p.in.end());
  ws.insert(ws.end(), p.k.begin(), p.k.end());
  ys.insert(ys.end(), out.begin(), out.end());
  const auto x = random_values(shape_numel(xs), 11);
  const auto w = random_values(shape_numel(ws), 12);
  const auto b = random_values(p.m, 13);
  // Naive scatter over 3-D padded shapes.
  const Shape I = pad3(p.in, 1), O = pad3(out, 1), K = pad3(p.k, 1), S = pad3(p.s, 1), D = pad3(p.d, 1);
  std::vector<int64_t> head(p.pads.begin(), p.pads.begin() + r);
  const Shape P = pad3(head, 0);
  const int64_t isz = shape_numel(I), osz = shape_numel(O), ksz = shape_numel(K);
  std::vector<double> ref(static_cast<std::size_t>(shape_numel(ys)));
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t m = 0; m < p.m; ++m)
      for (int64_t o = 0; o < osz; ++o) ref[(n * p.m + m) * osz + o] = p.bias ? b[m] : 0.0;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t ci = 0; ci < p.c; ++ci)
      for (int64_t mm = 0; mm < mg; ++mm)
        for (int64_t i = 0; i < isz; ++i)
          for (int64_t k = 0; k < ksz; ++k) {
            const int64_t id = i / (I[1] * I[2]), ih = (i / I[2]) % I[1], iw = i % I[2];
            const int64_t kd = k / (K[1] * K[2]), kh = (k / K[2]) % K[1], kw = k % K[2];
            const int64_t od = id * S[0] - P[0] + kd * D[0], oh = ih * S[1] - P[1] + kh * D[1], ow = iw * S[2] - P[2] + kw * D[2];
            if (od < 0 || od >= O[0] || oh < 0 || oh >= O[1] || ow < 0 || ow >= O[2]) continue;
            const int64_t m = (ci / cg) * mg + mm;
            ref[(n * p.m + m) * osz + (od * O[1] + oh) * O[2] + ow] +=
                static_cast<double>(x[(n * p.c + ci) * isz + i]) * w[(ci * mg + mm) * ksz + k];
          }
  GraphBuilder gb(xs);
  Node& node = conv_node(gb, "ConvTranspose", ws, w, p.bias ? &b : nullptr, ys, p.group, p.s, p.d);
  node.attrs["pads"] = Attribute::of_ints(p.pads);
  node.attrs["output_padding"] = Attribute::of_ints(p.outpad);
  gb.output("y");
  EXPECT_LE(rel_error(run_f32(gb.g, x), ref), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvTransposeTest,
    ::testing::Values(DeconvCase{2, 4, 3, 1, {5, 7}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0, 0, 0}, true},
                      DeconvCase{1, 3, 5, 1, {7, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
                      DeconvCase{2, 6, 4, 2, {4, 5}, {3, 2}, {3, 2}, {2, 1}, {1, 0}, {2, 0, 1, 1}, false},
                      DeconvCase{1, 4, 4, 4, {6, 6}, {4, 4}, {2, 2}, {1, 1}, {0, 0}, {1, 1, 1, 1}, true},
                      DeconvCase{2, 3, 2, 1, {9}, {3}, {2}, {1}, {1}, {0, 1}, true},
                      DeconvCase{1, 2, 3, 1, {3, 4, 2}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {0, 0, 1}, {0, 1, 0, 0, 0, 0}, true}));

}  // namespace
