#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/nvtx.h"
#include "core/queue.h"
#include "core/slot_pool.h"
#include "core/thread.h"
#include "core/timer.h"

namespace sluice {

namespace {

struct BatchMeta {
  int64_t seq = 0;
  int64_t first = 0, count = 0;   // this batch's samples (count < B only for the dataset's last batch)
  unsigned long long span = 0;    // the NVTX `batch N` range, from dispatch to write
};

// One writer thread adds, any thread reads (std::atomic<double> has no fetch_add before C++20).
void add_to(std::atomic<double>& a, double v) { a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed); }

// Copies what the writer needs of a batch's rows (from the in-slot's BatchRows to the out-slot's),
// without allocating once both have their full size.
void copy_rows(const BatchRows& from, BatchRows& to) {
  to.keys.assign(from.keys.begin(), from.keys.end());
  to.status.assign(from.status.begin(), from.status.end());
  to.orig_hw.assign(from.orig_hw.begin(), from.orig_hw.end());
  to.bad = from.bad;
  to.pieces.assign(from.pieces.begin(), from.pieces.end());
  to.order.assign(from.order.begin(), from.order.end());
  to.tokens = from.tokens;
}

// The events of one in-flight batch.  They belong to its out-slot, which the batch holds from the
// driver to the writer, so no event is re-recorded while the monitor still needs it.
struct SlotEvents {
  int h2d_start, h2d_end, decode_end, compute_start, compute_end, d2h_start, d2h_end;
};

struct ToMonitor {
  int in_slot, out_slot;
  bool late_reads = false;  // the compute stream reads the in-slot too (a bucket's later pieces): free it after compute_end
};

}  // namespace

struct Pipeline::Impl {
  Impl(Device& d, std::vector<Engine*> e, Source& s, BatchInput& bi, RankFile* f, const PipelineOptions& o)
      : device(d), engines(std::move(e)), engine(*engines.at(0)), source(s), input(bi), file(f), opt(o),
        in_pool(o.prefetch), out_pool(o.egress_buffers),
        read_q(static_cast<std::size_t>(o.prefetch)), order_q(static_cast<std::size_t>(o.prefetch)),
        monitor_q(static_cast<std::size_t>(o.egress_buffers)), write_q(static_cast<std::size_t>(o.egress_buffers)),
        encoded_q(static_cast<std::size_t>(o.egress_buffers)) {}

  ~Impl() {
    input.quiesce();  // nothing of the input's may still read a slot freed here
    for (void* p : in_slots) device.pinned_free(p);
    for (void* p : out_slots) device.pinned_free(p);
  }

  void allocate();
  void allocate_pieces();
  void allocate_encoding();
  bool enqueue_pieces(int slot, int out, int set);
  void d2h_piece(const BatchPiece& p, uint8_t* dst, int set, StreamKind stream);
  void restore_order(int out);
  void count_tokens(const BatchRows& rows);
  void dispatcher(WorkDistributor& work, const std::atomic<bool>& stop);
  void reader(const std::atomic<bool>& stop);
  void driver(const std::atomic<bool>& stop);
  void monitor();
  void writer(WorkDistributor& work, std::atomic<int64_t>& committed);
  void commit_run(WorkDistributor& work, std::atomic<int64_t>& committed);
  void encoder(int thread);
  int64_t plan_encoding(int slot);
  void unit_done(int slot, int64_t units);
  std::optional<int> next_encoded();
  void abort_all();
  bool wait_ready(int slot);

  Device& device;
  std::vector<Engine*> engines;   // one; or, for batches cut by length, one per bucket
  Engine& engine;                 // the first
  Source& source;
  BatchInput& input;
  RankFile* file;
  PipelineOptions opt;

  int64_t batch = 0;
  bool cut = false;               // batches cut by length: pieces on the bucket engines
  std::vector<int64_t> bucket_length;     // per bucket engine: its L_b
  std::vector<uint8_t> reorder;           // monitor: an output's rows in input order
  // Writer: what the batches held and what the engines computed (token_counts()).
  int64_t tokens_real = 0, tokens_computed = 0;
  std::vector<Pipeline::BucketUse> bucket_use;
  std::size_t in_bytes = 0, sample_bytes = 0;
  std::vector<std::size_t> out_offsets, out_bytes, out_row_bytes;
  std::size_t out_slot_bytes = 0;

  std::vector<void*> in_slots, out_slots;
  std::vector<BatchMeta> in_meta, out_meta;
  std::vector<BatchRows> in_rows, out_rows;     // per slot: keys, row status, original sizes, bad reasons
  std::vector<std::vector<int64_t>> out_index;  // sample indices of each out-slot's rows
  std::vector<RowBatch> out_batch;              // each out-slot's rows as the file takes them
  std::size_t key_bytes = 0;                    // the source's key width (0: no keys)
  std::vector<SlotEvents> events;               // per out-slot
  std::vector<int> set_last_d2h;                // per engine io set: the event its last D2H recorded

