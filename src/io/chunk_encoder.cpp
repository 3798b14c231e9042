// ChunkEncoder: the rank file's filter pipeline (shuffle, then deflate) run outside HDF5, so writer
// threads can compress chunks in parallel and the file's owner thread stores the bytes with
// H5Dwrite_chunk (rank_file_writer.cpp).
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
#include "io/rank_file.h"

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

}  // namespace sluice
