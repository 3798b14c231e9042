// The GPU image input (gpu_image_input.h): reader threads lay each batch out in its pinned slot,
// the driver decodes the JPEGs with nvJPEG and runs one preprocessing kernel over the batch.
//
// A slot holds, each part 256-byte aligned:
//   SlotHeader | GpuRowPlan[B] | GpuJob[B] | TapSpan[...] | float weights[...] |
//   uint8 host rows [B, 3, H, W] (the CPU path's output, at each row's place) | the files' bytes
// The tap tables (tap_tables.h) have a fixed room; a sample whose tables no longer fit goes the CPU
// path, so the slot size is fixed.
//
// Decode contexts: each holds an nvJPEG state (the decoder's state of the same index), an arena for
// the decoded images, a stream and two events.  A context takes one batch at a time: nvJPEG
// decodes the batch into its arena (`decoded` recorded after), the driver's resize kernel reads
// the arena on the copy stream (`released` recorded after), and the next batch may call nvJPEG on
// that context only once `released` is done on the host (the hardware decoder writes when it is
// called: nvjpeg_decoder.h).
//   overlap on (SLUICE_DECODE_OVERLAP=1): one decode thread per context (2), fed in batch order by begin_batch();
//     batch seq goes to context seq % contexts and is decoded on that context's stream as soon as
//     its slot is filled and the context free, while the driver runs earlier batches; the driver's
//     enqueue_decode() waits for its batch's nvJPEG call to have been made (rarely: it is ahead),
//     makes the copy stream wait for `decoded`, and runs the resize kernel.
//   overlap off (the default, SLUICE_DECODE_OVERLAP=0): the driver calls nvJPEG itself in
//     enqueue_decode(), on the copy stream, the contexts in turn (what the pipeline did before the
//     decode threads, and faster on the H200: the hardware decoder's calls take turns anyway).
// A slot no begin_batch() announced (tests, benchmarks) is decoded inline the same way.
#include "image/cuda/gpu_image_input.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/cuda/cuda_raii.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "core/params.h"
#include "core/thread.h"
#include "image/cuda/gpu_preprocess.h"
#include "image/cuda/nvjpeg_decoder.h"
#include "image/cuda/tap_tables.h"
#if __has_include("image/image_input.h")
#include "image/image_input.h"
#endif

namespace sluice {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
// Room per output coordinate in the weight tables: every sample of a batch can have its own
// tables as long as it shrinks by less than about 3.5x per axis (the taps of a shrink by s number
// about 2s + 1); more than that still fits while the batch's other samples share tables.
constexpr int kNominalTaps = 8;

struct SlotHeader {
  int64_t first = 0;        // the batch's first sample
  int32_t count = 0;        // samples in the batch (rows count..B-1 are padding)
  int32_t gpu_jobs = 0;     // JPEGs for nvJPEG
  int32_t host_rows = 0;    // rows preprocessed on the CPU
  int32_t spans_used = 0, weights_used = 0;
  int32_t max_w = 0, max_h = 0;  // the largest image for nvJPEG
  int64_t arena_bytes = 0;  // the decoded images, each 256-byte aligned
};

struct GpuJob {
  int32_t row = 0;
  int32_t reserved = 0;
  int64_t offset = 0, size = 0;  // the file's bytes in the slot
};

int64_t nanos_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

class GpuImageInput final : public BatchInput {
 public:
  GpuImageInput(Source& source, const PreprocessSpec& spec, int64_t batch, Device& device, const GpuImageOptions& opt);

  ~GpuImageInput() override { quiesce(); }

  std::string describe() const override {
    return str(source_.describe(), ", ", decoder_->describe(), " + CPU for the rest, preprocessed on the GPU; ",
               overlap_ ? str("decoded ahead on ", contexts_.size(), " threads and streams",
                              opt_.handle_per_context ? ", an nvJPEG handle each" : ", one nvJPEG handle")
                        : std::string("decoded on the driver thread"));
  }
  std::size_t slot_bytes() const override { return total_; }
  bool has_sizes() const override { return true; }
  void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) override;
  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override;
  void enqueue_decode(void* slot, BatchRows& rows, void* engine_input, Device& device) override;
  void begin_batch(int64_t seq, void* slot) override;
  void quiesce() override;
  double cpu_decode_seconds() const override { return static_cast<double>(cpu_ns_.load()) * 1e-9; }

