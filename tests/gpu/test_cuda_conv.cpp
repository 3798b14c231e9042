// Convolutions of the CUDA engine against the CPU engine: FusedConv with bias, residual and each
// activation, plain Conv, strides, dilations, groups (depthwise too), 1-D and 3-D, asymmetric and
// SAME padding, ConvTranspose with output padding, unequal pads and groups.  Every case at fp32
// (1e-5), tf32 (1e-3), fp16 (1e-2) and bf16 (2e-2), relative to the largest reference value.
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

class Conv : public ::testing::TestWithParam<Precision> {};

struct ConvSpec {
  Shape x, w;
  Shape y;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group = 1;
  bool bias = true;
  std::string activation;   // FusedConv only; "-" for a plain Conv
  std::string auto_pad;
  bool residual = false;
};

Graph conv_graph(const ConvSpec& s) {
  GraphBuilder b(s.x);
  b.random_f("W", s.w, 11, -0.5f, 0.5f);
  std::vector<std::string> ins = {"x", "W"};
  if (s.bias || s.residual) {
    b.random_f("B", {s.w[0]}, 12);
    ins.push_back(s.bias ? "B" : "");
  }
  if (s.residual) {
    // The residual comes from another convolution of the same input (1x1, same output shape).
    Shape w1 = {s.y[1], s.x[1]};
    for (std::size_t d = 2; d < s.x.size(); ++d) w1.push_back(1);
    b.random_f("W1", w1, 13, -0.5f, 0.5f);
    Node& r = b.node("Conv", {"x", "W1"}, {f32("z", s.y)});
    std::vector<int64_t> st;
    for (std::size_t d = 2; d < s.x.size(); ++d) st.push_back(s.x[d] / s.y[d] > 1 ? s.x[d] / s.y[d] : 1);
    set_ints(r, "strides", st);
    ins.push_back("z");
  }
  const bool plain = s.activation == "-";
  Node& n = b.node(plain ? "Conv" : "FusedConv", ins, {f32("y", s.y)}, plain ? "" : "sluice");
  if (!s.strides.empty()) set_ints(n, "strides", s.strides);
  if (!s.pads.empty()) set_ints(n, "pads", s.pads);
  if (!s.dilations.empty()) set_ints(n, "dilations", s.dilations);
  if (s.group != 1) set_int(n, "group", s.group);
  if (!s.auto_pad.empty()) set_string(n, "auto_pad", s.auto_pad);
  if (!plain && !s.activation.empty()) set_string(n, "activation", s.activation);
  if (s.activation == "Clip") {
    set_float(n, "clip_min", 0.f);
    set_float(n, "clip_max", 0.5f);
  }
  if (s.activation == "LeakyRelu") set_float(n, "alpha", 0.1f);
  b.output("y");
  return b.g;
}

TEST_P(Conv, FusedConvBiasReluMatchesCpu) {
  ConvSpec s{{2, 8, 10, 12}, {16, 8, 3, 3}, {2, 16, 10, 12}, {}, {1, 1, 1, 1}};
  s.activation = "Relu";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, FusedConvResidualReluMatchesCpu) {
  ConvSpec s{{2, 8, 10, 12}, {16, 8, 3, 3}, {2, 16, 10, 12}, {}, {1, 1, 1, 1}};
  s.activation = "Relu";
  s.residual = true;
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, FusedConvResidualWithoutBiasOrActivationMatchesCpu) {
  ConvSpec s{{2, 8, 10, 12}, {16, 8, 3, 3}, {2, 16, 5, 6}, {2, 2}, {1, 1, 1, 1}};
  s.bias = false;
  s.residual = true;
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, FusedConvClipAndLeakyReluRunAsEpilogue) {
  for (const char* act : {"Clip", "LeakyRelu"}) {
    SCOPED_TRACE(act);
    ConvSpec s{{1, 6, 9, 9}, {8, 6, 3, 3}, {1, 8, 9, 9}, {}, {1, 1, 1, 1}};
    s.activation = act;
    expect_matches_cpu(conv_graph(s), GetParam());
  }
}

