// Preprocessing geometry (plan_resize) and arithmetic (axis_taps, preprocess_rgb): hand-computed
// cases of torchvision's rules, and the resize against a direct double-precision evaluation of the
// antialiased triangle filter over the whole image.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "image/image.h"
#include "test_image_util.h"

using namespace sluice;
using namespace sluice_test;

namespace {

PreprocessSpec shorter(int s, int crop) {
  PreprocessSpec p;
  p.mode = PreprocessSpec::Resize::ShorterSide;
  p.resize_short = s;
  p.crop_h = p.crop_w = p.out_h = p.out_w = crop;
  return p;
}

// The resized image by definition: every output pixel a normalised triangle-weighted sum over all
// input pixels, the triangle's half-width max(1, in/out) input pixels, in double.
std::vector<double> reference_resize(const Bytes& rgb, int h, int w, int rh, int rw) {
  auto weights = [](int in, int out, int o) {
    const double scale = static_cast<double>(in) / out, support = std::max(1.0, scale);
    const double center = (o + 0.5) * scale;
    std::vector<double> wt(static_cast<std::size_t>(in));
    double total = 0;
    for (int j = 0; j < in; ++j) total += wt[static_cast<std::size_t>(j)] = std::max(0.0, 1.0 - std::fabs((j + 0.5 - center) / support));
    for (double& v : wt) v /= total;
    return wt;
  };
  std::vector<double> out(static_cast<std::size_t>(rh) * rw * 3);
  for (int y = 0; y < rh; ++y) {
    const auto wy = weights(h, rh, y);
    for (int x = 0; x < rw; ++x) {
      const auto wx = weights(w, rw, x);
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (int j = 0; j < h; ++j)
          if (wy[static_cast<std::size_t>(j)] != 0)
            for (int i = 0; i < w; ++i)
              acc += wy[static_cast<std::size_t>(j)] * wx[static_cast<std::size_t>(i)] * rgb[(static_cast<std::size_t>(j) * w + i) * 3 + c];
        out[(static_cast<std::size_t>(y) * rw + x) * 3 + c] = acc;
      }
    }
  }
  return out;
}

// preprocess_rgb against the reference, cropped/padded per the plan: every value the reference
// rounded half up, but for exact ties.
void expect_matches_reference(const Bytes& rgb, const ResizePlan& p) {
  Bytes out(static_cast<std::size_t>(3) * p.out_h * p.out_w, 0xEE);
  preprocess_rgb(rgb.data(), p, out.data());
  const auto ref = reference_resize(rgb, p.in_h, p.in_w, p.resized_h, p.resized_w);
  int off_by_one = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < p.out_h; ++y)
      for (int x = 0; x < p.out_w; ++x) {
        const int ry = y + p.offset_y, rx = x + p.offset_x;
        const int got = out[(static_cast<std::size_t>(c) * p.out_h + y) * p.out_w + x];
        if (ry < 0 || rx < 0 || ry >= p.resized_h || rx >= p.resized_w) {
          ASSERT_EQ(got, p.pad[static_cast<std::size_t>(c)]) << "pad at c" << c << " " << y << "," << x;
          continue;
        }
        const double want = ref[(static_cast<std::size_t>(ry) * p.resized_w + rx) * 3 + c];
        ASSERT_LE(std::fabs(got - want), 0.5 + 1e-3) << "at c" << c << " " << y << "," << x << ": " << got << " vs " << want;
        // float32 and double may round a tie (x.5 up to rounding error) differently; nothing else.
        const bool tie = std::fabs(want - std::floor(want) - 0.5) < 1e-3;
        if (!tie) off_by_one += got != static_cast<int>(std::floor(want + 0.5));
      }
  EXPECT_EQ(off_by_one, 0);
}

Bytes random_image(int h, int w, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(static_cast<std::size_t>(h) * w * 3);
  for (auto& v : b) v = static_cast<uint8_t>(rng() & 0xFF);
  return b;
}

}  // namespace