 private:
  template <typename T>
  T* at(void* slot, std::size_t offset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(slot) + offset);
  }
  uint8_t* host_row(void* slot, int64_t row) const {
    return at<uint8_t>(slot, host_rows_) + static_cast<std::size_t>(row) * sample_bytes_;
  }
  bool plan_gpu_row(void* slot, int64_t row, const ImageHeader& ih, const EncodedSample& e, TapTables& tables);
  bool preprocess_on_host(const uint8_t* data, std::size_t size, std::vector<uint8_t>& rgb, uint8_t* dst,
                          std::string* error);
  void mark_bad(BatchRows& rows, int64_t row, int64_t index, std::string reason) const;
  void decode_batch_on_host(void* slot, BatchRows& rows, void* engine_input, Device& device, const std::string& why);

  struct Context {
    int index = 0;
    cuda::Stream stream;             // overlap on: the context's decode stream
    cuda::Event decoded, released;   // see the top of this file
    bool released_pending = false;   // `released` recorded, not yet waited for
    bool busy = false;               // a batch holds the context (under mutex_)
    cuda::DeviceBuffer arena;        // the decoded images
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> len;
    std::vector<nvjpegImage_t> out;
    std::deque<void*> queue;         // overlap on: announced slots, in batch order (under mutex_)
    std::thread thread;
  };
  // An announced batch on its way from begin_batch() to enqueue_decode() (under mutex_).
  struct Pending {
    int context = 0;          // seq % contexts
    bool filled = false;      // fill() is done
    bool submitted = false;   // the decode thread made its nvJPEG call (or failed)
    bool ok = true;           // false: nvJPEG rejected the batch (`why`)
    std::string why;
    std::exception_ptr error;
  };
  // nvJPEG for the slot's JPEGs into the context's arena on `stream`, then `decoded`.  The context
  // is the caller's (busy).  Returns false with `why` when nvJPEG rejects the batch.
  bool submit(Context& c, void* slot, cudaStream_t stream, std::string* why);
  void decode_thread(Context& c);
  void print_stats();

  Source& source_;
  PreprocessSpec spec_;
  int64_t batch_;
  GpuImageOptions opt_;
  std::size_t sample_bytes_;
  // Slot layout: offsets and capacities.
  std::size_t header_ = 0, plans_ = 0, jobs_ = 0, spans_ = 0, weights_ = 0, host_rows_ = 0, encoded_ = 0, total_ = 0;
  std::size_t span_capacity_ = 0, weight_capacity_ = 0, encoded_capacity_ = 0;

  std::unique_ptr<NvjpegBatchDecoder> decoder_;
  std::atomic<int64_t> cpu_ns_{0};
  TapCache taps_;

  Device& device_;
  bool overlap_ = true;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<void*, Pending> pending_;   // by slot
  bool threads_running_ = false, stopping_ = false;
  std::exception_ptr thread_error_;              // a decode thread that could not start
  int64_t inline_next_ = 0;                      // the context of the next slot decoded inline
  // SLUICE_IMAGE_STATS=1: where the decode's host time goes, printed by quiesce().
  bool print_stats_ = false;
  std::atomic<int64_t> nvjpeg_ns_{0}, context_wait_ns_{0}, driver_wait_ns_{0}, batches_{0}, driver_waits_{0};

  // Driver thread only.
  cuda::DeviceBuffer d_plans_, d_spans_, d_weights_;
  std::vector<uint8_t> fallback_rgb_;
  int64_t rejected_batches_ = 0;
};