  SlotPool in_pool, out_pool;
  BoundedQueue<int> read_q, order_q;
  BoundedQueue<ToMonitor> monitor_q;
  BoundedQueue<int> write_q;

  std::mutex ready_mutex;
  std::condition_variable ready_cv;
  std::vector<char> in_ready;
  std::atomic<bool> aborted{false};

  Clock::time_point t0;
  std::atomic<double> first_batch_s{0};
  TimeCounter read_time, write_time, stall_input, stall_output;
  // Written by one thread each (monitor: device times; writer: counts), read at any time by
  // snapshot() for the report's time series.
  std::atomic<double> h2d_s{0}, decode_s{0}, compute_s{0}, d2h_s{0};
  std::atomic<int64_t> samples{0}, batches{0}, chunks{0};
  std::atomic<int64_t> nonfinite_rows{0};
  std::atomic<int64_t> bad_samples{0};
  mutable std::mutex bad_mutex;
  std::vector<std::string> bad_named;  // writer: the first kNamedBadSamples bad files
  std::atomic<double> end_s{0};   // set by the writer when it is done
  WorkItem run;                                 // writer: rows written since the last commit
  int64_t run_batches = 0;

  PipelineStats stats() const;

  // A bad file said out loud as the run goes: one warning line each for the first few on this
  // rank, then one line for the rest; the report counts and names them.
  void note_bad(int64_t index, const std::string& key, const std::string& reason) {
    const int64_t n = ++bad_samples;
    if (n <= kWarnedBadSamples)
      log_warn("bad file '", key.empty() ? str("#", index) : key, "' (sample ", index, "): ", reason,
               "; fed as zeros, marked bad (/sample_status 1), the run goes on");
    else if (n == kWarnedBadSamples + 1)
      log_warn("more bad files on this rank: not listed here; the report counts them, sluice inspect names them");
    std::lock_guard<std::mutex> lock(bad_mutex);
    if (bad_named.size() < kNamedBadSamples) bad_named.push_back(str(key.empty() ? str("#", index) : key, ": ", reason));
  }

  // Compression (docs/architecture.md, "Writing").  When the file deflates an output, it hands out
  // its encode stage (io/chunk_encoder.h BatchEncoder); `writer_threads` encoder threads take the
  // batches from write_q in order and encode their chunks in parallel, each into its out-slot's
  // room; the writer thread, the file's only user, appends each batch with its chunks in batch
  // order and only then returns its out-slot.  Without compression the writer thread takes
  // write_q itself.
  bool encode = false;
  std::unique_ptr<BatchEncoder> encoder_stage;
  BoundedQueue<int> encoded_q;                       // out-slots in batch order, to the writer
  std::mutex take_mutex;                             // encoders taking batches and chunks
  int take_slot = -1;
  int64_t take_next = 0, take_units = 0;             // the batch being handed out, chunk by chunk
  std::mutex done_mutex;
  std::condition_variable done_cv;
  std::vector<int64_t> units_left;                   // per out-slot, under done_mutex
  std::vector<char> slot_encoded;                    // per out-slot, under done_mutex
  TimeCounter encode_time;
};

