#pragma once
// The encode stage of compressed rank files (docs/architecture.md, "Writing").  With deflate, HDF5
// would compress every chunk inside H5Dwrite, under its global lock, one at a time; instead the
// file hands out a BatchEncoder (RankFile::make_encoder), any thread encodes whole chunks of a
// batch with it, and RankFile::append() stores those bytes as they are (H5Dwrite_chunk).  What is
// encodable, and how, is the file's knowledge: callers only plan a batch, encode its units and pass
// the result on in the RowBatch.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice {

// How the rows of one output are stored (RankFile::chunk_layout).
struct ChunkLayout {
  int deflate = 0;                 // 0: raw (or not encodable by callers): nothing to encode
  int64_t rows = 0;                // rows per HDF5 chunk
  std::size_t row_bytes = 0;
  std::size_t element_bytes = 0;   // the shuffle filter's element size: the stored type's size
  std::size_t chunk_bytes() const { return static_cast<std::size_t>(rows) * row_bytes; }
};

// One output's rows of one append, encoded chunk by chunk: chunk k is sizes[k] bytes at
// data + k * stride.  chunks == 0: not encoded (the file compresses the raw rows itself).
struct EncodedRows {
  const unsigned char* data = nullptr;
  std::size_t stride = 0;
  const std::size_t* sizes = nullptr;
  int64_t chunks = 0;
};

// Encodes whole chunks exactly as the rank file's filter pipeline would (byte shuffle, then zlib
// deflate).  One per thread; it allocates in its constructor and never after.
class ChunkEncoder {
 public:
  // Room for chunks of up to `max_chunk_bytes` raw bytes.
  explicit ChunkEncoder(std::size_t max_chunk_bytes);
  ~ChunkEncoder();
  ChunkEncoder(ChunkEncoder&&) noexcept;
  ChunkEncoder& operator=(ChunkEncoder&&) noexcept;
  // The most bytes one encoded chunk of `chunk_bytes` raw bytes can take (zlib's compressBound).
  static std::size_t bound(std::size_t chunk_bytes);
  // Encodes one whole chunk (layout.chunk_bytes() bytes at `rows`) into `out`, which has room for
  // `capacity` >= bound(layout.chunk_bytes()) bytes; returns the encoded size.
  std::size_t encode(const ChunkLayout& layout, const void* rows, unsigned char* out, std::size_t capacity);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The encode stage for batches of up to `batch_rows` rows held in `slots` slots, on `threads`
// threads: per slot, room for every chunk of a full batch of every encodable output at zlib's
// bound, and one ChunkEncoder per thread, all allocated in the constructor.
//   plan(slot, ...)          once per batch, before its units are encoded: how many chunks (units)
//   encode(thread, slot, u)  any thread, each unit once; units of one slot on several threads at once
//   encoded(slot)            what append() takes, once every unit is done
// A batch is encoded only in whole chunks: an output of a short last batch that does not fill its
// chunks is left to the file (chunks 0), which writes it from the raw rows.
class BatchEncoder {
 public:
  BatchEncoder(std::vector<ChunkLayout> layouts, int64_t batch_rows, int slots, int threads);
  // Whether any output can be encoded at this batch size (else the stage has nothing to do).
  bool active() const { return active_; }
  // The batch of `rows` rows in `slot`, `data` one pointer per output (row-major, the stored type),
  // kept until encoded(slot) is used.  Returns the number of units to encode (0: none).
  int64_t plan(int slot, int64_t rows, const std::vector<const void*>& data);
  void encode(int thread, int slot, int64_t unit);
  const std::vector<EncodedRows>& encoded(int slot) const { return rows_[static_cast<std::size_t>(slot)]; }

 private:
  std::vector<ChunkLayout> layouts_;
  std::vector<int64_t> max_chunks_;                   // per output: chunks of a full batch (0: not encoded)
  std::vector<std::size_t> offset_, size_offset_;     // per output: where its chunks sit in a slot's buffers
  std::vector<std::size_t> stride_;                   // per output: room for one encoded chunk
  std::vector<std::vector<unsigned char>> bytes_;     // per slot
  std::vector<std::vector<std::size_t>> sizes_;       // per slot
  std::vector<std::vector<EncodedRows>> rows_;        // per slot, per output
  std::vector<std::vector<const void*>> data_;        // per slot, per output: the raw rows
  std::vector<ChunkEncoder> encoders_;                // per thread
  bool active_ = false;
};

}  // namespace sluice
