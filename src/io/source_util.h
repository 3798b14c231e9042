#pragma once
// Internal to io/: small pieces every source uses: compact key storage, the fingerprint hash,
// whole-range pread, the image extension test.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Many short strings in one buffer: a key per sample, so millions of keys cost their bytes and an
// offset each, not a std::string each.
class KeyList {
 public:
  void add(std::string_view key) {
    offsets_.push_back(blob_.size());
    blob_.append(key.data(), key.size());
    if (key.size() > max_bytes_) max_bytes_ = key.size();
  }
  std::size_t size() const { return offsets_.size(); }
  std::string_view operator[](std::size_t i) const {
    const std::size_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : blob_.size();
    return std::string_view(blob_).substr(offsets_[i], end - offsets_[i]);
  }
  std::size_t max_bytes() const { return max_bytes_; }

 private:
  std::string blob_;
  std::vector<std::size_t> offsets_;
  std::size_t max_bytes_ = 0;
};

// 64-bit FNV-1a: a fast, stable hash for fingerprints (change detection, not security).
class Fnv64 {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  // Length first, so that ("ab", "c") and ("a", "bc") differ.
  void text(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }
  std::string hex() const;

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Whether a file name ends in .jpg, .jpeg or .png (any case).
bool is_image_name(std::string_view name);

// Opens `path` for reading without blocking on it (a FIFO or a device would block open() and then
// every read; O_NONBLOCK has no effect on regular files) and checks, on the open file, that it is a
// regular file: no window between a stat and the open for the path to be replaced.  Returns the
// descriptor (and the file's size in *size), or -1 with why in *error ("is a FIFO", strerror
// for a failed open).
int open_regular(const std::string& path, uint64_t* size, std::string* error);

// The compression whose magic bytes `head` starts with ("gzip", "zstd", "xz", "bzip2"), or nullptr;
// and the error text for a tar shard compressed so (what to run to decompress it).
const char* compression_magic(const unsigned char* head, std::size_t n);
std::string compressed_tar_text(const char* compression);

// Reads `size` bytes at `offset` of the open file `fd` into dst; "" or why it could not (a short
// read names how much was there).
std::string pread_exact(int fd, uint8_t* dst, uint64_t size, uint64_t offset);

}  // namespace sluice
