// Where an image lands in the model's input (core/image_geometry.h): the sizes of each resize
// mode, the center crop's offsets and the letterbox's placement.
#include "core/image_geometry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace sluice {

namespace {

// Python's round(n / 2) for an integer n >= 0: halves go to the even neighbour (torchvision's
// center crop uses it for the crop's top-left corner).
int half_to_even(int n) {
  const int q = n / 2;
  return (n % 2 == 0 || q % 2 == 0) ? q : q + 1;
}

// Where a crop of `crop` pixels starts in an axis of `size` pixels (negative: padded before).
int crop_offset(int size, int crop) { return crop <= size ? half_to_even(size - crop) : -((crop - size) / 2); }

}  // namespace

void shortest_edge_size(int in_h, int in_w, const PreprocessSpec& s, int* out_h, int* out_w) {
  // Python's floats are doubles, and every operation below is the one transformers writes, in its
  // order, so the sizes agree to the pixel (Python's round() is std::nearbyint's default mode).
  const double h = in_h, w = in_w;
  int size = s.resize_short;
  double raw = 0;
  bool capped = false;
  if (s.max_size > 0) {
    const double shorter = std::min(h, w), longer = std::max(h, w);
    if (longer / shorter * size > s.max_size) {
      raw = s.max_size * shorter / longer;
      size = static_cast<int>(std::nearbyint(raw));
      capped = true;
    }
  }
  // The longer side over the shorter, scaled by the (unrounded, when capped) shorter side.
  const auto scaled = [&](double a, double b) {
    return static_cast<int>(capped ? raw * a / b : static_cast<double>(size) * a / b);
  };
  const bool keeps = (in_h <= in_w && in_h == size) || (in_w <= in_h && in_w == size);
  int oh = in_h, ow = in_w;
  if (s.size_multiple > 1) {
    // YOLOS tests a portrait image first, then the one that keeps its size.
    if (in_w < in_h) {
      ow = size;
      oh = scaled(h, w);
    } else if (!keeps) {
      oh = size;
      ow = scaled(w, h);
    }
    oh -= oh % s.size_multiple;
    ow -= ow % s.size_multiple;
  } else if (!keeps) {
    if (in_w < in_h) {
      ow = size;
      oh = scaled(h, w);
    } else {
      oh = size;
      ow = scaled(w, h);
    }
  }
  *out_h = std::max(oh, 1);
  *out_w = std::max(ow, 1);
}

std::string resize_misfit(int in_h, int in_w, const PreprocessSpec& s) {
  if (s.mode != PreprocessSpec::Resize::ShortestEdge) return "";
  int h = 0, w = 0;
  shortest_edge_size(in_h, in_w, s, &h, &w);
  if (h <= s.out_h && w <= s.out_w) return "";
  return "its size by --resize-shortest " + std::to_string(s.resize_short) +
         (s.max_size > 0 ? " --max-size " + std::to_string(s.max_size) : std::string()) + " is " +
         std::to_string(h) + "x" + std::to_string(w) + ", larger than the model's input " + std::to_string(s.out_h) +
         "x" + std::to_string(s.out_w) +
         " (a model with a dynamic height and width is padded to --max-size on both sides)";
}

ResizePlan plan_resize(int in_h, int in_w, const PreprocessSpec& s) {
  ResizePlan p;
  p.in_h = in_h;
  p.in_w = in_w;
  p.out_h = s.out_h;
  p.out_w = s.out_w;
  p.pad = s.pad;
  p.interpolation = s.interpolation;
  const int64_t h = in_h, w = in_w;
  switch (s.mode) {
    case PreprocessSpec::Resize::Exact:
      p.resized_h = s.resize_h > 0 ? s.resize_h : s.out_h;
      p.resized_w = s.resize_w > 0 ? s.resize_w : s.out_w;
      break;
    case PreprocessSpec::Resize::None:
      p.resized_h = in_h;
      p.resized_w = in_w;
      break;
    case PreprocessSpec::Resize::ShorterSide: {
      // Integer arithmetic gives torchvision's int(S * long / short): the float quotient of small
      // integers is never within rounding error of an integer unless it is one.
      const int64_t S = s.resize_short;
      if (h <= w) {
        p.resized_h = static_cast<int>(S);
        p.resized_w = static_cast<int>(S * w / h);
      } else {
        p.resized_w = static_cast<int>(S);
        p.resized_h = static_cast<int>(S * h / w);
      }
      break;
    }
    case PreprocessSpec::Resize::ShortestEdge:
      // Top left, padded bottom and right (an image too large for the output is a bad sample:
      // resize_misfit).
      shortest_edge_size(in_h, in_w, s, &p.resized_h, &p.resized_w);
      return p;
    case PreprocessSpec::Resize::Letterbox: {
      const int64_t H = s.out_h, W = s.out_w;
      // The side that limits the scale fills the output exactly; the other is rounded (half up).
      if (H * w <= W * h) {
        p.resized_h = static_cast<int>(H);
        p.resized_w = static_cast<int>((2 * w * H + h) / (2 * h));
      } else {
        p.resized_w = static_cast<int>(W);
        p.resized_h = static_cast<int>((2 * h * W + w) / (2 * w));
      }
      p.resized_h = std::max(p.resized_h, 1);
      p.resized_w = std::max(p.resized_w, 1);
      p.offset_y = -((s.out_h - p.resized_h) / 2);
      p.offset_x = -((s.out_w - p.resized_w) / 2);
      return p;
    }
  }
  p.resized_h = std::max(p.resized_h, 1);
  p.resized_w = std::max(p.resized_w, 1);
  // Center crop to the output (a crop of the output's size when none was asked for: then the
  // resized image already has that size and the offsets are 0).
  p.offset_y = crop_offset(p.resized_h, s.crop_h > 0 ? s.crop_h : s.out_h);
  p.offset_x = crop_offset(p.resized_w, s.crop_w > 0 ? s.crop_w : s.out_w);
  return p;
}

const char* interpolation_name(Interpolation f) {
  switch (f) {
    case Interpolation::Nearest: return "nearest";
    case Interpolation::Bicubic: return "bicubic";
    case Interpolation::Bilinear: break;
  }
  return "bilinear";
}

}  // namespace sluice