void Pipeline::Impl::allocate() {
  const ValueInfo& in = engine.input();
  SLUICE_CHECK(!in.shape.empty(), "engine input has no batch dimension");
  if (!cut) batch = in.shape[0];
  in_bytes = in.bytes();
  if (cut) allocate_pieces();
  if (!source.encoded()) {
    sample_bytes = source.sample_bytes();
    if (in.dtype != source.dtype() || in_bytes != static_cast<std::size_t>(batch) * sample_bytes)
      throw InputError(str("the model input ", dtype_name(in.dtype), shape_str(in.shape), " does not match the source's ",
                           source.describe()));
  }
  const std::size_t slot_bytes = input.slot_bytes();
  const auto& outs = engine.outputs();
  std::size_t off = 0;
  for (const ValueInfo& o : outs) {
    out_offsets.push_back(off);
    // A bucket engine's outputs hold its cap's rows; the out-slot holds the batch's.
    const std::size_t row = o.bytes() / static_cast<std::size_t>(in.shape[0]);
    out_bytes.push_back(row * static_cast<std::size_t>(batch));
    out_row_bytes.push_back(row);
    off += (out_bytes.back() + 255) / 256 * 256;  // keep every output 256-byte aligned inside the slot
  }
  out_slot_bytes = off;

  // Everything the steady state touches is allocated here, once.
  for (int i = 0; i < opt.prefetch; ++i) in_slots.push_back(device.pinned_alloc(slot_bytes));
  for (int i = 0; i < opt.egress_buffers; ++i) out_slots.push_back(device.pinned_alloc(out_slot_bytes));
  in_meta.resize(static_cast<std::size_t>(opt.prefetch));
  in_ready.assign(static_cast<std::size_t>(opt.prefetch), 0);
  out_meta.resize(static_cast<std::size_t>(opt.egress_buffers));
  out_index.assign(static_cast<std::size_t>(opt.egress_buffers), std::vector<int64_t>(static_cast<std::size_t>(batch)));
  in_rows.resize(static_cast<std::size_t>(opt.prefetch));
  out_rows.resize(static_cast<std::size_t>(opt.egress_buffers));
  key_bytes = source.key_bytes();
  for (auto* rows : {&in_rows, &out_rows})
    for (auto& r : *rows) {
      r.reset(batch, input.has_sizes());
      r.size_keys(batch, key_bytes);
      if (cut) r.size_pieces(batch);
    }
  out_batch.resize(static_cast<std::size_t>(opt.egress_buffers));
  for (std::size_t k = 0; k < out_batch.size(); ++k) {
    RowBatch& b = out_batch[k];
    b.sample_index = out_index[k].data();
    for (std::size_t i = 0; i < outs.size(); ++i)
      b.data.push_back(static_cast<const uint8_t*>(out_slots[k]) + out_offsets[i]);
  }
  for (int i = 0; i < opt.egress_buffers; ++i) {
    SlotEvents e{};
    e.h2d_start = device.create_event(true);
    e.h2d_end = device.create_event(true);
    e.decode_end = device.create_event(true);
    e.compute_start = device.create_event(true);
    e.compute_end = device.create_event(true);
    e.d2h_start = device.create_event(true);
    e.d2h_end = device.create_event(true);
    events.push_back(e);
  }
  set_last_d2h.assign(static_cast<std::size_t>(engine.io_sets()), -1);
  if (cut) {
    reorder.assign(out_slot_bytes, 0);
    // Rows of a bucket engine's input past a piece's rows hold what an earlier piece left there, or
    // these zeros (token id 0, mask 0): never an id out of the embedding's range.
    std::size_t most = 0;
    for (Engine* e : engines) most = std::max(most, e->input().bytes());
    void* zeros = device.pinned_alloc(most);
    std::memset(zeros, 0, most);
    for (Engine* e : engines)
      for (int s = 0; s < e->io_sets(); ++s) device.copy_h2d(e->input_buffer(s), zeros, e->input().bytes(), StreamKind::Copy);
    device.synchronize();
    device.pinned_free(zeros);
  }
}

// The bucket engines agree on what the pipeline takes from them: io sets, outputs and row sizes.
void Pipeline::Impl::allocate_pieces() {
  for (std::size_t b = 0; b < engines.size(); ++b) {
    const Engine& e = *engines[b];
    const ValueInfo& in = e.input();
    SLUICE_CHECK(in.shape.size() == 3 && in.dtype == DType::I64, "bucket engine ", b, ": input ", shape_str(in.shape),
                 " is not token planes [rows, planes, L]");
    SLUICE_CHECK(e.io_sets() == engine.io_sets(), "bucket engine ", b, " has ", e.io_sets(), " io sets, the first ",
                 engine.io_sets());
    SLUICE_CHECK(e.outputs().size() == engine.outputs().size(), "bucket engine ", b, ": other outputs");
    for (std::size_t i = 0; i < e.outputs().size(); ++i) {
      const ValueInfo &o = e.outputs()[i], &o0 = engine.outputs()[i];
      SLUICE_CHECK(o.dtype == o0.dtype && o.bytes() / static_cast<std::size_t>(in.shape[0]) ==
                                              o0.bytes() / static_cast<std::size_t>(engine.input().shape[0]),
                   "bucket engine ", b, ": output '", o.name, "' ", shape_str(o.shape), " has other rows than ",
                   shape_str(o0.shape));
    }
    bucket_length.push_back(in.shape[2]);
    Pipeline::BucketUse u;
    u.length = in.shape[2];
    u.cap = in.shape[0];
    bucket_use.push_back(u);
  }
}

void Pipeline::Impl::abort_all() {
  aborted = true;
  read_q.abort();
  order_q.abort();
  monitor_q.abort();
  write_q.abort();
  encoded_q.abort();
  in_pool.close();
  out_pool.close();
  {
    std::lock_guard<std::mutex> lock(done_mutex);
    done_cv.notify_all();
  }
  std::lock_guard<std::mutex> lock(ready_mutex);
  ready_cv.notify_all();
}

