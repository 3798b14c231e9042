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

// The decoders refuse images beyond 2^27 pixels (image/header.cpp); the largest file of such an
// image is an uncompressed 16-bit RGBA PNG, 8 bytes a pixel, plus its chunk and filter bytes.  A
// larger file cannot be a sample the decoders take.
constexpr uint64_t kMaxImageFileBytes = (uint64_t{1} << 27) * 8 + (uint64_t{64} << 20);
// Files above this size have their first bytes checked at open: one that is no JPEG or PNG is
// rejected before an in-slot is sized for it.  Below it a file costs little, and checking every
// file's head would add a read per file to the open (100,000-file folders open in a second).
constexpr uint64_t kCheckHeadAbove = uint64_t{16} << 20;

bool image_magic(const uint8_t* h, std::size_t n) {
  return (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) ||
         (n >= 8 && std::memcmp(h, "\x89PNG\r\n\x1a\n", 8) == 0);
}

std::string mib(uint64_t bytes) { return str(bytes >> 20, " MiB"); }

}  // namespace

void EncodedSource::read(int64_t, int64_t, void*) {
  SLUICE_THROW(describe(), " holds encoded files: read them with read_encoded()");
}

void EncodedSource::finish_open() {
  rejected_.clear();
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] > kMaxImageFileBytes) {
      rejected_.emplace_back(i, str(sizes_[i], " bytes (", mib(sizes_[i]), "): larger than any image file the decoders "
                                    "take (", mib(kMaxImageFileBytes), "); not read"));
    } else if (sizes_[i] > kCheckHeadAbove) {
      uint8_t head[8] = {0};
      const std::string e = read_head(static_cast<int64_t>(i), head, sizeof head);
      if (!e.empty()) rejected_.emplace_back(i, e);
      else if (!image_magic(head, sizeof head))
        rejected_.emplace_back(i, str("not a JPEG or PNG file (its first bytes); ", mib(sizes_[i]), " not read"));
    }
  }
  std::vector<uint64_t> sorted = sizes_;
  for (const auto& r : rejected_) sorted[r.first] = 0;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  largest_sum_.assign(sorted.size() + 1, 0);
  for (std::size_t k = 0; k < sorted.size(); ++k) largest_sum_[k + 1] = largest_sum_[k] + sorted[k];
}

std::size_t EncodedSource::max_encoded_bytes(int64_t count) const {
  const std::size_t k = static_cast<std::size_t>(std::clamp<int64_t>(count, 0, size()));
  return static_cast<std::size_t>(largest_sum_.at(k));
}

const std::string* EncodedSource::rejection(int64_t i) const {
  auto it = std::lower_bound(rejected_.begin(), rejected_.end(), static_cast<std::size_t>(i),
                             [](const std::pair<std::size_t, std::string>& r, std::size_t v) { return r.first < v; });
  return it != rejected_.end() && it->first == static_cast<std::size_t>(i) ? &it->second : nullptr;
}

void EncodedSource::read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity,
                                 EncodedSample* out) {
  SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= size(), describe(), ": samples [", first, ", ",
               first + count, ") outside [0, ", size(), ")");
  auto rejected = [this](int64_t i) { return rejection(i); };
  std::size_t offset = 0;
  for (int64_t k = 0; k < count; ++k) {
    EncodedSample& s = out[k];
    s.offset = offset;
    s.size = rejected(first + k) ? 0 : static_cast<std::size_t>(sizes_[static_cast<std::size_t>(first + k)]);
    s.error.clear();
    offset += s.size;
  }
  // The caller sized `dst` with max_encoded_bytes(count), which no `count` samples exceed.
  SLUICE_CHECK(offset <= capacity, describe(), ": samples [", first, ", ", first + count, ") take ", offset,
               " bytes, the area has ", capacity);
  // The samples between rejected ones are read in runs.
  int64_t k = 0;
  while (k < count) {
    if (const std::string* why = rejected(first + k)) {
      out[k].error = str(keys_[static_cast<std::size_t>(first + k)], ": ", *why);
      ++k;
      continue;
    }
    int64_t end = k + 1;
    while (end < count && !rejected(first + end)) ++end;
    read_samples(first + k, end - k, dst, out + k);
    k = end;
  }
  for (int64_t j = 0; j < count; ++j)
    if (!out[j].error.empty()) out[j].size = 0;
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
    if (sz > kMaxHashedSample || rejection(i)) continue;
    buf.resize(static_cast<std::size_t>(sz));
    EncodedSample s;
    s.offset = 0;
    s.size = static_cast<std::size_t>(sz);
    read_samples(i, 1, buf.data(), &s);
    if (s.error.empty()) bytes.bytes(buf.data(), buf.size());
    else bytes.text("unreadable");
  }
  std::string out = str(kind_, " ", root_, " samples=", n, " list=", list.hex(), " bytes=", bytes.hex());
  if (mtimes_known_) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(mtimes_));
    out += str(" mtimes=", hex);
  }
  return out;
}

uint64_t EncodedSource::mtime_entry(uint64_t which, int64_t mtime_ns) {
  Fnv64 h;
  h.u64(which);
  h.u64(static_cast<uint64_t>(mtime_ns));
  return h.value();
}

}  // namespace sluice
