#pragma once
// Images as model input: what the file is (header parsing, no decoding), decoding on the CPU, and
// the geometry and arithmetic of preprocessing (resize, center crop, letterbox) shared by the CPU
// path (image/preprocess.cpp) and the CUDA kernels (image/cuda/), so both compute the same thing.
//
// Preprocessing semantics (torchvision.transforms.v2 on uint8 tensors, antialias=True):
//  - resize (--interpolation): a separable filter whose support grows with the downscale factor
//    (antialiasing), half-pixel centres.  bilinear (the default): a triangle, computed in float32,
//    the horizontal pass then the vertical pass, rounded to uint8 once at the end, as
//    torchvision's antialiased bilinear.  bicubic: the cubic of a = -0.5 over two pixels each side
//    (times the downscale factor), each pass rounded half up and clamped to [0, 255], as PIL's
//    Image.resize(BICUBIC) (which Hugging Face's image processors call) computes it in fixed
//    point.  nearest: the input pixel under the output pixel's centre, floor((o + 0.5) * in / out)
//    summed up as PIL's NEAREST sums it (so a centre on a pixel boundary lands where PIL's lands).
//  - shorter-side resize S: the shorter side becomes S, the longer floor(S * long / short).
//  - center crop HxW: top = round((h - H) / 2), left = round((w - W) / 2) with Python's round
//    (halves to even), as torchvision computes them; a crop larger than the image is padded with
//    pad_value (0 by default, as torchvision pads), (H - h) / 2 rows above (rounded down).
//  - letterbox HxW: scale by min(H / h, W / w), the other side floor(side * scale + 0.5), centre
//    ((H - h') / 2 above, (W - w') / 2 left, rounded down), pad with pad_value.
//  The output is uint8 RGB, planar [3, H, W] (what the model's uint8 input takes; scale, mean and
//  std run in the graph).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

enum class ImageFormat { Unknown, Jpeg, Png };
const char* image_format_name(ImageFormat f);

struct ImageHeader {
  ImageFormat format = ImageFormat::Unknown;
  int width = 0, height = 0;
  int channels = 0;          // as stored: 1 grey, 2 grey+alpha, 3 RGB/YCbCr, 4 RGBA/CMYK/YCCK
  bool progressive = false;  // JPEG: progressive (or other non-baseline) coding
  bool cmyk = false;         // JPEG: Adobe CMYK/YCCK
  bool gpu_decodable = false;  // a JPEG the GPU decoders take: baseline/extended Huffman, 1 or 3 channels, 8-bit
};

// Reads only the header.  Returns false with `error` set (one line naming what is wrong: "not a
// JPEG or PNG file", "truncated JPEG: no end-of-image marker", "empty file") for anything that
// cannot be decoded; a truncated file is caught here when its end is missing.
bool parse_image_header(const uint8_t* data, std::size_t size, ImageHeader* header, std::string* error);

// Decodes a whole image on the CPU to interleaved 8-bit RGB (height * width * 3 bytes; grey,
// alpha, CMYK and 16-bit converted).  Returns false with `error` set on any failure.
bool decode_image_rgb(const uint8_t* data, std::size_t size, std::vector<uint8_t>& rgb, int* height, int* width,
                      std::string* error);

// What the job asks for (--resize, --center-crop, --letterbox); out_h x out_w is the model's input.
enum class Interpolation { Nearest, Bilinear, Bicubic };
const char* interpolation_name(Interpolation f);

struct PreprocessSpec {
  enum class Resize { Exact, ShorterSide, Letterbox, None };
  Interpolation interpolation = Interpolation::Bilinear;
  Resize mode = Resize::Exact;   // Exact: to resize_h x resize_w (aspect not kept); None: as is
  int resize_short = 0;          // ShorterSide: S
  int resize_h = 0, resize_w = 0;  // Exact: the resized size (0: out_h x out_w)
  int crop_h = 0, crop_w = 0;    // Exact, ShorterSide, None: center crop (0: none; then the resized size must equal out)
  int out_h = 0, out_w = 0;
  uint8_t pad_value = 0;         // Letterbox padding (and crops larger than the image)
};

// Where one image lands: it is resized to resized_h x resized_w, and output pixel (y, x) takes the
// resized pixel (y + offset_y, x + offset_x); pixels outside the resized image get pad_value.
// (offsets are negative when the output is larger than the resized image: letterbox, big crops.)
struct ResizePlan {
  int in_h = 0, in_w = 0;
  int resized_h = 0, resized_w = 0;
  int offset_y = 0, offset_x = 0;
  int out_h = 0, out_w = 0;
  uint8_t pad_value = 0;
  Interpolation interpolation = Interpolation::Bilinear;
};
ResizePlan plan_resize(int in_h, int in_w, const PreprocessSpec& spec);

// The filter taps of one axis: output coordinate o (of `out` pixels over an input of `in`) reads
// input pixels [first[o], first[o] + count[o]) with weights weight[o * max_taps + k] (summing to 1).
struct AxisTaps {
  int max_taps = 0;
  std::vector<int> first, count;
  std::vector<float> weight;
};
AxisTaps axis_taps(int in, int out, Interpolation filter = Interpolation::Bilinear);
// Whether a filter's passes are each rounded to uint8 (bicubic, as PIL; bilinear rounds once).
inline bool rounds_each_pass(Interpolation f) { return f == Interpolation::Bicubic; }

// RGB interleaved (h x w x 3) to planar uint8 [3, out_h, out_w] following `plan`.
void preprocess_rgb(const uint8_t* rgb, const ResizePlan& plan, uint8_t* out_chw);

// The same, reusing `scratch` (filter taps, the horizontal pass) so that a reader thread's steady
// state allocates nothing once its buffers have grown to the largest image.
struct ResizeScratch {
  AxisTaps rows, cols;
  std::vector<float> horizontal;
};
void preprocess_rgb(const uint8_t* rgb, const ResizePlan& plan, uint8_t* out_chw, ResizeScratch& scratch);

}  // namespace sluice