void Pipeline::Impl::dispatcher(WorkDistributor& work, const std::atomic<bool>& stop) {
  device.bind_thread();
  int64_t seq = 0;
  // Whatever ends the loop (no more work, a stop, a closed pool), the readers and the driver see
  // closed queues and drain what was dispatched.
  while (!stop.load() && !aborted.load()) {
    std::optional<WorkItem> item = work.next();
    if (!item) break;
    bool more = true;
    for (int64_t first = item->first; more && first < item->first + item->count; first += batch) {
      std::optional<int> slot = in_pool.acquire();
      if (!slot || stop.load()) break;  // the pool closes when the driver stops taking batches
      BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
      m.seq = seq;
      m.first = first;
      m.count = std::min(batch, item->first + item->count - first);
      char name[32];
      std::snprintf(name, sizeof name, "batch %lld", static_cast<long long>(seq));
      m.span = NvtxSpan::start(name, Stage::Batch);
      input.begin_batch(seq, in_slots[static_cast<std::size_t>(*slot)]);
      ++seq;
      {
        std::lock_guard<std::mutex> lock(ready_mutex);
        in_ready[static_cast<std::size_t>(*slot)] = 0;
      }
      more = read_q.push(*slot) && order_q.push(*slot);
    }
    if (!more) break;
  }
  read_q.close();
  order_q.close();
}

void Pipeline::Impl::reader(const std::atomic<bool>& stop) {
  device.bind_thread();
  while (std::optional<int> slot = read_q.pop()) {
    const BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
    // After a stop the driver starts no new batch: do not read one it will drop.
    if (!stop.load()) {
      NvtxRange range("get batch", Stage::GetBatch);
      ScopedTime busy(read_time);
      BatchRows& rows = in_rows[static_cast<std::size_t>(*slot)];
      rows.reset(batch, input.has_sizes());
      input.fill(m.first, m.count, in_slots[static_cast<std::size_t>(*slot)], rows);
      rows.fill_keys(source, m.first, m.count);  // the keys travel with the rows to the writer
    }
    std::lock_guard<std::mutex> lock(ready_mutex);
    in_ready[static_cast<std::size_t>(*slot)] = 1;
    ready_cv.notify_all();
  }
}

bool Pipeline::Impl::wait_ready(int slot) {
  std::unique_lock<std::mutex> lock(ready_mutex);
  ready_cv.wait(lock, [&] { return aborted.load() || in_ready[static_cast<std::size_t>(slot)]; });
  return !aborted.load();
}

void Pipeline::Impl::driver(const std::atomic<bool>& stop) {
  device.bind_thread();
  const int sets = engine.io_sets();
  for (;;) {
    auto t_wait = Clock::now();
    std::optional<int> slot = stop.load() ? std::nullopt : order_q.pop();
    if (!slot) break;
    if (!wait_ready(*slot)) return;
    stall_input.add(Clock::now() - t_wait);
    if (stop.load()) break;  // a stop: the batches already on the device are the last ones

    auto t_out = Clock::now();
    std::optional<int> out = out_pool.acquire();
    if (!out) return;
    stall_output.add(Clock::now() - t_out);
    if (stop.load()) {  // the stop came while it waited for an out-slot
      out_pool.release(*out);
      break;
    }

    const BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
    if (m.seq == opt.fail_at_batch) throw Error(str("a failure injected at batch ", m.seq, " (--fail-at-batch, a test option)"));
    const int set = static_cast<int>(m.seq % sets);
    const SlotEvents& ev = events[static_cast<std::size_t>(*out)];
    if (cut) {
      const bool late_reads = enqueue_pieces(*slot, *out, set);
      set_last_d2h[static_cast<std::size_t>(set)] = ev.d2h_end;
      out_meta[static_cast<std::size_t>(*out)] = m;
      if (!monitor_q.push(ToMonitor{*slot, *out, late_reads})) return;
      continue;
    }
    {
      NvtxRange range("copy to GPU", Stage::CopyToGpu);
      // The set's buffers are free once the D2H of the batch that last used them is done.
      if (set_last_d2h[static_cast<std::size_t>(set)] >= 0)
        device.stream_wait(StreamKind::Copy, set_last_d2h[static_cast<std::size_t>(set)]);
      device.record(ev.h2d_start, StreamKind::Copy);
      BatchRows& rows = in_rows[static_cast<std::size_t>(*slot)];
      void* slot_ptr = in_slots[static_cast<std::size_t>(*slot)];
      input.enqueue_copy(slot_ptr, rows, engine.input_buffer(set), device);
      device.record(ev.h2d_end, StreamKind::Copy);
      input.enqueue_decode(slot_ptr, rows, engine.input_buffer(set), device);
      device.record(ev.decode_end, StreamKind::Copy);
      copy_rows(rows, out_rows[static_cast<std::size_t>(*out)]);
    }
    {
      NvtxRange range("compute", Stage::Compute);
      device.stream_wait(StreamKind::Compute, ev.decode_end);
      device.record(ev.compute_start, StreamKind::Compute);
      engine.forward(set, device.stream(StreamKind::Compute));
      device.record(ev.compute_end, StreamKind::Compute);
    }
    if (opt.throttle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.throttle_ms));
    {
      NvtxRange range("copy to CPU", Stage::CopyToCpu);
      device.stream_wait(StreamKind::Egress, ev.compute_end);
      device.record(ev.d2h_start, StreamKind::Egress);
      auto* dst = static_cast<uint8_t*>(out_slots[static_cast<std::size_t>(*out)]);
      for (std::size_t i = 0; i < out_bytes.size(); ++i)
        device.copy_d2h(dst + out_offsets[i], engine.output_buffer(set, static_cast<int>(i)), out_bytes[i], StreamKind::Egress);
      device.record(ev.d2h_end, StreamKind::Egress);
    }
    set_last_d2h[static_cast<std::size_t>(set)] = ev.d2h_end;
    out_meta[static_cast<std::size_t>(*out)] = m;
    if (!monitor_q.push(ToMonitor{*slot, *out})) return;
  }
  // Wakes a dispatcher waiting for an in-slot that no batch will free any more (after a stop); the
  // monitor's releases into the closed pool are then dropped, which no one needs.
  in_pool.close();
  monitor_q.close();
}