TEST(ImageTaps, IdentityWhenSizesMatch) {
  const AxisTaps t = axis_taps(5, 5);
  for (int o = 0; o < 5; ++o) {
    EXPECT_EQ(t.first[static_cast<std::size_t>(o)], o);
    EXPECT_FLOAT_EQ(t.weight[static_cast<std::size_t>(o * t.max_taps)], 1.f);
    for (int k = 1; k < t.count[static_cast<std::size_t>(o)]; ++k)
      EXPECT_FLOAT_EQ(t.weight[static_cast<std::size_t>(o * t.max_taps + k)], 0.f);
  }
}

TEST(ImageTaps, HalvingWidensTheTriangle) {
  // in 8 -> out 4: centre 2o+1, half-width 2 input pixels.
  const AxisTaps t = axis_taps(8, 4);
  EXPECT_EQ(t.first[0], 0);
  ASSERT_EQ(t.count[0], 3);  // the edge: pixels 0..2, weights .75 .75 .25 normalised
  EXPECT_NEAR(t.weight[0], 3 / 7.0, 1e-6);
  EXPECT_NEAR(t.weight[1], 3 / 7.0, 1e-6);
  EXPECT_NEAR(t.weight[2], 1 / 7.0, 1e-6);
  const std::size_t m = static_cast<std::size_t>(t.max_taps);
  EXPECT_EQ(t.first[1], 1);
  ASSERT_EQ(t.count[1], 4);  // inside: .125 .375 .375 .125
  EXPECT_NEAR(t.weight[m + 0], 0.125, 1e-6);
  EXPECT_NEAR(t.weight[m + 1], 0.375, 1e-6);
  EXPECT_NEAR(t.weight[m + 2], 0.375, 1e-6);
  EXPECT_NEAR(t.weight[m + 3], 0.125, 1e-6);
}

TEST(ImageTaps, DoublingIsBilinearWithHalfPixelCentres) {
  const AxisTaps t = axis_taps(4, 8);
  // Output 0 sits at input 0.25 - 0.5 < 0: clamps to pixel 0; output 1 at 0.25: .75 p0 + .25 p1.
  EXPECT_EQ(t.first[0], 0);
  EXPECT_NEAR(t.weight[0], 1.0, 1e-6);
  const std::size_t m = static_cast<std::size_t>(t.max_taps);
  EXPECT_EQ(t.first[1], 0);
  EXPECT_NEAR(t.weight[m], 0.75, 1e-6);
  EXPECT_NEAR(t.weight[m + 1], 0.25, 1e-6);
}

TEST(ImageTaps, WeightsAreNormalisedAndInside) {
  for (int in : {1, 2, 3, 7, 64, 375, 500, 1000})
    for (int out : {1, 2, 5, 224, 256, 341, 640}) {
      const AxisTaps t = axis_taps(in, out);
      ASSERT_EQ(t.first.size(), static_cast<std::size_t>(out));
      for (int o = 0; o < out; ++o) {
        const int f = t.first[static_cast<std::size_t>(o)], n = t.count[static_cast<std::size_t>(o)];
        ASSERT_GE(f, 0);
        ASSERT_GE(n, 1);
        ASSERT_LE(n, t.max_taps);
        ASSERT_LE(f + n, in);
        double s = 0;
        for (int k = 0; k < n; ++k) {
          const float w = t.weight[static_cast<std::size_t>(o * t.max_taps + k)];
          ASSERT_GE(w, 0.f);
          s += w;
        }
        ASSERT_NEAR(s, 1.0, 1e-5) << in << " -> " << out << " at " << o;
      }
    }
}

TEST(ImagePlan, ShorterSideThenCenterCropLikeTorchvision) {
  // 500x375 landscape (w x h): Resize(256) -> 256 x 341, CenterCrop(224): top 16, left
  // round(58.5) = 58 (Python rounds halves to even).
  ResizePlan p = plan_resize(375, 500, shorter(256, 224));
  EXPECT_EQ(p.resized_h, 256);
  EXPECT_EQ(p.resized_w, 341);
  EXPECT_EQ(p.offset_y, 16);
  EXPECT_EQ(p.offset_x, 58);
  // Portrait: the same, transposed.
  p = plan_resize(500, 375, shorter(256, 224));
  EXPECT_EQ(p.resized_h, 341);
  EXPECT_EQ(p.resized_w, 256);
  EXPECT_EQ(p.offset_y, 58);
  EXPECT_EQ(p.offset_x, 16);
  // 333 x 500: the long side 256 * 500 / 333 = 384.38 -> 384; (384 - 224) / 2 = 80.
  p = plan_resize(333, 500, shorter(256, 224));
  EXPECT_EQ(p.resized_w, 384);
  EXPECT_EQ(p.offset_x, 80);
  // round(17.5) = 18: a half rounds up to the even neighbour too.
  p = plan_resize(256, 259, shorter(256, 224));
  EXPECT_EQ(p.resized_w, 259);
  EXPECT_EQ(p.offset_x, 18);
}

