#pragma once
// Segmentation masks as PNG files: the class map of one sample, its nearest-neighbour resize back to
// the original image size, and the PNG encoding (libspng).
//
// Palette: masks of at most 256 classes are 8-bit palette PNGs whose pixel values are the class
// indices (PIL opens them in mode "P"; np.array(img) gives the classes).  The colours are the PASCAL
// VOC colour map: the bits of the class index are dealt out, lowest first, to the high bits of red,
// green and blue (class 0 black, 1 (128,0,0), 2 (0,128,0), 3 (128,128,0), 4 (0,0,128), 5 (128,0,128),
// 6 (0,128,128), 7 (128,128,128), 8 (64,0,0), ..., 255 (224,224,192)), so neighbouring classes differ
// strongly.  More classes: 16-bit grayscale PNGs whose values are the class indices.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sluice {

// One sample's class map.
struct Mask {
  int64_t height = 0, width = 0;
  std::vector<uint32_t> classes;  // row-major [height, width]
};

// Row `row` of `rows`: an argmax output [N, H, W] (uint8 or int32) as is, or logits/softmax
// [N, C, H, W] (any float type) reduced by argmax over C (the first largest wins, as numpy and torch).
Mask mask_of_row(const Tensor& rows, int64_t row);

// PIL's Image.resize(size, Image.NEAREST): output pixel x reads source column
// floor((x + 0.5) * in_w / out_w), with PIL's own floating-point steps, so the result is identical.
Mask resize_nearest(const Mask& m, int64_t height, int64_t width);

// The 256-entry palette described above, as RGB triples.
const std::array<uint8_t, 768>& class_palette();

// The PNG file of a mask: palette PNG when every class is below 256, else 16-bit grayscale; throws
// InputError for a class above 65535.
std::string encode_mask_png(const Mask& m);
// Always a 16-bit grayscale PNG (dense maps quantised to 0..65535); InputError above 65535.
std::string encode_gray16_png(const Mask& m);
// An 8-bit RGB PNG of interleaved pixels (height * width * 3 bytes): detection previews.
std::string encode_rgb_png(int64_t height, int64_t width, const std::vector<uint8_t>& rgb);

}  // namespace sluice