// A batch cut by length, on the device (the driver's part for it).  The first piece of each bucket
// is copied on the copy stream before any pass; a bucket's later pieces (its pieces are
// consecutive, the rows being sorted) reuse its buffers of this io set, so each is copied on the
// compute stream after the pass before it, whose outputs were copied out on the compute stream
// too; the last piece of each bucket is copied out on the egress stream.  Returns whether the
// compute stream reads the in-slot.
bool Pipeline::Impl::enqueue_pieces(int slot, int out, int set) {
  const SlotEvents& ev = events[static_cast<std::size_t>(out)];
  BatchRows& rows = in_rows[static_cast<std::size_t>(slot)];
  const auto& pieces = rows.pieces;
  SLUICE_CHECK(!pieces.empty(), "a batch cut by length without pieces");
  const auto* src = static_cast<const uint8_t*>(in_slots[static_cast<std::size_t>(slot)]);
  auto* dst = static_cast<uint8_t*>(out_slots[static_cast<std::size_t>(out)]);
  const std::size_t n = pieces.size();
  auto again = [&](std::size_t k) { return k > 0 && pieces[k - 1].bucket == pieces[k].bucket; };
  auto engine_of = [&](const BatchPiece& p) -> Engine& {
    SLUICE_CHECK(p.bucket >= 0 && static_cast<std::size_t>(p.bucket) < engines.size(), "piece of bucket ", p.bucket);
    return *engines[static_cast<std::size_t>(p.bucket)];
  };
  bool late_reads = false;
  {
    NvtxRange range("copy to GPU", Stage::CopyToGpu);
    if (set_last_d2h[static_cast<std::size_t>(set)] >= 0)
      device.stream_wait(StreamKind::Copy, set_last_d2h[static_cast<std::size_t>(set)]);
    device.record(ev.h2d_start, StreamKind::Copy);
    for (std::size_t k = 0; k < n; ++k)
      if (!again(k)) device.copy_h2d(engine_of(pieces[k]).input_buffer(set), src + pieces[k].offset, pieces[k].bytes, StreamKind::Copy);
    device.record(ev.h2d_end, StreamKind::Copy);
    device.record(ev.decode_end, StreamKind::Copy);
    copy_rows(rows, out_rows[static_cast<std::size_t>(out)]);
  }
  {
    NvtxRange range("compute", Stage::Compute);
    device.stream_wait(StreamKind::Compute, ev.decode_end);
    device.record(ev.compute_start, StreamKind::Compute);
    void* stream = device.stream(StreamKind::Compute);
    for (std::size_t k = 0; k < n; ++k) {
      Engine& e = engine_of(pieces[k]);
      if (again(k)) {
        device.copy_h2d(e.input_buffer(set), src + pieces[k].offset, pieces[k].bytes, StreamKind::Compute);
        late_reads = true;
      }
      e.forward(set, stream);
      if (k + 1 < n && again(k + 1)) d2h_piece(pieces[k], dst, set, StreamKind::Compute);
    }
    device.record(ev.compute_end, StreamKind::Compute);
  }
  if (opt.throttle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.throttle_ms));
  {
    NvtxRange range("copy to CPU", Stage::CopyToCpu);
    device.stream_wait(StreamKind::Egress, ev.compute_end);
    device.record(ev.d2h_start, StreamKind::Egress);
    for (std::size_t k = 0; k < n; ++k)
      if (k + 1 == n || !again(k + 1)) d2h_piece(pieces[k], dst, set, StreamKind::Egress);
    device.record(ev.d2h_end, StreamKind::Egress);
  }
  return late_reads;
}