GpuImageInput::GpuImageInput(Source& source, const PreprocessSpec& spec, int64_t batch, Device& device,
                             const GpuImageOptions& opt)
    : source_(source), spec_(spec), batch_(batch), opt_(opt),
      sample_bytes_(static_cast<std::size_t>(3) * static_cast<std::size_t>(spec.out_h) * static_cast<std::size_t>(spec.out_w)),
      device_(device) {
  if (!device.is_gpu()) SLUICE_THROW("the GPU image input needs a CUDA device, not ", device.describe());
  if (!source.encoded()) SLUICE_THROW("the GPU image input needs a source of image files, not ", source.describe());
  if (batch < 1 || batch > 65535) throw UsageError(str("image batch size ", batch, " is outside 1..65535"));
  if (spec.out_h < 1 || spec.out_w < 1) SLUICE_THROW("image input: output size ", spec.out_h, "x", spec.out_w);
  device.bind_thread();  // nvJPEG and the buffers below belong to the device's context
  overlap_ = opt.decode_threads > 0;
  const int contexts = overlap_ ? std::max(2, opt.decode_threads) : 2;
  if (contexts > 8) throw UsageError(str("image decode threads: ", contexts, " is more than 8"));
  decoder_ = std::make_unique<NvjpegBatchDecoder>(opt.backend, opt.upsample_interpolate, static_cast<int>(batch), contexts,
                                                  overlap_ && opt.handle_per_context);
  print_stats_ = param_on("SLUICE_IMAGE_STATS");
  const std::size_t B = static_cast<std::size_t>(batch);
  span_capacity_ = B * static_cast<std::size_t>(spec.out_h + spec.out_w);
  weight_capacity_ = span_capacity_ * kNominalTaps;
  encoded_capacity_ = source.max_encoded_bytes(batch);
  std::size_t off = 0;
  auto take = [&off](std::size_t bytes) {
    const std::size_t at = off;
    off += align_up(bytes);
    return at;
  };
  header_ = take(sizeof(SlotHeader));
  plans_ = take(B * sizeof(GpuRowPlan));
  jobs_ = take(B * sizeof(GpuJob));
  spans_ = take(span_capacity_ * sizeof(TapSpan));
  weights_ = take(weight_capacity_ * sizeof(float));
  host_rows_ = take(B * sample_bytes_);
  encoded_ = take(encoded_capacity_);
  total_ = off;
  d_plans_ = cuda::DeviceBuffer(B * sizeof(GpuRowPlan));
  d_spans_ = cuda::DeviceBuffer(span_capacity_ * sizeof(TapSpan));
  d_weights_ = cuda::DeviceBuffer(weight_capacity_ * sizeof(float));
  for (int k = 0; k < contexts; ++k) {
    auto c = std::make_unique<Context>();
    c->index = k;
    if (overlap_) c->stream = cuda::make_priority_stream();
    // Blocking sync: the decode threads sleep in cudaEventSynchronize instead of spinning.
    for (cuda::Event* e : {&c->decoded, &c->released}) {
      cudaEvent_t ev = nullptr;
      CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync));
      *e = cuda::Event(ev);
    }
    c->data.resize(B);
    c->len.resize(B);
    c->out.resize(B);
    contexts_.push_back(std::move(c));
  }
}

bool GpuImageInput::plan_gpu_row(void* slot, int64_t row, const ImageHeader& ih, const EncodedSample& e,
                                 TapTables& tables) {
  const int64_t bytes = static_cast<int64_t>(align_up(static_cast<std::size_t>(ih.width) * ih.height * 3));
  auto* h = at<SlotHeader>(slot, header_);
  if (!ih.gpu_decodable || static_cast<int64_t>(ih.width) * ih.height > opt_.max_gpu_pixels ||
      h->arena_bytes + bytes > opt_.max_arena_bytes)
    return false;
  const uint8_t* data = at<uint8_t>(slot, encoded_) + e.offset;
  if (!decoder_->supports(data, e.size)) return false;
  GpuRowPlan& p = at<GpuRowPlan>(slot, plans_)[row];
  if (!tables.plan_row(ih.height, ih.width, spec_, &p)) return false;
  p.kind = kGpuRowDecoded;
  p.arena_offset = h->arena_bytes;
  h->arena_bytes += bytes;
  h->max_w = std::max(h->max_w, ih.width);
  h->max_h = std::max(h->max_h, ih.height);
  GpuJob& j = at<GpuJob>(slot, jobs_)[h->gpu_jobs++];
  j.row = static_cast<int32_t>(row);
  j.offset = static_cast<int64_t>(e.offset);
  j.size = static_cast<int64_t>(e.size);
  return true;
}

bool GpuImageInput::preprocess_on_host(const uint8_t* data, std::size_t size, std::vector<uint8_t>& rgb, uint8_t* dst,
                                       std::string* error) {
  const auto t0 = std::chrono::steady_clock::now();
  int h = 0, w = 0;
  const bool ok = decode_image_rgb(data, size, rgb, &h, &w, error);
  if (ok) preprocess_rgb(rgb.data(), plan_resize(h, w, spec_), dst);
  cpu_ns_ += nanos_since(t0);
  return ok;
}

