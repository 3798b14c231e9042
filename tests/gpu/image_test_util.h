#pragma once
// Test images for the GPU image tests, made in the test itself (seeded): natural-looking RGB
// pixels (smooth shapes and gradients, mild noise: what JPEG is for), encoded with TurboJPEG in
// every coding the tests need (baseline at each subsampling, grey, progressive, CMYK) or as PNG
// (zlib, written here), and a Source that serves files from memory.
#include <cstdint>
#include <string>
#include <vector>

#include "io/source.h"

namespace sluice::imagetest {

// h x w x 3 interleaved RGB.
std::vector<uint8_t> natural_rgb(int h, int w, uint32_t seed);

enum class Jpeg { S444, S422, S420, S440, S411, Grey, Progressive420, Cmyk };
const char* jpeg_name(Jpeg kind);
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int h, int w, Jpeg kind, int quality = 90);
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, int h, int w);

std::vector<uint8_t> read_file(const std::string& path);

// Files from memory.  A sample whose `error` is set reads as unreadable (EncodedSample::error).
class MemorySource final : public Source {
 public:
  struct File {
    std::string key;
    std::vector<uint8_t> bytes;
    std::string error;
  };
  explicit MemorySource(std::vector<File> files) : files_(std::move(files)) {}
  std::string describe() const override { return "memory files"; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  const Shape& sample_shape() const override { return shape_; }
  DType dtype() const override { return DType::U8; }
  void read(int64_t, int64_t, void*) override;
  bool encoded() const override { return true; }
  std::size_t max_encoded_bytes(int64_t count) const override;
  void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) override;
  std::string key(int64_t i) const override { return files_[static_cast<std::size_t>(i)].key; }
  std::size_t key_bytes() const override;
  const File& file(int64_t i) const { return files_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<File> files_;
  Shape shape_;
};

// |a - b| over two equal-sized byte arrays.
struct DiffStats {
  int max = 0;
  double mean = 0;
  double over = 0;   // fraction of values differing by more than the threshold given
};
DiffStats diff_stats(const uint8_t* a, const uint8_t* b, std::size_t n, int threshold);

}  // namespace sluice::imagetest