// A piece's rows of every output, from its engine's buffers into the out-slot at its sorted rows.
void Pipeline::Impl::d2h_piece(const BatchPiece& p, uint8_t* dst, int set, StreamKind stream) {
  Engine& e = *engines[static_cast<std::size_t>(p.bucket)];
  for (std::size_t i = 0; i < out_bytes.size(); ++i)
    device.copy_d2h(dst + out_offsets[i] + static_cast<std::size_t>(p.first) * out_row_bytes[i],
                    e.output_buffer(set, static_cast<int>(i)), static_cast<std::size_t>(p.rows) * out_row_bytes[i], stream);
}

// The out-slot's rows, in sorted order after a batch cut by length, back in input order: one copy
// per row into the scratch, one back per output.
void Pipeline::Impl::restore_order(int out) {
  const BatchRows& rows = out_rows[static_cast<std::size_t>(out)];
  if (rows.pieces.empty()) return;
  auto* slot = static_cast<uint8_t*>(out_slots[static_cast<std::size_t>(out)]);
  const std::size_t count = rows.order.size();
  for (std::size_t i = 0; i < out_bytes.size(); ++i) {
    uint8_t* base = slot + out_offsets[i];
    const std::size_t rb = out_row_bytes[i];
    for (std::size_t s = 0; s < count; ++s)
      std::memcpy(reorder.data() + static_cast<std::size_t>(rows.order[s]) * rb, base + s * rb, rb);
    std::memcpy(base, reorder.data(), count * rb);
  }
}

// Writer: a written batch's tokens, and its pieces per bucket.
void Pipeline::Impl::count_tokens(const BatchRows& rows) {
  tokens_real += rows.tokens;
  if (!cut) {
    const Shape& in = engine.input().shape;
    if (rows.tokens > 0 && in.size() == 3) tokens_computed += in[0] * in[2];
    return;
  }
  for (const BatchPiece& p : rows.pieces) {
    Pipeline::BucketUse& u = bucket_use[static_cast<std::size_t>(p.bucket)];
    ++u.pieces;
    u.rows += p.rows;
    tokens_computed += p.rows * u.length;
  }
}

void Pipeline::Impl::monitor() {
  device.bind_thread();
  while (std::optional<ToMonitor> t = monitor_q.pop()) {
    const SlotEvents& ev = events[static_cast<std::size_t>(t->out_slot)];
    // The in-slot can take the next batch as soon as its H2D copies are done.
    device.event_sync(t->late_reads ? ev.compute_end : ev.decode_end);
    in_pool.release(t->in_slot);
    device.event_sync(ev.d2h_end);
    if (cut) restore_order(t->out_slot);
    add_to(h2d_s, device.elapsed(ev.h2d_start, ev.h2d_end));
    add_to(decode_s, device.elapsed(ev.h2d_end, ev.decode_end));
    add_to(compute_s, device.elapsed(ev.compute_start, ev.compute_end));
    add_to(d2h_s, device.elapsed(ev.d2h_start, ev.d2h_end));
    if (!write_q.push(t->out_slot)) return;
  }
  write_q.close();
}

// The file's encode stage for this pipeline's batches and out-slots (null: nothing to encode).
void Pipeline::Impl::allocate_encoding() {
  if (!file) return;
  encoder_stage = file->make_encoder(batch, opt.egress_buffers, opt.writer_threads, out_row_bytes);
  encode = encoder_stage != nullptr;
  if (!encode) return;
  const std::size_t slots = static_cast<std::size_t>(opt.egress_buffers);
  units_left.assign(slots, 0);
  slot_encoded.assign(slots, 0);
}

// Plans the encoding of the batch in `slot` and returns the number of chunks to encode.
int64_t Pipeline::Impl::plan_encoding(int slot) {
  const BatchMeta& m = out_meta[static_cast<std::size_t>(slot)];
  const int64_t units = encoder_stage->plan(slot, m.count, out_batch[static_cast<std::size_t>(slot)].data);
  std::lock_guard<std::mutex> lock(done_mutex);
  units_left[static_cast<std::size_t>(slot)] = units;
  slot_encoded[static_cast<std::size_t>(slot)] = units == 0;
  if (units == 0) done_cv.notify_all();
  return units;
}

void Pipeline::Impl::unit_done(int slot, int64_t units) {
  std::lock_guard<std::mutex> lock(done_mutex);
  if ((units_left[static_cast<std::size_t>(slot)] -= units) == 0) {
    slot_encoded[static_cast<std::size_t>(slot)] = 1;
    done_cv.notify_all();
  }
}

