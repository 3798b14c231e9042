// The shared half of the encoded sources (io/encoded_source.h): slot sizing, packing, fingerprint.
#include "io/encoded_source.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

#include "core/error.h"

namespace sluice {

namespace {

// Fingerprints hash the whole bytes of their sampled samples up to this size (a tar member could
// be a video); beyond it only the size counts.
constexpr uint64_t kMaxHashedSample = 64ull << 20;

}  // namespace

void EncodedSource::read(int64_t, int64_t, void*) {
  SLUICE_THROW(describe(), " holds encoded files: read them with read_encoded()");
}

void EncodedSource::finish_open() {
  std::vector<uint64_t> sorted = sizes_;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  largest_sum_.assign(sorted.size() + 1, 0);
  for (std::size_t k = 0; k < sorted.size(); ++k) largest_sum_[k + 1] = largest_sum_[k] + sorted[k];
}

std::size_t EncodedSource::max_encoded_bytes(int64_t count) const {
  const std::size_t k = static_cast<std::size_t>(std::clamp<int64_t>(count, 0, size()));
  return static_cast<std::size_t>(largest_sum_.at(k));
}

void EncodedSource::read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity,
                                 EncodedSample* out) {
  SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= size(), describe(), ": samples [", first, ", ",
               first + count, ") outside [0, ", size(), ")");
  std::size_t offset = 0;
  for (int64_t k = 0; k < count; ++k) {
    EncodedSample& s = out[k];
    s.offset = offset;
    s.size = static_cast<std::size_t>(sizes_[static_cast<std::size_t>(first + k)]);
    s.error.clear();
    offset += s.size;
  }
  // The caller sized `dst` with max_encoded_bytes(count), which no `count` samples exceed.
  SLUICE_CHECK(offset <= capacity, describe(), ": samples [", first, ", ", first + count, ") take ", offset,
               " bytes, the area has ", capacity);
  read_samples(first, count, dst, out);
  for (int64_t k = 0; k < count; ++k)
    if (!out[k].error.empty()) out[k].size = 0;
}

std::string EncodedSource::fingerprint() const {
  Fnv64 list;
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    list.text(keys_[i]);
    list.u64(sizes_[i]);
  }
  extra_identity(list);

  Fnv64 bytes;
  const int64_t n = size();
  std::vector<int64_t> picks{0, n / 2, n - 1};
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  std::vector<uint8_t> buf;
  for (int64_t i : picks) {
    const uint64_t sz = sizes_[static_cast<std::size_t>(i)];
    bytes.u64(sz);
    if (sz > kMaxHashedSample) continue;
    buf.resize(static_cast<std::size_t>(sz));
    EncodedSample s;
    s.offset = 0;
    s.size = static_cast<std::size_t>(sz);
    read_samples(i, 1, buf.data(), &s);
    if (s.error.empty()) bytes.bytes(buf.data(), buf.size());
    else bytes.text("unreadable");
  }
  return str(kind_, " ", root_, " samples=", n, " list=", list.hex(), " bytes=", bytes.hex());
}

}  // namespace sluice
