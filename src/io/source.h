#pragma once
// Where samples come from.  A source is read by several reader threads at once.
//
// Two kinds (docs/architecture.md, "Inputs"):
//  - tensor sources (synthetic, HDF5, .npy): every sample is a fixed-shape array; read() writes
//    whole samples [first, first + count) in row-major order.
//  - encoded sources (image folders, globs, path lists, tar shards): every sample is a file's
//    bytes; read_encoded() copies them one after another into a byte area and an image decoder
//    (image/, pipeline/batch_input.h) turns them into the model's input.
// Every sample has a key (the path relative to the input root, a tar member's stem, an entry of
// an HDF5 key dataset, or the decimal index), stored in the rank files beside the sample index.
#include <cstdint>
#include <memory>
#include <string>

#include "model/dtype.h"

namespace sluice {

// Where read_encoded() put one sample.
struct EncodedSample {
  std::size_t offset = 0;  // into the destination area
  std::size_t size = 0;    // bytes (0 when `error` is set)
  std::string error;       // non-empty: the sample could not be read (vanished, unreadable, ...)
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string describe() const = 0;
  virtual int64_t size() const = 0;               // N samples

  // ---- tensor sources -------------------------------------------------------------------------
  virtual const Shape& sample_shape() const = 0;  // one sample, no batch dimension ({} when encoded)
  virtual DType dtype() const = 0;                // F32 or U8 (U8 when encoded)
  std::size_t sample_bytes() const { return static_cast<std::size_t>(shape_numel(sample_shape())) * dtype_size(dtype()); }
  // Thread-safe.  Writes count * sample_bytes() bytes to dst.  Throws InputError when the input
  // changed under the job (a file truncated or replaced).
  virtual void read(int64_t first, int64_t count, void* dst) = 0;

  // ---- encoded sources ------------------------------------------------------------------------
  virtual bool encoded() const { return false; }
  // The most bytes any `count` consecutive samples take together (sizes the in-slots).
  virtual std::size_t max_encoded_bytes(int64_t count) const { return 0; }
  // Thread-safe.  Copies samples [first, first + count) one after another into dst (room for
  // `capacity` bytes, at least max_encoded_bytes(count)); out[k] says where sample first + k is.
  // A sample that cannot be read gets out[k].error and no bytes; the others are unaffected.
  virtual void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) {}

  // ---- every source -----------------------------------------------------------------------------
  // The key of sample i, at most key_bytes() bytes (the rank files store keys NUL-padded to that
  // width).  Default: the decimal index.
  virtual std::string key(int64_t i) const { return std::to_string(i); }
  virtual std::size_t key_bytes() const { return std::to_string(size() > 0 ? size() - 1 : 0).size(); }
  // Identifies the input for --resume: changes when the samples would (another file, another size,
  // other contents of the sampled bytes, another seed or shape).  Cheap: never reads every sample.
  virtual std::string fingerprint() const { return describe(); }
};

// Deterministic pseudo-random samples: sample i depends only on (seed, i), so outputs do not depend
// on which rank or batch computes it.  float32 values in [-1, 1), uint8 values in [0, 255].
std::unique_ptr<Source> make_synthetic_source(int64_t samples, const Shape& sample_shape, DType dtype, uint64_t seed);

// An HDF5 dataset [N, ...] of float32 or uint8, read by hyperslab straight into the slot.  Throws
// InputError for a missing file or dataset, or an unsupported type.
std::unique_ptr<Source> open_hdf5_source(const std::string& path, const std::string& dataset);

}  // namespace sluice