void Pipeline::Impl::encoder(int thread) {
  device.bind_thread();
  for (;;) {
    int slot = -1;
    int64_t unit = 0;
    {
      std::lock_guard<std::mutex> lock(take_mutex);
      while (take_next == take_units) {
        // The current batch is handed out: take the next one.  Waiting here holds take_mutex, which
        // costs nothing: the other encoders have nothing to take meanwhile either.  Taking and
        // queueing under one lock keeps encoded_q in batch order.
        std::optional<int> next = write_q.pop();
        if (!next) {
          encoded_q.close();
          return;
        }
        if (!encoded_q.push(*next)) return;
        take_slot = *next;
        take_next = 0;
        take_units = plan_encoding(*next);
      }
      slot = take_slot;
      unit = take_next++;
    }
    {
      NvtxRange range("encode", Stage::Write);
      ScopedTime busy(encode_time);
      encoder_stage->encode(thread, slot, unit);
    }
    unit_done(slot, 1);
  }
}

// The writer's next batch when encoders run: the oldest one taken, once all of its chunks are done.
std::optional<int> Pipeline::Impl::next_encoded() {
  std::optional<int> out = encoded_q.pop();
  if (!out) return out;
  std::unique_lock<std::mutex> lock(done_mutex);
  done_cv.wait(lock, [&] { return aborted.load() || slot_encoded[static_cast<std::size_t>(*out)]; });
  if (aborted.load()) return std::nullopt;
  slot_encoded[static_cast<std::size_t>(*out)] = 0;
  return out;
}

void Pipeline::Impl::writer(WorkDistributor& work, std::atomic<int64_t>& committed) {
  device.bind_thread();
  std::vector<std::pair<int64_t, std::string>> bad;  // a batch's bad rows (sample index, reason), rare
  for (;;) {
    std::optional<int> out = encode ? next_encoded() : write_q.pop();
    if (!out) break;
    const BatchMeta& m = out_meta[static_cast<std::size_t>(*out)];
    // A batch that does not continue the run being written (the next range of this rank): the run
    // so far becomes one record first, so that every record is contiguous in samples and in rows.
    if (run_batches > 0 && run.first + run.count != m.first) commit_run(work, committed);
    {
      NvtxRange range("write", Stage::Write);
      ScopedTime busy(write_time);
      if (file) {
        const std::size_t k = static_cast<std::size_t>(*out);
        auto& index = out_index[k];
        for (int64_t r = 0; r < m.count; ++r) index[static_cast<std::size_t>(r)] = m.first + r;
        const BatchRows& br = out_rows[k];
        RowBatch& b = out_batch[k];
        b.rows = m.count;
        b.meta = RowMeta{};
        if (key_bytes > 0) b.meta.keys = br.keys.data();
        b.meta.status = br.status.data();
        if (!br.orig_hw.empty()) b.meta.orig_hw = br.orig_hw.data();
        bad.clear();
        for (const auto& r : br.bad) {
          bad.emplace_back(m.first + r.first, r.second);
          note_bad(m.first + r.first, br.key(r.first), r.second);
        }
        if (!bad.empty()) b.meta.bad = &bad;
        b.encoded = encode ? &encoder_stage->encoded(*out) : nullptr;
        file->append(b);
      }
    }
    const BatchRows& status_rows = out_rows[static_cast<std::size_t>(*out)];
    count_tokens(status_rows);
    for (int64_t r = 0; r < m.count && r < static_cast<int64_t>(status_rows.status.size()); ++r)
      nonfinite_rows += status_rows.status[static_cast<std::size_t>(r)] == kRowNonFinite;
    const int64_t first = m.first, count = m.count;
    NvtxSpan::end(m.span);
    // Its rows are stored (and encoded, if they were): the out-slot can take the next batch.
    out_pool.release(*out);
    samples += count;
    ++batches;
    if (batches == 1) first_batch_s = seconds_since(t0);
    if (run_batches == 0) run = WorkItem{first, 0};
    run.count += count;
    if (++run_batches >= opt.commit_batches) commit_run(work, committed);
  }
  // The queues closed: no more work, or a stop.  Rows written are committed (after a failure,
  // aborted, they are left to the last commit, as a kill would leave them).
  if (!aborted.load()) commit_run(work, committed);
  end_s = seconds_since(t0);
}

// One ledger record for the rows written since the last commit: a contiguous run of samples.
void Pipeline::Impl::commit_run(WorkDistributor& work, std::atomic<int64_t>& committed) {
  if (run_batches == 0) return;
  if (file) {
    NvtxRange range("commit", Stage::Write);
    ScopedTime busy(write_time);
    ChunkRecord rec;
    rec.first_index = run.first;
    rec.count = run.count;
    file->commit(rec);
  }
  ++chunks;
  committed += run.count;
  work.committed(run);
  run_batches = 0;
}

Pipeline::Pipeline(Device& device, Engine& engine, Source& source, RankFile* file, const PipelineOptions& options)
    : Pipeline(device, engine, source, nullptr, file, options) {}