void GpuImageInput::mark_bad(BatchRows& rows, int64_t row, int64_t index, std::string reason) const {
  if (opt_.fail_on_bad)
    throw InputError(str("bad sample ", source_.key(index), ": ", reason,
                         " (--on-bad-sample fail stops here; skip records it and goes on)"));
  rows.mark_bad(row, std::move(reason));
}

void GpuImageInput::fill(int64_t first, int64_t count, void* slot, BatchRows& rows) {
  auto* h = at<SlotHeader>(slot, header_);
  *h = SlotHeader{};
  h->first = first;
  h->count = static_cast<int32_t>(count);
  GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
  std::fill(plans, plans + batch_, GpuRowPlan{});  // kGpuRowZero: padding rows of a short batch too

  // Reused per reader thread: no allocation once they have grown.
  thread_local std::vector<EncodedSample> samples;
  thread_local TapTables tables;
  thread_local std::vector<uint8_t> rgb;
  samples.resize(static_cast<std::size_t>(count));
  for (EncodedSample& e : samples) {
    e.offset = e.size = 0;
    e.error.clear();
  }
  tables.reset(at<TapSpan>(slot, spans_), span_capacity_, at<float>(slot, weights_), weight_capacity_, &taps_);
  source_.read_encoded(first, count, at<uint8_t>(slot, encoded_), encoded_capacity_, samples.data());

  for (int64_t k = 0; k < count; ++k) {
    const EncodedSample& e = samples[static_cast<std::size_t>(k)];
    if (!e.error.empty()) {
      mark_bad(rows, k, first + k, e.error);
      continue;
    }
    const uint8_t* data = at<uint8_t>(slot, encoded_) + e.offset;
    ImageHeader ih;
    std::string error;
    if (!parse_image_header(data, e.size, &ih, &error)) {
      mark_bad(rows, k, first + k, error);
      continue;
    }
    if (!(error = resize_misfit(ih.height, ih.width, spec_)).empty()) {
      mark_bad(rows, k, first + k, error);
      continue;
    }
    rows.orig_hw[static_cast<std::size_t>(2 * k)] = ih.height;
    rows.orig_hw[static_cast<std::size_t>(2 * k + 1)] = ih.width;
    if (plan_gpu_row(slot, k, ih, e, tables)) continue;
    // PNG, progressive or CMYK JPEG, a JPEG the hardware decoder refuses, a huge image: the CPU.
    if (preprocess_on_host(data, e.size, rgb, host_row(slot, k), &error)) {
      plans[k].kind = kGpuRowHost;
      ++h->host_rows;
    } else {
      mark_bad(rows, k, first + k, error);
    }
  }
  h->spans_used = tables.spans_used();
  h->weights_used = tables.weights_used();
  if (overlap_) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(slot);
    if (it != pending_.end()) {
      it->second.filled = true;
      cv_.notify_all();
    }
  }
}

void GpuImageInput::enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) {
  const auto* h = at<SlotHeader>(slot, header_);
  if (h->host_rows == 0) return;
  const GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
  auto* dst = static_cast<uint8_t*>(engine_input);
  // Runs of consecutive host rows in one copy each (a whole batch of PNGs: one copy).
  for (int64_t r = 0; r < batch_;) {
    if (plans[r].kind != kGpuRowHost) {
      ++r;
      continue;
    }
    const int64_t s = r;
    while (r < batch_ && plans[r].kind == kGpuRowHost) ++r;
    device.copy_h2d(dst + static_cast<std::size_t>(s) * sample_bytes_, host_row(slot, s),
                    static_cast<std::size_t>(r - s) * sample_bytes_, StreamKind::Copy);
  }
}