TEST(ImagePlan, CropLargerThanTheImagePads) {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::None;
  s.crop_h = s.out_h = 224;
  s.crop_w = s.out_w = 100;
  const ResizePlan p = plan_resize(101, 300, s);
  EXPECT_EQ(p.resized_h, 101);
  EXPECT_EQ(p.offset_y, -61);  // (224 - 101) / 2 rounded down above
  EXPECT_EQ(p.offset_x, 100);
}

TEST(ImagePlan, LetterboxKeepsTheAspect) {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::Letterbox;
  s.out_h = s.out_w = 640;
  s.pad = {114, 114, 114};
  ResizePlan p = plan_resize(375, 500, s);
  EXPECT_EQ(p.resized_w, 640);
  EXPECT_EQ(p.resized_h, 480);
  EXPECT_EQ(p.offset_y, -80);
  EXPECT_EQ(p.offset_x, 0);
  EXPECT_EQ(p.pad, (PadColour{114, 114, 114}));
  p = plan_resize(3, 1000, s);  // a thin strip: 640 x 1.92 -> 2 rows
  EXPECT_EQ(p.resized_h, 2);
  EXPECT_EQ(p.offset_y, -319);
}

TEST(ImagePlan, ExactResizeThenCrop) {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::Exact;
  s.resize_h = 256;
  s.resize_w = 300;
  s.crop_h = s.out_h = 224;
  s.crop_w = s.out_w = 224;
  const ResizePlan p = plan_resize(1000, 17, s);
  EXPECT_EQ(p.resized_h, 256);
  EXPECT_EQ(p.resized_w, 300);
  EXPECT_EQ(p.offset_y, 16);
  EXPECT_EQ(p.offset_x, 38);
}

TEST(ImageResize, IdentityPlanCopiesToPlanar) {
  const int h = 7, w = 9;
  const Bytes rgb = random_image(h, w, 1);
  PreprocessSpec s;
  s.out_h = h;
  s.out_w = w;
  Bytes out(static_cast<std::size_t>(3 * h * w));
  preprocess_rgb(rgb.data(), plan_resize(h, w, s), out.data());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < h * w; ++i) ASSERT_EQ(out[static_cast<std::size_t>(c * h * w + i)], rgb[static_cast<std::size_t>(3 * i + c)]);
}

TEST(ImageResize, ConstantImageStaysConstant) {
  const int h = 91, w = 67;
  Bytes rgb(static_cast<std::size_t>(h * w * 3));
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i % 3 == 0 ? 17 : i % 3 == 1 ? 128 : 250);
  PreprocessSpec s = shorter(40, 32);
  Bytes out(3 * 32 * 32);
  preprocess_rgb(rgb.data(), plan_resize(h, w, s), out.data());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 32 * 32; ++i) ASSERT_EQ(out[static_cast<std::size_t>(c * 32 * 32 + i)], c == 0 ? 17 : c == 1 ? 128 : 250);
}

