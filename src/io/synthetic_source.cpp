// Synthetic input: deterministic pseudo-random samples that cost a memcpy, not an RNG call, per
// element.  A table of 2^20 random values is drawn once from the seed; sample i is the table read
// from an offset that is a hash of (seed, i), wrapping around.  So sample i depends only on the seed
// and i (never on the rank, batch or thread that reads it), and a reader thread can fill a
// 64x3x512x512 batch at memory speed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/source.h"

namespace sluice {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class SyntheticSource final : public Source {
 public:
  SyntheticSource(int64_t n, Shape shape, DType dtype, uint64_t seed)
      : n_(n), shape_(std::move(shape)), dtype_(dtype), seed_(seed) {
    if (n_ <= 0) throw UsageError(str("--samples must be positive (got ", n_, ")"));
    if (shape_.empty()) throw UsageError("--sample-shape must have at least one dimension");
    for (int64_t d : shape_)
      if (d <= 0) throw UsageError(str("--sample-shape has a non-positive dimension: ", shape_str(shape_)));
    if (dtype_ != DType::F32 && dtype_ != DType::U8)
      throw UsageError(str("synthetic input supports float32 and uint8, not ", dtype_name(dtype_)));
    const std::size_t esize = dtype_size(dtype_);
    table_.resize(kTable * esize);
    uint64_t state = splitmix64(seed_ ^ 0x5EEDull);
    for (std::size_t i = 0; i < kTable; ++i) {
      state = splitmix64(state);
      if (dtype_ == DType::F32) {
        // 24 random bits -> [-1, 1), exactly representable.
        const float v = static_cast<float>(state >> 40) * (1.0f / 8388608.0f) - 1.0f;
        std::memcpy(&table_[i * 4], &v, 4);
      } else {
        table_[i] = static_cast<uint8_t>(state >> 56);
      }
    }
  }

  std::string describe() const override {
    return str("synthetic ", n_, " x ", dtype_name(dtype_), shape_str(shape_), " seed ", seed_);
  }
  int64_t size() const override { return n_; }
  const Shape& sample_shape() const override { return shape_; }
  DType dtype() const override { return dtype_; }

  void read(int64_t first, int64_t count, void* dst) override {
    SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= n_, "read [", first, ", ", first + count,
                 ") outside the ", n_, " synthetic samples");
    const std::size_t esize = dtype_size(dtype_);
    const std::size_t elems = static_cast<std::size_t>(shape_numel(shape_));
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t s = 0; s < count; ++s) {
      const uint64_t index = static_cast<uint64_t>(first + s);
      std::size_t pos = static_cast<std::size_t>(splitmix64(seed_ * 0x100000001B3ull ^ index) % kTable);
      std::size_t done = 0;
      while (done < elems) {
        const std::size_t run = std::min(elems - done, kTable - pos);
        std::memcpy(out + done * esize, table_.data() + pos * esize, run * esize);
        done += run;
        pos = 0;
      }
      out += elems * esize;
    }
  }

 private:
  static constexpr std::size_t kTable = std::size_t{1} << 20;
  int64_t n_;
  Shape shape_;
  DType dtype_;
  uint64_t seed_;
  std::vector<uint8_t> table_;
};

}  // namespace

std::unique_ptr<Source> make_synthetic_source(int64_t samples, const Shape& sample_shape, DType dtype, uint64_t seed) {
  return std::make_unique<SyntheticSource>(samples, sample_shape, dtype, seed);
}

}  // namespace sluice
