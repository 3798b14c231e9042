// The job's image options (--resize, --center-crop, --letterbox, --resize-shortest, --max-size,
// --size-multiple, --pad-value, --pad-mean, --on-bad-sample) checked on their own, then resolved
// against the model's input [B, 3, H, W] into the PreprocessSpec every rank's image input follows.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "image/image_input.h"

namespace sluice {

namespace {

struct Size2 {
  int h = 0, w = 0;
  bool square_form = false;  // written as one number
};

// "S" or "HxW" (positive, at most 65535: a JPEG's limit).
bool parse_size(const std::string& text, Size2* out) {
  auto number = [](const std::string& s, int* v) {
    if (s.empty() || s.size() > 5) return false;
    for (char c : s)
      if (c < '0' || c > '9') return false;
    *v = std::stoi(s);
    return *v > 0 && *v <= 65535;
  };
  const std::size_t x = text.find_first_of("xX");
  if (x == std::string::npos) {
    out->square_form = true;
    if (!number(text, &out->h)) return false;
    out->w = out->h;
    return true;
  }
  out->square_form = false;
  return number(text.substr(0, x), &out->h) && number(text.substr(x + 1), &out->w);
}

Size2 size_option(const char* flag, const std::string& text) {
  Size2 s;
  if (!parse_size(text, &s))
    throw UsageError(str(flag, " '", text, "': expected a size, S or HxW (e.g. 256 or 224x224)"));
  return s;
}

std::string hw(int h, int w) { return str(h, "x", w); }

// The padding: --pad-value on every channel, or with --pad-mean the pixel value x that
// (x * scale - mean[c]) / std[c] takes to 0, rounded (Hugging Face's processors pad with zeros
// after normalizing: DETR's batches).
PadColour pad_colour(const ImageJobOptions& o) {
  PadColour pad;
  pad.fill(static_cast<uint8_t>(o.pad_value));
  if (!o.pad_mean) return pad;
  for (std::size_t c = 0; c < 3; ++c) {
    const float m = o.mean.empty() ? 0.f : o.mean.size() == 1 ? o.mean[0] : o.mean[std::min(c, o.mean.size() - 1)];
    const double x = o.scale != 0.f ? static_cast<double>(m) / o.scale : 0.0;
    pad[c] = static_cast<uint8_t>(std::clamp<long>(std::lround(x), 0, 255));
  }
  return pad;
}

std::string pad_text(const PadColour& p) {
  if (p[0] == p[1] && p[1] == p[2]) return std::to_string(int{p[0]});
  return str("(", int{p[0]}, ", ", int{p[1]}, ", ", int{p[2]}, ")");
}

}  // namespace

void check_image_options(const ImageJobOptions& o) {
  if (o.on_bad_sample != "skip" && o.on_bad_sample != "fail")
    throw UsageError(str("--on-bad-sample '", o.on_bad_sample, "' is not one of skip, fail"));
  if (o.pad_value < 0 || o.pad_value > 255) throw UsageError(str("--pad-value ", o.pad_value, ": expected 0..255"));
  if (o.interpolation != "nearest" && o.interpolation != "bilinear" && o.interpolation != "bicubic")
    throw UsageError(str("--interpolation '", o.interpolation, "' is not one of nearest, bilinear, bicubic"));
  Size2 resize, crop;
  if (!o.resize.empty()) resize = size_option("--resize", o.resize);
  if (!o.center_crop.empty()) crop = size_option("--center-crop", o.center_crop);
  for (const auto& [flag, v] : {std::pair<const char*, int>{"--resize-shortest", o.resize_shortest},
                                {"--max-size", o.max_size}, {"--size-multiple", o.size_multiple}})
    if (v < 0 || v > 65535) throw UsageError(str(flag, " ", v, ": expected 1..65535 (0: off)"));
  if (o.resize_shortest == 0 && (o.max_size > 0 || o.size_multiple > 0))
    throw UsageError(str(o.max_size > 0 ? "--max-size" : "--size-multiple", " goes with --resize-shortest N: the "
                         "shorter side to N, the longer at most --max-size (DETR's image processors)"),
                     "give --resize-shortest too (e.g. --resize-shortest 800 --max-size 1333)");
  if (o.resize_shortest > 0 && (!o.resize.empty() || !o.center_crop.empty() || o.letterbox))
    throw UsageError(str("--resize-shortest ", o.resize_shortest, " resizes and pads the image itself; it excludes ",
                         !o.resize.empty() ? "--resize" : !o.center_crop.empty() ? "--center-crop" : "--letterbox"),
                     "keep --resize-shortest (DETR-style: aspect kept, padded bottom and right) or the other option");
  if (o.letterbox && !o.center_crop.empty())
    throw UsageError("--letterbox and --center-crop exclude each other: the letterbox keeps the whole image and pads it");
  if (o.letterbox && !o.resize.empty() && resize.square_form)
    throw UsageError(str("--letterbox fits each image into HxW: give --resize HxW (e.g. ", o.resize, "x", o.resize,
                         "), or no --resize for the model's input size"));
  if (!o.letterbox && !o.resize.empty() && resize.square_form && o.center_crop.empty())
    throw UsageError(str("--resize ", o.resize, " sets the shorter side and keeps the aspect ratio, so images of "
                         "other shapes come out in other sizes; add --center-crop (torchvision's Resize(", o.resize,
                         ") + CenterCrop), or give an exact --resize HxW, or --letterbox"));
}

PreprocessSpec resolve_preprocess(const ImageJobOptions& o, const Shape& in, const std::string& model_path) {
  check_image_options(o);
  if (in.size() != 4 || (in[1] != 3 && in[1] >= 0))
    throw InputError(str(model_path, ": image inputs feed the model uint8 [B, 3, H, W] (RGB, channels first), but its "
                         "input has shape ", shape_str(in), " (-1: dynamic)"));
  Size2 resize, crop;
  if (!o.resize.empty()) resize = size_option("--resize", o.resize);
  if (!o.center_crop.empty()) crop = size_option("--center-crop", o.center_crop);

  // The size the options make, if they fix one: the crop's, else an exact resize's.
  const char* from = nullptr;
  Size2 want;
  if (!o.center_crop.empty()) {
    from = "--center-crop";
    want = crop;
  } else if (!o.resize.empty() && !resize.square_form) {
    from = "--resize";
    want = resize;
  }
  const int64_t mh = in[2], mw = in[3];
  if (from && ((mh > 0 && mh != want.h) || (mw > 0 && mw != want.w))) {
    const std::string model_size = hw(mh > 0 ? static_cast<int>(mh) : want.h, mw > 0 ? static_cast<int>(mw) : want.w);
    throw InputError(str(from, " ", from == std::string("--resize") ? o.resize : o.center_crop, " makes ",
                         hw(want.h, want.w), " images but the model ", model_path, " takes ", model_size,
                         " (input ", shape_str(in), "); use ", from, " ", model_size,
                         from == std::string("--center-crop") ? "" : " (or --resize S --center-crop H[xW])"));
  }
  if (o.resize_shortest > 0 && (mh <= 0 || mw <= 0) && o.max_size == 0)
    throw InputError(str("the model ", model_path, " has a dynamic image size (input ", shape_str(in),
                         ", -1: dynamic) and --resize-shortest ", o.resize_shortest,
                         " alone gives images of any length, so no one input size holds them all"),
                     str("add --max-size (e.g. --max-size 1333: each image is padded to that size on both sides), or "
                         "export the model at a fixed input size"));
  if ((mh <= 0 || mw <= 0) && !from && o.resize_shortest == 0)
    throw InputError(str("the model ", model_path, " has a dynamic image size (input ", shape_str(in),
                         ", -1: dynamic); fix it with --center-crop H[xW] or an exact --resize HxW"));

  PreprocessSpec s;
  s.interpolation = o.interpolation == "bicubic"   ? Interpolation::Bicubic
                    : o.interpolation == "nearest" ? Interpolation::Nearest
                                                   : Interpolation::Bilinear;
  if (o.resize_shortest > 0) {
    // A dynamic side is padded to the longest edge every image can reach (down to the multiple).
    want.h = want.w = o.max_size - (o.size_multiple > 1 ? o.max_size % o.size_multiple : 0);
  }
  s.out_h = mh > 0 ? static_cast<int>(mh) : want.h;
  s.out_w = mw > 0 ? static_cast<int>(mw) : want.w;
  s.pad = pad_colour(o);
  if (o.resize_shortest > 0) {
    s.mode = PreprocessSpec::Resize::ShortestEdge;
    s.resize_short = o.resize_shortest;
    s.max_size = o.max_size;
    s.size_multiple = o.size_multiple > 1 ? o.size_multiple : 0;
  } else if (o.letterbox) {
    s.mode = PreprocessSpec::Resize::Letterbox;
  } else if (!o.resize.empty() && resize.square_form) {
    s.mode = PreprocessSpec::Resize::ShorterSide;
    s.resize_short = resize.h;
  } else if (!o.resize.empty()) {
    s.mode = PreprocessSpec::Resize::Exact;
    s.resize_h = resize.h;
    s.resize_w = resize.w;
  } else if (!o.center_crop.empty()) {
    s.mode = PreprocessSpec::Resize::None;
  } else {
    s.mode = PreprocessSpec::Resize::Exact;  // no option: straight to the model's input size
  }
  if (!o.center_crop.empty()) {
    s.crop_h = s.out_h;
    s.crop_w = s.out_w;
  }
  return s;
}

std::string describe_preprocess(const PreprocessSpec& s) {
  std::string r;
  switch (s.mode) {
    case PreprocessSpec::Resize::Letterbox:
      return str("letterbox into ", hw(s.out_h, s.out_w), " (aspect kept, padded with ", pad_text(s.pad), ")");
    case PreprocessSpec::Resize::ShortestEdge: {
      const bool yolos = s.size_multiple > 1;
      return str("resize the shortest edge to ", s.resize_short,
                 s.max_size > 0 ? str(" unless the longest would pass ", s.max_size) : std::string(),
                 yolos ? str(", sides rounded down to multiples of ", s.size_multiple, " (YOLOS's processor)")
                       : std::string(" (DETR's processor)"),
                 ", top left, padded bottom and right with ", pad_text(s.pad), " to ", hw(s.out_h, s.out_w),
                 " (an image that comes out larger is a bad sample) -> uint8 [3, ", s.out_h, ", ", s.out_w, "]");
    }
    case PreprocessSpec::Resize::ShorterSide: r = str("resize the shorter side to ", s.resize_short); break;
    case PreprocessSpec::Resize::Exact:
      r = str("resize to ", hw(s.resize_h > 0 ? s.resize_h : s.out_h, s.resize_w > 0 ? s.resize_w : s.out_w),
              " (aspect not kept)");
      break;
    case PreprocessSpec::Resize::None: r = "no resize"; break;
  }
  if (s.crop_h > 0) r += str(", center crop ", hw(s.crop_h, s.crop_w));
  return r + str(" -> uint8 [3, ", s.out_h, ", ", s.out_w, "]");
}

}  // namespace sluice
