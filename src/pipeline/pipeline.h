#pragma once
// One rank's pipeline (docs/architecture.md, "One rank"):
//
//   dispatcher -> readers -> [in-slots] -> driver: H2D, decode, forward, D2H -> [out-slots] -> monitor -> writer
//
// - dispatcher: asks the WorkDistributor for work (runs of whole batches), takes a free in-slot
//   for each batch in order and hands it to a reader.
// - readers (reader_threads): fill the pinned in-slot from the Source (BatchInput::fill: tensors,
//   or image files' bytes, decoding on the CPU what the device does not).
// - driver: takes batches in order; enqueues the H2D copy (copy stream), forward (compute stream)
//   and D2H copies into a free out-slot (egress stream), ordered by events; never waits for the
//   device in the steady state.
// - monitor: waits for each batch's events, returns its in-slot to the pool, passes the out-slot on.
// - writer: appends each batch to the rank file in one call (RowBatch: the rows, and the keys,
//   status and sizes the batch carried from its reader), returns the out-slot, and commits the rows
//   written since the last commit (one ledger record: a contiguous run of samples) every
//   `commit_batches` batches, before a batch that does not continue the run, and at the end.
//   With compression the file hands out its encode stage (RankFile::make_encoder), and
//   writer_threads encoder threads encode the batches' chunks with it in parallel before the
//   writer (the file's only user) appends them in order.
// All slots are allocated in the constructor; the steady state allocates nothing.
//
// Batches cut by length (text inputs with --max-tokens-per-batch, text/text_input.h): the batch
// stays the unit of everything above, but its in-slot holds pieces (BatchRows::pieces), each run
// by the engine of its bucket: per piece an H2D into that engine's input buffer of the batch's io
// set, its forward, and a D2H of its rows into the out-slot at the piece's sorted rows.  A bucket's
// later pieces in one batch reuse its buffers, so their copies run on the compute stream between
// its passes (they are small; the first piece of each bucket is copied on the copy stream as
// usual).  The monitor puts the out-slot's rows back in input order before the writer stores them.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "cluster/work.h"
#include "core/device.h"
#include "engine/engine.h"
#include "io/rank_file.h"
#include "io/source.h"
#include "pipeline/batch_input.h"
#include "pipeline/stats.h"

namespace sluice {

struct PipelineOptions {
  int prefetch = 4;          // in-slots
  int egress_buffers = 4;    // out-slots
  int reader_threads = 2;
  int writer_threads = 1;    // encoder threads, when the file compresses; else unused
  int commit_batches = 1;    // batches per commit (--chunk-batches)
  int throttle_ms = 0;       // test only: sleep per batch in the driver (a slow GPU)
  int64_t fail_at_batch = -1;  // test only: the driver fails at this batch (a device failure mid-run)
};


class Pipeline {
 public:
  // `file` may be null (discard outputs: benchmarks of the compute path only).  `input` turns the
  // source's samples into the engine's input (null: a tensor input over `source`).
  Pipeline(Device& device, Engine& engine, Source& source, RankFile* file, const PipelineOptions& options);
  Pipeline(Device& device, Engine& engine, Source& source, BatchInput* input, RankFile* file,
           const PipelineOptions& options);
  // Batches cut by length: `buckets[b]` runs the pieces of bucket b, every batch has `batch` rows
  // (`input` cuts them).  The engines must have the same io sets and outputs of the same row sizes.
  Pipeline(Device& device, const std::vector<Engine*>& buckets, int64_t batch, Source& source, BatchInput* input,
           RankFile* file, const PipelineOptions& options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Runs until the distributor has no more work for this rank, or stop() was called; every batch
  // written is committed.  Rethrows the first stage failure.
  PipelineStats run(WorkDistributor& work);

  // Asynchronous stop (signal handler thread): start no new batch on the device, finish the ones
  // already there, write and commit them (a partial run), so a stop takes about two batch times
  // whatever --chunk-batches is.  Batches read but not started are dropped (a resume redoes them).
  void stop() { stop_requested_ = true; }

  // Samples committed so far by this rank (for the progress line).
  int64_t committed_samples() const { return committed_samples_.load(); }

  // The counters so far, from any thread while run() runs (the report's time series); wall_s is
  // the time since the start.  All zero before run().
  PipelineStats snapshot() const;

  // Text inputs, after run(): the tokens the batches held (attention mask ones) and those the
  // engines computed (padding included), and per bucket of a pipeline cut by length its length,
  // cap, pieces and rows.
  struct BucketUse {
    int64_t length = 0, cap = 0, pieces = 0, rows = 0;
  };
  struct TokenCounts {
    int64_t real = 0, computed = 0;
    std::vector<BucketUse> buckets;
  };
  TokenCounts token_counts() const;

 private:
  struct Impl;
  std::unique_ptr<BatchInput> own_input_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> started_{false};
  std::atomic<int64_t> committed_samples_{0};
};

}  // namespace sluice
