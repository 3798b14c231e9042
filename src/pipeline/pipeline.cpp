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
  WorkItem chunk;
  int64_t first = 0, count = 0;   // this batch's samples (count < B only for the dataset's last batch)
  bool last_in_chunk = false;
  unsigned long long span = 0;    // the NVTX `batch N` range, from dispatch to write
};

// The events of one in-flight batch.  They belong to its out-slot, which the batch holds from the
// driver to the writer, so no event is re-recorded while the monitor still needs it.
struct SlotEvents {
  int h2d_start, h2d_end, compute_start, compute_end, d2h_start, d2h_end;
};

struct ToMonitor {
  int in_slot, out_slot;
};

}  // namespace

struct Pipeline::Impl {
  Impl(Device& d, Engine& e, Source& s, RankFile* f, const PipelineOptions& o)
      : device(d), engine(e), source(s), file(f), opt(o),
        in_pool(o.prefetch), out_pool(o.egress_buffers),
        read_q(static_cast<std::size_t>(o.prefetch)), order_q(static_cast<std::size_t>(o.prefetch)),
        monitor_q(static_cast<std::size_t>(o.egress_buffers)), write_q(static_cast<std::size_t>(o.egress_buffers)) {}

  ~Impl() {
    for (void* p : in_slots) device.pinned_free(p);
    for (void* p : out_slots) device.pinned_free(p);
  }

  void allocate();
  void dispatcher(WorkDistributor& work, const std::atomic<bool>& stop);
  void reader();
  void driver();
  void monitor();
  void writer(WorkDistributor& work, std::atomic<int64_t>& committed);
  void abort_all();
  bool wait_ready(int slot);

  Device& device;
  Engine& engine;
  Source& source;
  RankFile* file;
  PipelineOptions opt;

  int64_t batch = 0;
  std::size_t in_bytes = 0, sample_bytes = 0;
  std::vector<std::size_t> out_offsets, out_bytes, out_row_bytes;
  std::size_t out_slot_bytes = 0;

  std::vector<void*> in_slots, out_slots;
  std::vector<BatchMeta> in_meta, out_meta;
  std::vector<std::vector<int64_t>> out_index;  // sample indices of each out-slot's rows
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
  double h2d_s = 0, compute_s = 0, d2h_s = 0;   // monitor thread only
  int64_t samples = 0, batches = 0, chunks = 0; // writer thread only
  double end_s = 0;
};

void Pipeline::Impl::allocate() {
  const ValueInfo& in = engine.input();
  SLUICE_CHECK(!in.shape.empty(), "engine input has no batch dimension");
  batch = in.shape[0];
  sample_bytes = source.sample_bytes();
  in_bytes = in.bytes();
  if (in.dtype != source.dtype() || in_bytes != static_cast<std::size_t>(batch) * sample_bytes)
    throw InputError(str("the model input ", dtype_name(in.dtype), shape_str(in.shape), " does not match the source's ",
                         source.describe()));
  const auto& outs = engine.outputs();
  std::size_t off = 0;
  for (const ValueInfo& o : outs) {
    out_offsets.push_back(off);
    out_bytes.push_back(o.bytes());
    out_row_bytes.push_back(o.bytes() / static_cast<std::size_t>(batch));
    off += (o.bytes() + 255) / 256 * 256;  // keep every output 256-byte aligned inside the slot
  }
  out_slot_bytes = off;

  // Everything the steady state touches is allocated here, once.
  for (int i = 0; i < opt.prefetch; ++i) in_slots.push_back(device.pinned_alloc(in_bytes));
  for (int i = 0; i < opt.egress_buffers; ++i) out_slots.push_back(device.pinned_alloc(out_slot_bytes));
  in_meta.resize(static_cast<std::size_t>(opt.prefetch));
  in_ready.assign(static_cast<std::size_t>(opt.prefetch), 0);
  out_meta.resize(static_cast<std::size_t>(opt.egress_buffers));
  out_index.assign(static_cast<std::size_t>(opt.egress_buffers), std::vector<int64_t>(static_cast<std::size_t>(batch)));
  for (int i = 0; i < opt.egress_buffers; ++i) {
    SlotEvents e{};
    e.h2d_start = device.create_event(true);
    e.h2d_end = device.create_event(true);
    e.compute_start = device.create_event(true);
    e.compute_end = device.create_event(true);
    e.d2h_start = device.create_event(true);
    e.d2h_end = device.create_event(true);
    events.push_back(e);
  }
  set_last_d2h.assign(static_cast<std::size_t>(engine.io_sets()), -1);
}