// nvJPEG refused the batch (one bad bitstream spoils it): its JPEGs are decoded here instead, on
// the driver thread.  Rare, so simple; a sample the CPU cannot decode either is bad.
void GpuImageInput::decode_batch_on_host(void* slot, BatchRows& rows, void* engine_input, Device& device,
                                         const std::string& why) {
  auto* h = at<SlotHeader>(slot, header_);
  if (rejected_batches_++ == 0)
    log_warn("nvJPEG rejected a batch (", why, "); its JPEGs are decoded on the CPU (said once)");
  GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
  const GpuJob* jobs = at<GpuJob>(slot, jobs_);
  for (int32_t i = 0; i < h->gpu_jobs; ++i) {
    const GpuJob& j = jobs[i];
    std::string error;
    uint8_t* dst = host_row(slot, j.row);
    if (preprocess_on_host(at<uint8_t>(slot, encoded_) + j.offset, static_cast<std::size_t>(j.size), fallback_rgb_,
                           dst, &error)) {
      plans[j.row].kind = kGpuRowHost;
      ++h->host_rows;
      device.copy_h2d(static_cast<uint8_t*>(engine_input) + static_cast<std::size_t>(j.row) * sample_bytes_, dst,
                      sample_bytes_, StreamKind::Copy);
    } else {
      plans[j.row].kind = kGpuRowZero;
      mark_bad(rows, j.row, h->first + j.row, error);
    }
  }
  h->gpu_jobs = 0;
}

bool GpuImageInput::submit(Context& c, void* slot, cudaStream_t stream, std::string* why) {
  auto* h = at<SlotHeader>(slot, header_);
  bool ok = true;
  if (h->gpu_jobs > 0) {
    NvtxRange range("nvJPEG decode", Stage::CopyToGpu);
    // The arena and the state are free once the resize kernel of the context's last batch is done
    // (a host wait: a stream dependency would not hold back the hardware decoder's writes).
    if (c.released_pending) {
      const auto t0 = std::chrono::steady_clock::now();
      CUDA_CHECK(cudaEventSynchronize(c.released));
      context_wait_ns_ += nanos_since(t0);
      c.released_pending = false;
    }
    if (c.arena.bytes() < static_cast<std::size_t>(h->arena_bytes)) {
      // Grown with headroom, so a folder of mixed sizes settles after a few batches.
      const std::size_t bytes = align_up(static_cast<std::size_t>(h->arena_bytes) / 4 * 5);
      c.arena = cuda::DeviceBuffer();
      c.arena = cuda::DeviceBuffer(bytes);
      log_debug("GPU image input: decode arena ", c.index, ": ", bytes >> 20, " MiB");
    }
    auto* base = c.arena.as<uint8_t>();
    const GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
    const GpuJob* jobs = at<GpuJob>(slot, jobs_);
    for (int32_t i = 0; i < h->gpu_jobs; ++i) {
      const GpuJob& j = jobs[i];
      const GpuRowPlan& p = plans[j.row];
      c.data[static_cast<std::size_t>(i)] = at<uint8_t>(slot, encoded_) + j.offset;
      c.len[static_cast<std::size_t>(i)] = static_cast<std::size_t>(j.size);
      nvjpegImage_t& o = c.out[static_cast<std::size_t>(i)];
      o = nvjpegImage_t{};
      o.channel[0] = base + p.arena_offset;
      o.pitch[0] = static_cast<std::size_t>(p.in_w) * 3;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ok = decoder_->decode_on(c.index, h->gpu_jobs, c.data.data(), c.len.data(), c.out.data(), h->max_w, h->max_h,
                             stream, why);
    nvjpeg_ns_ += nanos_since(t0);
  }
  CUDA_CHECK(cudaEventRecord(c.decoded, stream));
  ++batches_;
  return ok;
}

void GpuImageInput::decode_thread(Context& c) {
  set_thread_name(str("jpeg-decode-", c.index));
  device_.bind_thread();
  for (;;) {
    void* slot = nullptr;
    Pending* p = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // The context's next batch, once its slot is filled and the driver has run the resize kernel
      // of the context's last batch.
      cv_.wait(lock, [&] {
        return stopping_ || (!c.queue.empty() && !c.busy && pending_[c.queue.front()].filled);
      });
      if (stopping_) return;
      slot = c.queue.front();
      c.queue.pop_front();
      c.busy = true;
      p = &pending_[slot];  // unordered_map nodes stay put while others come and go
    }
    bool ok = true;
    std::string why;
    std::exception_ptr error;
    try {
      ok = submit(c, slot, c.stream, &why);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    p->submitted = true;
    p->ok = ok;
    p->why = std::move(why);
    p->error = error;
    cv_.notify_all();
  }
}

void GpuImageInput::begin_batch(int64_t seq, void* slot) {
  if (!overlap_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!threads_running_) {
    stopping_ = false;
    for (auto& c : contexts_) {
      Context* cp = c.get();
      cp->thread = std::thread([this, cp] {
        try {
          decode_thread(*cp);
        } catch (...) {
          // Only binding the device can throw here (submit's errors travel with their batch): the
          // driver, which may be waiting for this thread's next batch, throws it.
          std::lock_guard<std::mutex> lock(mutex_);
          thread_error_ = std::current_exception();
          cv_.notify_all();
        }
      });
    }
    threads_running_ = true;
  }
  Pending& p = pending_[slot];
  p = Pending{};
  p.context = static_cast<int>(seq % static_cast<int64_t>(contexts_.size()));
  contexts_[static_cast<std::size_t>(p.context)]->queue.push_back(slot);
  cv_.notify_all();
}

void GpuImageInput::quiesce() {
  try {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      cv_.notify_all();
    }
    for (auto& c : contexts_)
      if (c->thread.joinable()) c->thread.join();
    device_.bind_thread();
    for (auto& c : contexts_) {
      // nvJPEG may still read a slot (the hardware decoder) or write an arena.
      if (c->stream) CUDA_CHECK(cudaStreamSynchronize(c->stream));
      if (c->released_pending) CUDA_CHECK(cudaEventSynchronize(c->released));
      c->released_pending = false;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& c : contexts_) {
      c->queue.clear();
      c->busy = false;
    }
    pending_.clear();
    thread_error_ = nullptr;
    threads_running_ = false;
    stopping_ = false;
  } catch (const std::exception& e) {
    log_error("GPU image input: stopping the decode threads: ", e.what());
  }
  print_stats();
}

