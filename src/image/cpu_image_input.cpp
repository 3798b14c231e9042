// Image files decoded and preprocessed on the reader threads.  The in-slot holds the finished model
// input [B, 3, H, W] uint8, so the file bytes go to a per-thread buffer of their own first; the
// driver then copies the slot to the device in one piece (a memcpy on the host device).
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "image/image_input.h"

namespace sluice {

namespace {

// What one fill() call works in: the batch's file bytes, where each sample landed, the decoded
// image and the resize buffers.  A few exist (one per reader thread that is filling at a time),
// reused across batches, so the steady state allocates only when an image is larger than any
// before.
struct Scratch {
  std::vector<uint8_t> bytes;
  std::vector<EncodedSample> where;
  std::vector<uint8_t> rgb;
  ResizeScratch resize;
};

class CpuImageInput final : public BatchInput {
 public:
  CpuImageInput(Source& source, const PreprocessSpec& spec, int64_t batch, const ImageInputOptions& options)
      : source_(source), spec_(spec), batch_(batch), options_(options),
        sample_bytes_(3 * static_cast<std::size_t>(spec.out_h) * static_cast<std::size_t>(spec.out_w)),
        encoded_bytes_(source.max_encoded_bytes(batch)) {
    if (!source_.encoded()) SLUICE_THROW("an image input over a tensor source (", source_.describe(), ")");
    SLUICE_CHECK(spec.out_h > 0 && spec.out_w > 0 && batch > 0, "image input of size ", spec.out_h, "x", spec.out_w);
  }

  std::string describe() const override {
    return str(source_.describe(), "; decoded on the CPU; ", describe_preprocess(spec_));
  }
  std::size_t slot_bytes() const override { return static_cast<std::size_t>(batch_) * sample_bytes_; }
  bool has_sizes() const override { return true; }
  double cpu_decode_seconds() const override { return decode_time_.seconds(); }

  void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) override {
    auto* out = static_cast<uint8_t*>(slot);
    Lease lease(*this);
    Scratch& s = *lease.scratch;
    source_.read_encoded(first, count, s.bytes.data(), s.bytes.size(), s.where.data());
    for (int64_t k = 0; k < count; ++k) {
      uint8_t* dst = out + static_cast<std::size_t>(k) * sample_bytes_;
      const EncodedSample& e = s.where[static_cast<std::size_t>(k)];
      std::string reason = e.error;
      if (reason.empty()) {
        ScopedTime busy(decode_time_);
        int h = 0, w = 0;
        if (decode_image_rgb(s.bytes.data() + e.offset, e.size, s.rgb, &h, &w, &reason) &&
            (reason = resize_misfit(h, w, spec_)).empty()) {
          preprocess_rgb(s.rgb.data(), plan_resize(h, w, spec_), dst, s.resize);
          rows.orig_hw[static_cast<std::size_t>(2 * k)] = h;
          rows.orig_hw[static_cast<std::size_t>(2 * k + 1)] = w;
          continue;
        }
      }
      if (options_.fail_on_bad)
        throw InputError(str("bad sample '", source_.key(first + k), "' (index ", first + k, "): ", reason,
                             " (--on-bad-sample skip records bad samples and goes on)"));
      // Zeros go to the model; the row's status tells readers of the outputs to ignore it.
      std::memset(dst, 0, sample_bytes_);
      rows.mark_bad(k, reason);
    }
    // The padding rows of a short last batch are zeros, so results never depend on stale data.
    const std::size_t used = static_cast<std::size_t>(count) * sample_bytes_;
    if (used < slot_bytes()) std::memset(out + used, 0, slot_bytes() - used);
  }

  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override {
    device.copy_h2d(engine_input, slot, slot_bytes(), StreamKind::Copy);
  }

 private:
  // Takes a scratch for one fill() and gives it back however the call ends.
  struct Lease {
    explicit Lease(CpuImageInput& in) : owner(in) {
      {
        std::lock_guard<std::mutex> lock(in.mutex_);
        if (!in.free_.empty()) {
          scratch = std::move(in.free_.back());
          in.free_.pop_back();
        }
      }
      if (!scratch) {
        scratch = std::make_unique<Scratch>();
        scratch->bytes.resize(in.encoded_bytes_);
        scratch->where.resize(static_cast<std::size_t>(in.batch_));
      }
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(owner.mutex_);
      owner.free_.push_back(std::move(scratch));
    }
    CpuImageInput& owner;
    std::unique_ptr<Scratch> scratch;
  };

  Source& source_;
  PreprocessSpec spec_;
  int64_t batch_;
  ImageInputOptions options_;
  std::size_t sample_bytes_, encoded_bytes_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Scratch>> free_;
  TimeCounter decode_time_;
};

}  // namespace

std::unique_ptr<BatchInput> make_cpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 const ImageInputOptions& options) {
  return std::make_unique<CpuImageInput>(source, spec, batch, options);
}

std::unique_ptr<BatchInput> make_image_input(Source& source, const PreprocessSpec& spec, int64_t batch, Device& device,
                                             const ImageInputOptions& options) {
#if defined(SLUICE_HAVE_CUDA) && defined(SLUICE_HAVE_GPU_IMAGES)
  if (device.is_gpu()) return make_gpu_image_input(source, spec, batch, device, options);
#endif
  // On a GPU without the nvJPEG input this is still correct: the CPU decodes and the finished
  // batch goes over in one H2D copy.
  return make_cpu_image_input(source, spec, batch, options);
}

}  // namespace sluice
