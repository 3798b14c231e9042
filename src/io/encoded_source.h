#pragma once
// Internal to io/: what the encoded sources share (file_source.cpp: folders, globs and lists;
// tar_source.cpp: tar shards).  Each sample is one byte range of one file; the base class holds the
// keys and sizes, sizes the in-slots from the largest samples, packs read_encoded()'s output and
// computes the fingerprint.  A subclass only says where sample i's bytes are and reads them.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/source.h"
#include "io/source_util.h"

namespace sluice {

class EncodedSource : public Source {
 public:
  bool encoded() const override { return true; }
  const Shape& sample_shape() const override { return no_shape_; }
  DType dtype() const override { return DType::U8; }
  void read(int64_t, int64_t, void*) override;  // throws: encoded sources are read with read_encoded

  int64_t size() const override { return static_cast<int64_t>(sizes_.size()); }
  std::string key(int64_t i) const override { return std::string(keys_[static_cast<std::size_t>(i)]); }
  std::size_t key_bytes() const override { return keys_.max_bytes(); }
  std::size_t max_encoded_bytes(int64_t count) const override;
  void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) override;
  // kind, root, count, a hash of every key and size (plus extra_identity()), a hash of the bytes of
  // the first, middle and last sample, and a hash of every file's modification time (mtimes_):
  // changes when the list or any file does; reads 3 samples.
  std::string fingerprint() const override;

 protected:
  // Reads samples [first, first + count) to dst + out[k].offset (offsets already set, room for
  // sizes_[i] bytes each); sets out[k].error (and size 0) for a sample it cannot read, which must
  // not affect the others.  Thread-safe.
  virtual void read_samples(int64_t first, int64_t count, uint8_t* dst, EncodedSample* out) const = 0;
  // Folded into the fingerprint's list hash (e.g. the tar shards' names and sizes).
  virtual void extra_identity(Fnv64&) const {}
  // Reads the first `n` bytes (n <= sizes_[i]) of sample i; "" or why not.
  virtual std::string read_head(int64_t i, uint8_t* dst, std::size_t n) const = 0;
  // Call once keys_ and sizes_ are complete.  Samples too large to be an image file the decoders
  // take, and large ones whose first bytes are no JPEG or PNG, are bad samples from here on: never
  // read, and no room in the in-slots (one such file must not cost its size in memory).
  void finish_open();

  std::string kind_, root_;            // for describe() and the fingerprint
  KeyList keys_;
  std::vector<uint64_t> sizes_;        // bytes of each sample when the source was opened
  std::vector<uint64_t> largest_sum_;  // [k]: the sum of the k largest sizes (rejected samples: 0)
  std::vector<std::pair<std::size_t, std::string>> rejected_;  // (sample, why), sorted; found at open
  // The files' modification times when the source opened, hashed (mtime_entry, summed: the stats
  // run on several threads, in any order); `mtimes_known_` once the subclass set it.
  uint64_t mtimes_ = 0;
  bool mtimes_known_ = false;
  // One file's term of mtimes_: which file (its sample or shard number) and its mtime.
  static uint64_t mtime_entry(uint64_t which, int64_t mtime_ns);

 private:
  const std::string* rejection(int64_t i) const;  // why sample i was rejected at open, or nullptr
  Shape no_shape_;
};

}  // namespace sluice
