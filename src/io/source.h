#pragma once
// Where samples come from.  A source is read by several reader threads at once, each filling a
// pinned input slot with whole samples [first, first + count) in row-major order.
#include <cstdint>
#include <memory>
#include <string>

#include "model/dtype.h"

namespace sluice {

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string describe() const = 0;
  virtual int64_t size() const = 0;               // N samples
  virtual const Shape& sample_shape() const = 0;  // one sample, no batch dimension
  virtual DType dtype() const = 0;                // F32 or U8
  std::size_t sample_bytes() const { return static_cast<std::size_t>(shape_numel(sample_shape())) * dtype_size(dtype()); }
  // Thread-safe.  Writes count * sample_bytes() bytes to dst.
  virtual void read(int64_t first, int64_t count, void* dst) = 0;
};

// Deterministic pseudo-random samples: sample i depends only on (seed, i), so outputs do not depend
// on which rank or batch computes it.  float32 values in [-1, 1), uint8 values in [0, 255].
std::unique_ptr<Source> make_synthetic_source(int64_t samples, const Shape& sample_shape, DType dtype, uint64_t seed);

// An HDF5 dataset [N, ...] of float32 or uint8, read by hyperslab straight into the slot.  Throws
// InputError for a missing file or dataset, or an unsupported type.
std::unique_ptr<Source> open_hdf5_source(const std::string& path, const std::string& dataset);

}  // namespace sluice
