#pragma once
// From a source's samples to the engine's input tensor, one batch at a time, in two halves:
//
//   fill()     reader threads, into a pinned in-slot: read tensors, or read image files (and decode
//              on the CPU whatever the device will not decode)
//   enqueue_copy() / enqueue_decode()
//              driver thread, on the device's copy stream: the H2D copy of the slot, then the
//              device-side decoding and preprocessing that writes the engine's input buffer
//
// The pipeline records the h2d events around enqueue_copy and a decode event after
// enqueue_decode, so the report shows decoding as a stage of its own.  A tensor input's decode
// half is empty.  Every row of a batch also carries its key, a status (and, for images, the
// original size), which travel with it to the writer and are stored beside the outputs
// (io/rank_file.h, RowBatch).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "io/sample_keys.h"
#include "io/source.h"

namespace sluice {

// Row status codes, stored per row in the rank files (/sample_status).
enum RowStatus : uint8_t {
  kRowOk = 0,
  kRowBad = 1,        // the sample could not be read or decoded: zeros were fed, the outputs are meaningless
  kRowNonFinite = 2,  // the input held NaN or Inf (computed as given)
};

// One piece of a batch cut by length (text inputs with --max-tokens-per-batch, text/text_input.h):
// rows [first, first + rows) of the batch in sorted order, run by the engine of `bucket`; its
// input, [rows, planes, L_bucket], lies at `offset` in the in-slot, `bytes` long.
struct BatchPiece {
  int32_t bucket = 0;
  int64_t first = 0, rows = 0;
  std::size_t offset = 0, bytes = 0;
};

// What a batch's rows carry beside the pixels.  Preallocated per slot; fill() resets it.
struct BatchRows {
  std::vector<char> keys;                               // per row key_bytes chars, NUL-padded (io/sample_keys.h)
  std::size_t key_bytes = 0;
  std::vector<uint8_t> status;                          // per row (RowStatus)
  std::vector<int32_t> orig_hw;                         // per row: original height, width (images), else empty
  std::vector<std::pair<int64_t, std::string>> bad;     // (row in the batch, reason), rare
  // A batch cut by length: its pieces in sorted order, and `order[s]`, the batch row at sorted
  // position s.  Empty pieces: the batch is one tensor, the whole slot, in row order.  Their
  // capacity is reserved once (size_pieces), so fill() never allocates.
  std::vector<BatchPiece> pieces;
  std::vector<int32_t> order;
  int64_t tokens = 0;                                   // text inputs: the batch's real tokens (mask ones)
  void reset(int64_t rows, bool sizes) {
    status.assign(static_cast<std::size_t>(rows), kRowOk);
    if (sizes) orig_hw.assign(static_cast<std::size_t>(rows) * 2, 0); else orig_hw.clear();
    bad.clear();
    pieces.clear();
    order.clear();
    tokens = 0;
  }
  void size_pieces(int64_t rows) {
    pieces.reserve(static_cast<std::size_t>(rows));
    order.reserve(static_cast<std::size_t>(rows));
  }
  // Room for `rows` keys of `width` bytes, once (fill_keys then writes them without allocating).
  void size_keys(int64_t rows, std::size_t width) {
    key_bytes = width;
    keys.assign(static_cast<std::size_t>(rows) * width, 0);
  }
  // The keys of samples [first, first + count) from `source`, the rest blank.
  void fill_keys(const Source& source, int64_t first, int64_t count) {
    if (key_bytes == 0) return;
    std::fill(keys.begin(), keys.end(), 0);
    for (int64_t r = 0; r < count; ++r) put_padded_key(keys.data(), key_bytes, r, source.key(first + r));
  }
  // Row `row`'s key ("" for a source without keys).
  std::string key(int64_t row) const { return key_bytes == 0 ? "" : padded_key(keys.data(), key_bytes, row); }
  void mark_bad(int64_t row, std::string reason) {
    status[static_cast<std::size_t>(row)] = kRowBad;
    bad.emplace_back(row, std::move(reason));
  }
};

class BatchInput {
 public:
  virtual ~BatchInput() = default;
  virtual std::string describe() const = 0;
  // Pinned bytes one in-slot needs.
  virtual std::size_t slot_bytes() const = 0;
  // Whether rows carry original image sizes.
  virtual bool has_sizes() const { return false; }
  // Reader threads (thread-safe): samples [first, first + count) of a batch into `slot`; rows
  // count..batch-1 of a short last batch must come out as zeros.  `rows` was reset for `batch` rows.
  virtual void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) = 0;
  // Dispatcher thread, in batch order (seq 0, 1, 2, ...), before the slot goes to a reader: an
  // input that works on batches ahead of the driver (the GPU image input's decode threads) learns
  // their order here.  Nothing for most inputs.
  virtual void begin_batch(int64_t seq, void* slot) {}
  // After the pipeline's threads are joined, before its slots are freed: whatever the input still
  // does with slots (threads of its own, device work) is finished or dropped.  Begin_batch may
  // start it again.
  virtual void quiesce() {}
  // Driver thread: the slot's bytes to the device (copy stream).
  virtual void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) = 0;
  // Driver thread: device-side decoding and preprocessing into `engine_input` (copy stream);
  // may mark rows bad.  Nothing for tensor inputs.
  virtual void enqueue_decode(void* slot, BatchRows& rows, void* engine_input, Device& device) {}
  // Seconds spent decoding on CPU threads so far (summed over threads; part of fill()).
  virtual double cpu_decode_seconds() const { return 0; }
};

// What a tensor input does with float samples holding NaN or Inf (--on-nan): Warn marks the row
// kRowNonFinite and computes it as given, Fail throws InputError naming the sample, Ignore skips
// the scan.
enum class NonFinite { Warn, Fail, Ignore };

// A tensor source as the engine's input: fill() reads the samples, enqueue_copy() is one H2D copy
// of the whole batch.  `batch_bytes` is the engine's input size (batch * sample_bytes).
std::unique_ptr<BatchInput> make_tensor_input(Source& source, int64_t batch, std::size_t batch_bytes,
                                              NonFinite policy = NonFinite::Warn);

}  // namespace sluice
