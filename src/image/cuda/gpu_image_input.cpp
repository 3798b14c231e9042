// The GPU image input (gpu_image_input.h): reader threads lay each batch out in its pinned slot,
// the driver decodes the JPEGs with nvJPEG and runs one preprocessing kernel over the batch.
//
// A slot holds, each part 256-byte aligned:
//   SlotHeader | GpuRowPlan[B] | GpuJob[B] | TapSpan[...] | float weights[...] |
//   uint8 host rows [B, 3, H, W] (the CPU path's output, at each row's place) | the files' bytes
// The tap tables (tap_tables.h) have a fixed room; a sample whose tables no longer fit goes the CPU
// path, so the slot size is fixed.
#include "image/cuda/gpu_image_input.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/cuda/cuda_raii.h"
#include "core/log.h"
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

  std::string describe() const override {
    return str(source_.describe(), ", ", decoder_->describe(), " + CPU for the rest, preprocessed on the GPU");
  }
  std::size_t slot_bytes() const override { return total_; }
  bool has_sizes() const override { return true; }
  void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) override;
  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override;
  void enqueue_decode(void* slot, BatchRows& rows, void* engine_input, Device& device) override;
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

  // Driver thread only.
  cuda::DeviceBuffer d_plans_, d_spans_, d_weights_, arena_;
  std::vector<const unsigned char*> job_data_;
  std::vector<std::size_t> job_len_;
  std::vector<nvjpegImage_t> job_out_;
  std::vector<uint8_t> fallback_rgb_;
  int64_t rejected_batches_ = 0;
};

GpuImageInput::GpuImageInput(Source& source, const PreprocessSpec& spec, int64_t batch, Device& device,
                             const GpuImageOptions& opt)
    : source_(source), spec_(spec), batch_(batch), opt_(opt),
      sample_bytes_(static_cast<std::size_t>(3) * static_cast<std::size_t>(spec.out_h) * static_cast<std::size_t>(spec.out_w)) {
  if (!device.is_gpu()) SLUICE_THROW("the GPU image input needs a CUDA device, not ", device.describe());
  if (!source.encoded()) SLUICE_THROW("the GPU image input needs a source of image files, not ", source.describe());
  if (batch < 1 || batch > 65535) throw UsageError(str("image batch size ", batch, " is outside 1..65535"));
  if (spec.out_h < 1 || spec.out_w < 1) SLUICE_THROW("image input: output size ", spec.out_h, "x", spec.out_w);
  device.bind_thread();  // nvJPEG and the buffers below belong to the device's context
  decoder_ = std::make_unique<NvjpegBatchDecoder>(opt.backend, opt.upsample_interpolate, static_cast<int>(batch));
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
  job_data_.resize(B);
  job_len_.resize(B);
  job_out_.resize(B);
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

void GpuImageInput::enqueue_decode(void* slot, BatchRows& rows, void* engine_input, Device& device) {
  auto stream = static_cast<cudaStream_t>(device.stream(StreamKind::Copy));
  auto* h = at<SlotHeader>(slot, header_);
  const GpuRowPlan* plans = at<GpuRowPlan>(slot, plans_);
  if (h->gpu_jobs > 0) {
    if (arena_.bytes() < static_cast<std::size_t>(h->arena_bytes)) {
      // Earlier batches may still decode into or read the old arena (same stream).  Grown with
      // headroom, so a folder of mixed sizes settles after a few batches.
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::size_t bytes = align_up(static_cast<std::size_t>(h->arena_bytes) / 4 * 5);
      arena_ = cuda::DeviceBuffer();
      arena_ = cuda::DeviceBuffer(bytes);
      log_debug("GPU image input: decode arena ", bytes >> 20, " MiB");
    }
    auto* base = arena_.as<uint8_t>();
    const GpuJob* jobs = at<GpuJob>(slot, jobs_);
    for (int32_t i = 0; i < h->gpu_jobs; ++i) {
      const GpuJob& j = jobs[i];
      const GpuRowPlan& p = plans[j.row];
      job_data_[static_cast<std::size_t>(i)] = at<uint8_t>(slot, encoded_) + j.offset;
      job_len_[static_cast<std::size_t>(i)] = static_cast<std::size_t>(j.size);
      nvjpegImage_t& o = job_out_[static_cast<std::size_t>(i)];
      o = nvjpegImage_t{};
      o.channel[0] = base + p.arena_offset;
      o.pitch[0] = static_cast<std::size_t>(p.in_w) * 3;
    }
    std::string why;
    if (!decoder_->decode(h->gpu_jobs, job_data_.data(), job_len_.data(), job_out_.data(), h->max_w, h->max_h, stream,
                         &why))
      decode_batch_on_host(slot, rows, engine_input, device, why);
  }
  if (h->host_rows == batch_) return;  // nothing for the kernel
  // The plans and tap tables travel from the pinned slot, which stays ours until the decode event.
  CUDA_CHECK(cudaMemcpyAsync(d_plans_.get(), plans, static_cast<std::size_t>(batch_) * sizeof(GpuRowPlan),
                             cudaMemcpyHostToDevice, stream));
  if (h->spans_used > 0)
    CUDA_CHECK(cudaMemcpyAsync(d_spans_.get(), at<TapSpan>(slot, spans_), static_cast<std::size_t>(h->spans_used) * sizeof(TapSpan),
                               cudaMemcpyHostToDevice, stream));
  if (h->weights_used > 0)
    CUDA_CHECK(cudaMemcpyAsync(d_weights_.get(), at<float>(slot, weights_), static_cast<std::size_t>(h->weights_used) * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
  PreprocessLaunch L;
  L.rows = d_plans_.as<GpuRowPlan>();
  L.spans = d_spans_.as<TapSpan>();
  L.weights = d_weights_.as<float>();
  L.arena = arena_.as<uint8_t>();
  L.out = static_cast<uint8_t*>(engine_input);
  L.batch = static_cast<int>(batch_);
  L.out_h = spec_.out_h;
  L.out_w = spec_.out_w;
  L.pad_value = spec_.pad_value;
  launch_image_preprocess(L, stream);
}

}  // namespace

std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const GpuImageOptions& options) {
  return std::make_unique<GpuImageInput>(source, spec, batch, device, options);
}

#if __has_include("image/image_input.h")
// The entry point image/image_input.h declares (make_image_input chooses it on a GPU): the job's options, plus
// SLUICE_IMAGE_DECODER=auto|hardware|hybrid to pick the nvJPEG backend (benchmarks, tests).
std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const ImageInputOptions& options) {
  GpuImageOptions g;
  g.fail_on_bad = options.fail_on_bad;
  if (const char* b = std::getenv("SLUICE_IMAGE_DECODER")) {
    const std::string v = b;
    if (v == "hardware") g.backend = GpuImageOptions::Backend::Hardware;
    else if (v == "hybrid") g.backend = GpuImageOptions::Backend::Hybrid;
    else if (v != "auto" && !v.empty())
      throw UsageError(str("SLUICE_IMAGE_DECODER=", v, ": expected auto, hardware or hybrid"));
  }
  return make_gpu_image_input(source, spec, batch, device, g);
}
#endif

}  // namespace sluice