TEST(ImageResize, MatchesTheFilterEvaluatedDirectly) {
  struct Case { int h, w; PreprocessSpec spec; };
  std::vector<Case> cases;
  cases.push_back({75, 100, shorter(51, 45)});            // downscale, crop
  cases.push_back({100, 75, shorter(51, 45)});            // portrait
  cases.push_back({20, 31, shorter(64, 56)});             // upscale
  cases.push_back({40, 40, shorter(30, 36)});             // crop larger than the resized image: pads
  PreprocessSpec exact;
  exact.out_h = 33;
  exact.out_w = 90;                                       // down in one axis, up in the other
  cases.push_back({61, 47, exact});
  PreprocessSpec box;
  box.mode = PreprocessSpec::Resize::Letterbox;
  box.out_h = box.out_w = 48;
  box.pad = {114, 20, 250};
  cases.push_back({37, 80, box});
  cases.push_back({80, 37, box});
  PreprocessSpec detr;                                    // top left, padded bottom and right
  detr.mode = PreprocessSpec::Resize::ShortestEdge;
  detr.resize_short = 40;
  detr.max_size = 64;
  detr.out_h = detr.out_w = 64;
  detr.pad = {124, 116, 104};
  cases.push_back({75, 100, detr});
  cases.push_back({100, 30, detr});                       // capped by the longest edge
  unsigned seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.h << "x" << c.w << " -> " << c.spec.out_h << "x" << c.spec.out_w);
    // Random pixels stress the arithmetic; a smooth picture is what photos look like.
    expect_matches_reference(random_image(c.h, c.w, seed++), plan_resize(c.h, c.w, c.spec));
    expect_matches_reference(test_picture(c.h, c.w), plan_resize(c.h, c.w, c.spec));
  }
}

namespace {

std::pair<int, int> shortest(int h, int w, int n, int m, int multiple = 0) {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::ShortestEdge;
  s.resize_short = n;
  s.max_size = m;
  s.size_multiple = multiple;
  int oh = 0, ow = 0;
  shortest_edge_size(h, w, s, &oh, &ow);
  return {oh, ow};
}

}  // namespace

// transformers' get_size_with_aspect_ratio worked by hand (DETR: shortest_edge 800, longest_edge 1333).
TEST(ImagePlan, ShortestEdgeFollowsDetrsProcessor) {
  using P = std::pair<int, int>;
  EXPECT_EQ(shortest(480, 640, 800, 1333), P(800, 1066));   // int(800 * 640 / 480)
  EXPECT_EQ(shortest(640, 480, 800, 1333), P(1066, 800));
  EXPECT_EQ(shortest(800, 1000, 800, 1333), P(800, 1000));  // already there: kept
  // 2000 / 500 * 800 passes 1333: the shorter side is round(1333 * 500 / 2000 = 333.25), the longer
  // int(333.25 * 2000 / 500).
  EXPECT_EQ(shortest(500, 2000, 800, 1333), P(333, 1333));
  // 1333 * 1000 / 2000 = 666.5 rounds to even (Python's round), not up.
  EXPECT_EQ(shortest(1000, 2000, 800, 1333), P(666, 1333));
  // round(1333 * 600 / 1334) = 600 is the width already: DETR keeps the image, 1334 rows and all.
  EXPECT_EQ(shortest(1334, 600, 800, 1333), P(1334, 600));
  EXPECT_EQ(shortest(300, 7000, 800, 0), P(800, 18666));    // no longest edge
  // YOLOS: the same rule, the width tested first, then multiples of 16.
  EXPECT_EQ(shortest(480, 640, 512, 1333, 16), P(512, 672));
  EXPECT_EQ(shortest(500, 2000, 800, 1333, 16), P(320, 1328));
  EXPECT_EQ(shortest(1334, 600, 800, 1333, 16), P(1328, 592));
  EXPECT_EQ(shortest(1, 4000, 800, 1333, 16), P(1, 1328));   // never 0
}

TEST(ImagePlan, ShortestEdgeSitsTopLeftAndTooLargeIsAMisfit) {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::ShortestEdge;
  s.resize_short = 800;
  s.max_size = 1333;
  s.out_h = 800;
  s.out_w = 1066;  // a model exported at a 4:3 landscape photo's size
  const ResizePlan p = plan_resize(480, 640, s);
  EXPECT_EQ(p.resized_h, 800);
  EXPECT_EQ(p.resized_w, 1066);
  EXPECT_EQ(p.offset_y, 0);
  EXPECT_EQ(p.offset_x, 0);
  EXPECT_EQ(resize_misfit(480, 640, s), "");
  EXPECT_NE(resize_misfit(600, 900, s), "");  // 800 x 1200 does not fit
  const std::string why = resize_misfit(640, 480, s);
  EXPECT_NE(why.find("1066x800, larger than the model's input 800x1066"), std::string::npos) << why;
  s.mode = PreprocessSpec::Resize::ShorterSide;
  EXPECT_EQ(resize_misfit(640, 480, s), "");  // other modes crop
}