void GpuImageInput::print_stats() {
  const int64_t n = batches_.exchange(0);
  const double ms = 1e-6;
  const double nvjpeg = static_cast<double>(nvjpeg_ns_.exchange(0)) * ms, context = static_cast<double>(context_wait_ns_.exchange(0)) * ms,
               driver = static_cast<double>(driver_wait_ns_.exchange(0)) * ms;
  const int64_t waits = driver_waits_.exchange(0);
  if (!print_stats_ || n == 0) return;
  std::fprintf(stderr,
               "[image stats] %s: %lld batches; per batch: nvJPEG call %.3f ms (host), waiting for a free context "
               "%.3f ms, driver waiting for its batch's call %.3f ms (%lld times)\n",
               overlap_ ? str("overlap, ", contexts_.size(), " decode threads, ", opt_.handle_per_context ? "own" : "shared",
                              " handles").c_str()
                        : "on the driver thread",
               static_cast<long long>(n), nvjpeg / static_cast<double>(n), context / static_cast<double>(n),
               driver / static_cast<double>(n), static_cast<long long>(waits));
}

void GpuImageInput::enqueue_decode(void* slot, BatchRows& rows, void* engine_input, Device& device) {
  auto copy = static_cast<cudaStream_t>(device.stream(StreamKind::Copy));
  auto* h = at<SlotHeader>(slot, header_);
  const GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
  Context* c = nullptr;
  Pending p;
  bool announced = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = pending_.find(slot);
    if (it != pending_.end()) {
      // A decode thread makes (or has made) this batch's nvJPEG call on the batch's context.
      announced = true;
      if (!it->second.submitted) {
        const auto t0 = std::chrono::steady_clock::now();
        cv_.wait(lock, [&] { return it->second.submitted || stopping_ || thread_error_; });
        driver_wait_ns_ += nanos_since(t0);
        ++driver_waits_;
        if (!it->second.submitted && thread_error_) std::rethrow_exception(thread_error_);
        if (!it->second.submitted) SLUICE_THROW("GPU image input: stopped while a batch was being decoded");
      }
      p = std::move(it->second);
      pending_.erase(it);
      c = contexts_[static_cast<std::size_t>(p.context)].get();
    } else {
      // Not announced (tests, benchmarks, overlap off): the contexts in turn, nvJPEG called here.
      c = contexts_[static_cast<std::size_t>(inline_next_++ % static_cast<int64_t>(contexts_.size()))].get();
      cv_.wait(lock, [&] { return !c->busy; });
      c->busy = true;
    }
  }
  // Whatever happens below, the context goes back: `released` after everything that read its arena.
  struct Release {
    GpuImageInput* self;
    Context* c;
    cudaStream_t copy;
    ~Release() {
      const cudaError_t e = cudaEventRecord(c->released, copy);
      std::lock_guard<std::mutex> lock(self->mutex_);
      c->released_pending = e == cudaSuccess;
      c->busy = false;
      self->cv_.notify_all();
    }
  } release{this, c, copy};
  if (announced) {
    if (p.error) std::rethrow_exception(p.error);
    // The copy stream's resize kernel reads what nvJPEG decoded on the context's stream.
    CUDA_CHECK(cudaStreamWaitEvent(copy, c->decoded, 0));
  } else {
    cudaStream_t stream = overlap_ ? static_cast<cudaStream_t>(c->stream) : copy;
    p.ok = submit(*c, slot, stream, &p.why);
    if (stream != copy) CUDA_CHECK(cudaStreamWaitEvent(copy, c->decoded, 0));
  }
  if (!p.ok) decode_batch_on_host(slot, rows, engine_input, device, p.why);
  if (h->host_rows == batch_) return;  // nothing for the kernel
  // The plans and tap tables travel from the pinned slot, which stays ours until the decode event.
  CUDA_CHECK(cudaMemcpyAsync(d_plans_.get(), plans, static_cast<std::size_t>(batch_) * sizeof(GpuRowPlan),
                             cudaMemcpyHostToDevice, copy));
  if (h->spans_used > 0)
    CUDA_CHECK(cudaMemcpyAsync(d_spans_.get(), at<TapSpan>(slot, spans_), static_cast<std::size_t>(h->spans_used) * sizeof(TapSpan),
                               cudaMemcpyHostToDevice, copy));
  if (h->weights_used > 0)
    CUDA_CHECK(cudaMemcpyAsync(d_weights_.get(), at<float>(slot, weights_), static_cast<std::size_t>(h->weights_used) * sizeof(float),
                               cudaMemcpyHostToDevice, copy));
  PreprocessLaunch L;
  L.rows = d_plans_.as<GpuRowPlan>();
  L.spans = d_spans_.as<TapSpan>();
  L.weights = d_weights_.as<float>();
  L.arena = c->arena.as<uint8_t>();
  L.out = static_cast<uint8_t*>(engine_input);
  L.batch = static_cast<int>(batch_);
  L.out_h = spec_.out_h;
  L.out_w = spec_.out_w;
  for (int c = 0; c < 3; ++c) L.pad[c] = spec_.pad[static_cast<std::size_t>(c)];
  launch_image_preprocess(L, copy);
}

}  // namespace

