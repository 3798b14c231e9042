// ChunkEncoder: the rank file's filter pipeline (shuffle, then deflate) run outside HDF5, so writer
// threads can compress chunks in parallel and the file's owner thread stores the bytes with
// H5Dwrite_chunk (rank_file_writer.cpp); BatchEncoder: the encode stage built on it
// (io/chunk_encoder.h).
//
// The bytes must be what HDF5's own filters would read back:
//  - shuffle (H5Z_FILTER_SHUFFLE, element size = the stored type's size): byte j of element i moves
//    to j * n + i, so the high bytes of every float sit together; with one-byte elements HDF5
//    leaves the data as it is, and so do we.
//  - deflate (H5Z_FILTER_DEFLATE): a zlib stream (header, deflate data, adler32), which HDF5
//    decodes with inflate whatever the settings that produced it.  HDF5 itself calls compress2(),
//    which allocates zlib's state for every chunk; one z_stream per encoder, reset per chunk,
//    produces the same kind of stream without allocating in the steady state.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/chunk_encoder.h"

namespace sluice {

struct ChunkEncoder::State {
  z_stream z{};
  bool live = false;
  int level = -1;
  std::vector<unsigned char> shuffled;  // one chunk, byte-shuffled

  ~State() {
    if (live) deflateEnd(&z);
  }
};

ChunkEncoder::ChunkEncoder(std::size_t max_chunk_bytes) : s_(std::make_unique<State>()) {
  s_->shuffled.resize(max_chunk_bytes);
  const int rc = deflateInit(&s_->z, 1);
  if (rc != Z_OK) SLUICE_THROW("zlib: deflateInit failed (", rc, ")");
  s_->live = true;
  s_->level = 1;
}

ChunkEncoder::~ChunkEncoder() = default;
ChunkEncoder::ChunkEncoder(ChunkEncoder&&) noexcept = default;
ChunkEncoder& ChunkEncoder::operator=(ChunkEncoder&&) noexcept = default;

std::size_t ChunkEncoder::bound(std::size_t chunk_bytes) {
  return static_cast<std::size_t>(compressBound(static_cast<uLong>(chunk_bytes)));
}

std::size_t ChunkEncoder::encode(const ChunkLayout& layout, const void* rows, unsigned char* out, std::size_t capacity) {
  const std::size_t bytes = layout.chunk_bytes();
  SLUICE_CHECK(layout.deflate >= 1 && layout.deflate <= 9, "chunk encoder: deflate level ", layout.deflate);
  SLUICE_CHECK(bytes <= s_->shuffled.size(), "chunk encoder: a chunk of ", bytes, " bytes, room for ",
               s_->shuffled.size());
  SLUICE_CHECK(bytes <= 0xFFFFFFFFu, "chunk encoder: a chunk of ", bytes, " bytes is too big for one zlib call");
  SLUICE_CHECK(capacity >= bound(bytes), "chunk encoder: ", capacity, " bytes of room for a chunk of ", bytes);

  // Shuffle, as H5Z_FILTER_SHUFFLE does for more than one element of more than one byte.
  const auto* src = static_cast<const unsigned char*>(rows);
  const std::size_t size = layout.element_bytes;
  const std::size_t n = size > 0 ? bytes / size : 0;
  const unsigned char* input = src;
  if (size > 1 && n > 1) {
    unsigned char* dst = s_->shuffled.data();
    for (std::size_t j = 0; j < size; ++j) {
      unsigned char* plane = dst + j * n;
      const unsigned char* p = src + j;
      for (std::size_t i = 0; i < n; ++i, p += size) plane[i] = *p;
    }
    const std::size_t tail = bytes - n * size;  // never for whole rows, kept for HDF5's rule
    if (tail) std::memcpy(dst + n * size, src + n * size, tail);
    input = dst;
  }

  z_stream& z = s_->z;
  int rc = deflateReset(&z);
  if (rc == Z_OK && layout.deflate != s_->level) {
    // Right after a reset no input is pending, so this only sets the level.
    rc = deflateParams(&z, layout.deflate, Z_DEFAULT_STRATEGY);
    if (rc == Z_OK) s_->level = layout.deflate;
  }
  if (rc != Z_OK) SLUICE_THROW("zlib: cannot reset the deflate stream (", rc, ")");
  z.next_in = const_cast<Bytef*>(input);
  z.avail_in = static_cast<uInt>(bytes);
  z.next_out = out;
  z.avail_out = static_cast<uInt>(std::min<std::size_t>(capacity, 0xFFFFFFFFu));
  rc = deflate(&z, Z_FINISH);
  // compressBound is enough room for one call to finish the stream.
  if (rc != Z_STREAM_END) SLUICE_THROW("zlib: deflate of a ", bytes, "-byte chunk did not finish (", rc, ")");
  return static_cast<std::size_t>(z.total_out);
}

BatchEncoder::BatchEncoder(std::vector<ChunkLayout> layouts, int64_t batch_rows, int slots, int threads)
    : layouts_(std::move(layouts)) {
  std::size_t bytes = 0, sizes = 0, largest = 0;
  for (const ChunkLayout& L : layouts_) {
    const int64_t n = L.deflate > 0 && L.rows > 0 ? batch_rows / L.rows : 0;
    max_chunks_.push_back(n);
    stride_.push_back(n > 0 ? ChunkEncoder::bound(L.chunk_bytes()) : 0);
    offset_.push_back(bytes);
    size_offset_.push_back(sizes);
    bytes += static_cast<std::size_t>(n) * stride_.back();
    sizes += static_cast<std::size_t>(n);
    if (n > 0) largest = std::max(largest, L.chunk_bytes());
  }
  active_ = sizes > 0;
  if (!active_) return;
  const std::size_t k = static_cast<std::size_t>(std::max(slots, 1));
  bytes_.assign(k, std::vector<unsigned char>(bytes));
  sizes_.assign(k, std::vector<std::size_t>(sizes));
  rows_.assign(k, std::vector<EncodedRows>(layouts_.size()));
  data_.assign(k, std::vector<const void*>(layouts_.size(), nullptr));
  for (std::size_t s = 0; s < k; ++s)
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      EncodedRows& e = rows_[s][i];
      e.data = bytes_[s].data() + offset_[i];
      e.stride = stride_[i];
      e.sizes = sizes_[s].data() + size_offset_[i];
    }
  for (int t = 0; t < std::max(threads, 1); ++t) encoders_.emplace_back(largest);
}