void Pipeline::Impl::abort_all() {
  aborted = true;
  read_q.abort();
  order_q.abort();
  monitor_q.abort();
  write_q.abort();
  in_pool.close();
  out_pool.close();
  std::lock_guard<std::mutex> lock(ready_mutex);
  ready_cv.notify_all();
}

void Pipeline::Impl::dispatcher(WorkDistributor& work, const std::atomic<bool>& stop) {
  device.bind_thread();
  int64_t seq = 0;
  while (!stop.load() && !aborted.load()) {
    std::optional<WorkItem> item = work.next();
    if (!item) break;
    const int64_t nb = (item->count + batch - 1) / batch;
    for (int64_t b = 0; b < nb; ++b) {
      std::optional<int> slot = in_pool.acquire();
      if (!slot) return;
      BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
      m.seq = seq;
      m.chunk = *item;
      m.first = item->first + b * batch;
      m.count = std::min(batch, item->first + item->count - m.first);
      m.last_in_chunk = (b == nb - 1);
      char name[32];
      std::snprintf(name, sizeof name, "batch %lld", static_cast<long long>(seq));
      m.span = NvtxSpan::start(name, Stage::Batch);
      ++seq;
      {
        std::lock_guard<std::mutex> lock(ready_mutex);
        in_ready[static_cast<std::size_t>(*slot)] = 0;
      }
      if (!read_q.push(*slot) || !order_q.push(*slot)) return;
    }
  }
  read_q.close();
  order_q.close();
}

