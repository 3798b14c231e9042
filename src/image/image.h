#pragma once
// Images as model input: what the file is (header parsing, no decoding), decoding on the CPU, and
// the arithmetic of preprocessing (the resize filters) shared by the CPU path (image/preprocess.cpp)
// and the CUDA kernels (image/cuda/), so both compute the same thing.  Where an image lands (resize,
// center crop, letterbox, shortest edge: PreprocessSpec, plan_resize) is core/image_geometry.h,
// which `sluice export` shares to undo it.
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
//  - the geometry (resize sizes, crop, letterbox, shortest edge, padding): core/image_geometry.h.
//  The output is uint8 RGB, planar [3, H, W] (what the model's uint8 input takes; scale, mean and
//  std run in the graph).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/image_geometry.h"

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