int64_t BatchEncoder::plan(int slot, int64_t rows, const std::vector<const void*>& data) {
  SLUICE_CHECK(data.size() == layouts_.size(), "chunk encoder: ", data.size(), " outputs for ", layouts_.size());
  auto& enc = rows_.at(static_cast<std::size_t>(slot));
  data_[static_cast<std::size_t>(slot)] = data;
  int64_t units = 0;
  for (std::size_t i = 0; i < enc.size(); ++i) {
    const int64_t per = layouts_[i].rows;
    int64_t n = 0;
    if (max_chunks_[i] > 0 && rows % per == 0 && rows / per <= max_chunks_[i]) n = rows / per;
    enc[i].chunks = n;
    units += n;
  }
  return units;
}

void BatchEncoder::encode(int thread, int slot, int64_t unit) {
  const std::size_t k = static_cast<std::size_t>(slot);
  const auto& enc = rows_[k];
  std::size_t i = 0;
  while (unit >= enc[i].chunks) unit -= enc[i++].chunks;
  const ChunkLayout& L = layouts_[i];
  const auto* src = static_cast<const unsigned char*>(data_[k][i]) + static_cast<std::size_t>(unit) * L.chunk_bytes();
  unsigned char* dst = bytes_[k].data() + offset_[i] + static_cast<std::size_t>(unit) * stride_[i];
  sizes_[k][size_offset_[i] + static_cast<std::size_t>(unit)] =
      encoders_.at(static_cast<std::size_t>(thread)).encode(L, src, dst, stride_[i]);
}

}  // namespace sluice