std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const GpuImageOptions& options) {
  return std::make_unique<GpuImageInput>(source, spec, batch, device, options);
}

#if __has_include("image/image_input.h")
// The entry point image/image_input.h declares (make_image_input chooses it on a GPU): the job's options, plus
// SLUICE_IMAGE_DECODER=auto|hardware|hybrid to pick the nvJPEG backend (benchmarks, tests) and
// SLUICE_DECODE_OVERLAP=0|1|N: nvJPEG on the driver thread (0, the default), or on 2 (1) or N (2..8)
// decode threads, and SLUICE_DECODE_HANDLES=shared|own: one nvJPEG handle for them, or one each.
std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const ImageInputOptions& options) {
  GpuImageOptions g;
  g.fail_on_bad = options.fail_on_bad;
  // Each checked by core/params.cpp (its table: the values each takes).
  const std::string backend = param_string("SLUICE_IMAGE_DECODER");
  if (backend == "hardware") g.backend = GpuImageOptions::Backend::Hardware;
  else if (backend == "hybrid") g.backend = GpuImageOptions::Backend::Hybrid;
  const int64_t overlap = param_int("SLUICE_DECODE_OVERLAP");   // 0..8
  g.decode_threads = overlap == 1 ? 2 : static_cast<int>(overlap);
  if (param_string("SLUICE_DECODE_HANDLES") == "own") g.handle_per_context = true;
  return make_gpu_image_input(source, spec, batch, device, g);
}
#endif

}  // namespace sluice