void Pipeline::Impl::reader() {
  device.bind_thread();
  while (std::optional<int> slot = read_q.pop()) {
    const BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
    {
      NvtxRange range("get batch", Stage::GetBatch);
      ScopedTime busy(read_time);
      auto* dst = static_cast<uint8_t*>(in_slots[static_cast<std::size_t>(*slot)]);
      source.read(m.first, m.count, dst);
      // The padding rows of a short last batch are zeros, so results never depend on stale data.
      const std::size_t used = static_cast<std::size_t>(m.count) * sample_bytes;
      if (used < in_bytes) std::memset(dst + used, 0, in_bytes - used);
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

void Pipeline::Impl::driver() {
  device.bind_thread();
  const int sets = engine.io_sets();
  for (;;) {
    auto t_wait = Clock::now();
    std::optional<int> slot = order_q.pop();
    if (!slot) break;
    if (!wait_ready(*slot)) return;
    stall_input.add(Clock::now() - t_wait);

    auto t_out = Clock::now();
    std::optional<int> out = out_pool.acquire();
    if (!out) return;
    stall_output.add(Clock::now() - t_out);

    const BatchMeta& m = in_meta[static_cast<std::size_t>(*slot)];
    const int set = static_cast<int>(m.seq % sets);
    const SlotEvents& ev = events[static_cast<std::size_t>(*out)];
    {
      NvtxRange range("copy to GPU", Stage::CopyToGpu);
      // The set's buffers are free once the D2H of the batch that last used them is done.
      if (set_last_d2h[static_cast<std::size_t>(set)] >= 0)
        device.stream_wait(StreamKind::Copy, set_last_d2h[static_cast<std::size_t>(set)]);
      device.record(ev.h2d_start, StreamKind::Copy);
      device.copy_h2d(engine.input_buffer(set), in_slots[static_cast<std::size_t>(*slot)], in_bytes, StreamKind::Copy);
      device.record(ev.h2d_end, StreamKind::Copy);
    }
    {
      NvtxRange range("compute", Stage::Compute);
      device.stream_wait(StreamKind::Compute, ev.h2d_end);
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
  monitor_q.close();
}

void Pipeline::Impl::monitor() {
  device.bind_thread();
  while (std::optional<ToMonitor> t = monitor_q.pop()) {
    const SlotEvents& ev = events[static_cast<std::size_t>(t->out_slot)];
    // The in-slot can take the next batch as soon as its H2D copy is done.
    device.event_sync(ev.h2d_end);
    in_pool.release(t->in_slot);
    device.event_sync(ev.d2h_end);
    h2d_s += device.elapsed(ev.h2d_start, ev.h2d_end);
    compute_s += device.elapsed(ev.compute_start, ev.compute_end);
    d2h_s += device.elapsed(ev.d2h_start, ev.d2h_end);
    if (!write_q.push(t->out_slot)) return;
  }
  write_q.close();
}

void Pipeline::Impl::writer(WorkDistributor& work, std::atomic<int64_t>& committed) {
  device.bind_thread();
  std::vector<const void*> rows(out_bytes.size());
  while (std::optional<int> out = write_q.pop()) {
    const BatchMeta& m = out_meta[static_cast<std::size_t>(*out)];
    {
      NvtxRange range("write", Stage::Write);
      ScopedTime busy(write_time);
      if (file) {
        auto& index = out_index[static_cast<std::size_t>(*out)];
        for (int64_t r = 0; r < m.count; ++r) index[static_cast<std::size_t>(r)] = m.first + r;
        const auto* base = static_cast<const uint8_t*>(out_slots[static_cast<std::size_t>(*out)]);
        for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = base + out_offsets[i];
        file->append(m.count, index.data(), rows);
      }
    }
    const WorkItem chunk = m.chunk;
    const bool last = m.last_in_chunk;
    const int64_t count = m.count;
    NvtxSpan::end(m.span);
    out_pool.release(*out);
    samples += count;
    ++batches;
    if (batches == 1) first_batch_s = seconds_since(t0);
    if (last) {
      if (file) {
        NvtxRange range("commit", Stage::Write);
        ScopedTime busy(write_time);
        ChunkRecord rec;
        rec.chunk_id = chunk.chunk_id;
        rec.first_index = chunk.first;
        rec.count = chunk.count;
        file->commit(rec);
      }
      ++chunks;
      committed += chunk.count;
      work.committed(chunk);
    }
  }
  end_s = seconds_since(t0);
}

Pipeline::Pipeline(Device& device, Engine& engine, Source& source, RankFile* file, const PipelineOptions& options) {
  PipelineOptions o = options;
  if (o.prefetch < 1 || o.egress_buffers < 1 || o.reader_threads < 1 || o.writer_threads < 1)
    throw UsageError("--prefetch, --egress-buffers, --reader-threads and --writer-threads must be at least 1");
  impl_ = std::make_unique<Impl>(device, engine, source, file, o);
  impl_->allocate();
}

Pipeline::~Pipeline() = default;

PipelineStats Pipeline::run(WorkDistributor& work) {
  Impl& p = *impl_;
  p.t0 = Clock::now();
  auto on_error = [&p] { p.abort_all(); };
  std::vector<WorkerThread> threads;
  threads.emplace_back("dispatch", [&] { p.dispatcher(work, stop_requested_); }, on_error);
  for (int i = 0; i < p.opt.reader_threads; ++i) threads.emplace_back(str("reader-", i), [&] { p.reader(); }, on_error);
  threads.emplace_back("driver", [&] { p.driver(); }, on_error);
  threads.emplace_back("monitor", [&] { p.monitor(); }, on_error);
  threads.emplace_back("writer", [&] { p.writer(work, committed_samples_); }, on_error);

  std::exception_ptr first;
  for (auto& t : threads) {
    std::exception_ptr e = t.join_noexcept();
    if (e && !first) first = e;
  }
  if (first) std::rethrow_exception(first);
  p.device.synchronize();

  PipelineStats s;
  s.samples = p.samples;
  s.batches = p.batches;
  s.chunks = p.chunks;
  s.wall_s = p.end_s;
  s.first_batch_s = p.first_batch_s;
  s.read_s = p.read_time.seconds();
  s.write_s = p.write_time.seconds();
  s.h2d_s = p.h2d_s;
  s.compute_s = p.compute_s;
  s.d2h_s = p.d2h_s;
  s.stall_input_s = p.stall_input.seconds();
  s.stall_output_s = p.stall_output.seconds();
  return s;
}

}  // namespace sluice