TEST_P(Conv, PlainConvWithoutBiasMatchesCpu) {
  ConvSpec s{{2, 3, 16, 16}, {8, 3, 7, 7}, {2, 8, 8, 8}, {2, 2}, {3, 3, 3, 3}};
  s.activation = "-";
  s.bias = false;
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, StridedDilatedGroupedConvMatchesCpu) {
  // out = (13 + 2*2 - (2*(3-1)+1)) / 2 + 1 = 7
  ConvSpec s{{2, 8, 13, 13}, {12, 2, 3, 3}, {2, 12, 7, 7}, {2, 2}, {2, 2, 2, 2}, {2, 2}, 4};
  s.activation = "Relu";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, DepthwiseConvMatchesCpu) {
  ConvSpec s{{2, 16, 12, 12}, {16, 1, 3, 3}, {2, 16, 12, 12}, {}, {1, 1, 1, 1}, {}, 16};
  s.activation = "Relu";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, OneDimensionalConvMatchesCpu) {
  ConvSpec s{{2, 4, 20}, {6, 4, 5}, {2, 6, 20}, {}, {2, 2}};
  s.activation = "";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, ThreeDimensionalConvMatchesCpu) {
  ConvSpec s{{1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, {1, 3, 5, 6, 7}, {}, {1, 1, 1, 1, 1, 1}};
  s.activation = "Relu";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, AsymmetricPadsArePaddedExplicitly) {
  // pads begin (0, 0), end (1, 1): out = (9 + 1 - 3) / 2 + 1 = 4
  ConvSpec s{{1, 3, 9, 9}, {4, 3, 3, 3}, {1, 4, 4, 4}, {2, 2}, {0, 0, 1, 1}};
  s.activation = "Relu";
  expect_matches_cpu(conv_graph(s), GetParam());
}

TEST_P(Conv, SameUpperAutoPadMatchesCpu) {
  // in 10, stride 2: out 5, total padding 1 -> begin 0, end 1
  ConvSpec s{{1, 3, 10, 10}, {4, 3, 3, 3}, {1, 4, 5, 5}, {2, 2}};
  s.auto_pad = "SAME_UPPER";
  s.activation = "-";
  expect_matches_cpu(conv_graph(s), GetParam());
}

struct ConvTSpec {
  Shape x, w, y;
  std::vector<int64_t> strides, pads, output_padding;
  int64_t group = 1;
  bool bias = true;
};

Graph conv_transpose_graph(const ConvTSpec& s) {
  GraphBuilder b(s.x);
  b.random_f("W", s.w, 21, -0.5f, 0.5f);
  std::vector<std::string> ins = {"x", "W"};
  if (s.bias) {
    b.random_f("B", {s.y[1]}, 22);
    ins.push_back("B");
  }
  Node& n = b.node("ConvTranspose", ins, {f32("y", s.y)});
  set_ints(n, "strides", s.strides);
  set_ints(n, "pads", s.pads);
  if (!s.output_padding.empty()) set_ints(n, "output_padding", s.output_padding);
  if (s.group != 1) set_int(n, "group", s.group);
  b.output("y");
  return b.g;
}

TEST_P(Conv, ConvTransposeUpsamplingMatchesCpu) {
  // out = 2 * (5 - 1) + 4 - 2 = 10
  expect_matches_cpu(conv_transpose_graph({{2, 8, 5, 5}, {8, 4, 4, 4}, {2, 4, 10, 10}, {2, 2}, {1, 1, 1, 1}}), GetParam());
}

TEST_P(Conv, ConvTransposeOutputPaddingMatchesCpu) {
  // out = 2 * 4 + 1 + 3 - 2 = 10
  expect_matches_cpu(conv_transpose_graph({{1, 4, 5, 5}, {4, 6, 3, 3}, {1, 6, 10, 10}, {2, 2}, {1, 1, 1, 1}, {1, 1}}),
                     GetParam());
}

TEST_P(Conv, ConvTransposeUnequalPadsAreCropped) {
  // out = 2 * 4 + 4 - 0 - 1 = 11
  expect_matches_cpu(conv_transpose_graph({{1, 4, 5, 5}, {4, 3, 4, 4}, {1, 3, 11, 11}, {2, 2}, {0, 0, 1, 1}}), GetParam());
}

TEST_P(Conv, GroupedConvTransposeMatchesCpu) {
  ConvTSpec s{{1, 8, 6, 6}, {8, 2, 3, 3}, {1, 4, 11, 11}, {2, 2}, {1, 1, 1, 1}};
  s.group = 2;
  s.bias = false;
  expect_matches_cpu(conv_transpose_graph(s), GetParam());
}

std::string precision_param(const ::testing::TestParamInfo<Precision>& i) { return precision_name(i.param); }

INSTANTIATE_TEST_SUITE_P(Precisions, Conv,
                         ::testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         precision_param);

}  // namespace