Pipeline::Pipeline(Device& device, Engine& engine, Source& source, BatchInput* input, RankFile* file,
                   const PipelineOptions& options) {
  PipelineOptions o = options;
  if (o.prefetch < 1 || o.egress_buffers < 1 || o.reader_threads < 1 || o.writer_threads < 1 || o.commit_batches < 1)
    throw UsageError(
        "--prefetch, --egress-buffers, --reader-threads, --writer-threads and --chunk-batches must be at least 1");
  if (!input) {
    own_input_ = make_tensor_input(source, engine.input().shape.empty() ? 1 : engine.input().shape[0],
                                   engine.input().bytes());
    input = own_input_.get();
  }
  impl_ = std::make_unique<Impl>(device, std::vector<Engine*>{&engine}, source, *input, file, o);
  impl_->allocate();
  impl_->allocate_encoding();
}

Pipeline::Pipeline(Device& device, const std::vector<Engine*>& buckets, int64_t batch, Source& source, BatchInput* input,
                   RankFile* file, const PipelineOptions& options) {
  PipelineOptions o = options;
  if (o.prefetch < 1 || o.egress_buffers < 1 || o.reader_threads < 1 || o.writer_threads < 1 || o.commit_batches < 1)
    throw UsageError(
        "--prefetch, --egress-buffers, --reader-threads, --writer-threads and --chunk-batches must be at least 1");
  SLUICE_CHECK(!buckets.empty() && input && batch >= 1, "a pipeline cut by length needs its engines, input and batch");
  impl_ = std::make_unique<Impl>(device, buckets, source, *input, file, o);
  impl_->cut = true;
  impl_->batch = batch;
  impl_->allocate();
  impl_->allocate_encoding();
}

Pipeline::TokenCounts Pipeline::token_counts() const {
  TokenCounts t;
  if (!impl_) return t;
  t.real = impl_->tokens_real;
  t.computed = impl_->tokens_computed;
  t.buckets = impl_->bucket_use;
  return t;
}

Pipeline::~Pipeline() = default;

PipelineStats Pipeline::run(WorkDistributor& work) {
  Impl& p = *impl_;
  p.t0 = Clock::now();
  started_ = true;
  auto on_error = [&p] { p.abort_all(); };
  std::vector<WorkerThread> threads;
  try {
    threads.emplace_back("dispatch", [&] { p.dispatcher(work, stop_requested_); }, on_error);
    for (int i = 0; i < p.opt.reader_threads; ++i)
      threads.emplace_back(str("reader-", i), [&] { p.reader(stop_requested_); }, on_error);
    threads.emplace_back("driver", [&] { p.driver(stop_requested_); }, on_error);
    threads.emplace_back("monitor", [&] { p.monitor(); }, on_error);
    if (p.encode)
      for (int i = 0; i < p.opt.writer_threads; ++i)
        threads.emplace_back(str("encoder-", i), [&p, i] { p.encoder(i); }, on_error);
    threads.emplace_back("writer", [&] { p.writer(work, committed_samples_); }, on_error);
  } catch (...) {
    // A thread the system refused: the stages already running stop, then are joined (by `threads`).
    on_error();
    throw;
  }

  std::exception_ptr first;
  for (auto& t : threads) {
    std::exception_ptr e = t.join_noexcept();
    if (e && !first) first = e;
  }
  p.input.quiesce();
  if (first) std::rethrow_exception(first);
  p.device.synchronize();

  if (p.end_s.load() <= 0) p.end_s = seconds_since(p.t0);
  return p.stats();
}

PipelineStats Pipeline::snapshot() const {
  if (!impl_ || !started_.load()) return PipelineStats{};
  return impl_->stats();
}

PipelineStats Pipeline::Impl::stats() const {
  const Impl& p = *this;
  PipelineStats s;
  s.samples = p.samples;
  s.batches = p.batches;
  s.chunks = p.chunks;
  s.nonfinite_rows = p.nonfinite_rows;
  s.bad_samples = p.bad_samples;
  {
    std::lock_guard<std::mutex> lock(p.bad_mutex);
    s.bad_named = p.bad_named;
  }
  s.wall_s = p.end_s.load() > 0 ? p.end_s.load() : seconds_since(p.t0);
  s.first_batch_s = p.first_batch_s;
  s.read_s = p.read_time.seconds();
  s.write_s = p.write_time.seconds();
  s.encode_s = p.encode_time.seconds();
  s.h2d_s = p.h2d_s;
  s.decode_cpu_s = p.input.cpu_decode_seconds();
  s.decode_s = p.decode_s + s.decode_cpu_s;
  s.read_s = std::max(0.0, s.read_s - p.input.cpu_decode_seconds());
  s.compute_s = p.compute_s;
  s.d2h_s = p.d2h_s;
  s.stall_input_s = p.stall_input.seconds();
  s.stall_output_s = p.stall_output.seconds();
  return s;
}

}  // namespace sluice
