// Fuzz target: bytes -> parse_image_header, decode_image_rgb (TurboJPEG, libspng) and the CPU
// preprocessing of whatever decodes.  Any input must either be refused with a reason or decode to
// exactly the size its header announced; nothing may crash, hang or read out of bounds (ASan,
// UBSan).  Seeds: fuzz/corpus/image (fuzz/make_image_seeds.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "image/image.h"

using namespace sluice;

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz finding: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Decoding is bounded to keep every run fast: libFuzzer grows sizes in headers easily, and a
// valid 16k x 8k header needs 400 MB of pixels before any bug can show.
constexpr int64_t kMaxFuzzPixels = int64_t{1} << 22;

void preprocess_both_ways(const std::vector<uint8_t>& rgb, int h, int w) {
  PreprocessSpec crop;
  crop.mode = PreprocessSpec::Resize::ShorterSide;
  crop.resize_short = 20;
  crop.crop_h = crop.crop_w = crop.out_h = crop.out_w = 16;
  PreprocessSpec box;
  box.mode = PreprocessSpec::Resize::Letterbox;
  box.out_h = 12;
  box.out_w = 20;
  for (const PreprocessSpec& spec : {crop, box}) {
    std::vector<uint8_t> out(static_cast<std::size_t>(3 * spec.out_h * spec.out_w));
    preprocess_rgb(rgb.data(), plan_resize(h, w, spec), out.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ImageHeader header;
  std::string error;
  if (!parse_image_header(data, size, &header, &error)) {
    if (error.empty()) finding("a refused header without a reason", "");
    return 0;
  }
  if (header.width <= 0 || header.height <= 0 || header.channels < 1 || header.channels > 4)
    finding("an accepted header with impossible values", std::to_string(header.width) + "x" + std::to_string(header.height));
  if (static_cast<int64_t>(header.width) * header.height > kMaxFuzzPixels) return 0;
  std::vector<uint8_t> rgb;
  int h = 0, w = 0;
  error.clear();
  if (!decode_image_rgb(data, size, rgb, &h, &w, &error)) {
    if (error.empty()) finding("a failed decode without a reason", "");
    return 0;
  }
  if (h != header.height || w != header.width || rgb.size() != static_cast<std::size_t>(h) * w * 3)
    finding("decoded size differs from the header", std::to_string(h) + "x" + std::to_string(w));
  preprocess_both_ways(rgb, h, w);
  return 0;
}
