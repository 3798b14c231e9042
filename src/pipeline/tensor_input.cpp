// A tensor source (synthetic, HDF5, .npy) as the engine's input: the reader threads read whole
// samples into the pinned slot, the driver copies the batch to the device in one piece.  Float
// samples holding NaN or Inf are marked kRowNonFinite (the report counts them) or, with
// --on-nan fail, end the run: the scan is a pass over bytes the reader just wrote, still in cache.
#include <atomic>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/batch_input.h"

namespace sluice {

namespace {

class TensorInput final : public BatchInput {
 public:
  TensorInput(Source& source, int64_t batch, std::size_t batch_bytes, NonFinite policy)
      : source_(source), batch_(batch), bytes_(batch_bytes), sample_bytes_(source.sample_bytes()), policy_(policy) {
    if (source_.encoded()) SLUICE_THROW("a tensor input over an encoded source (", source_.describe(), ")");
  }

  std::string describe() const override { return source_.describe(); }
  std::size_t slot_bytes() const override { return bytes_; }

  void fill(int64_t first, int64_t count, void* slot, BatchRows& rows) override {
    auto* dst = static_cast<uint8_t*>(slot);
    source_.read(first, count, dst);
    // The padding rows of a short last batch are zeros, so results never depend on stale data.
    const std::size_t used = static_cast<std::size_t>(count) * sample_bytes_;
    if (used < bytes_) std::memset(dst + used, 0, bytes_ - used);
    if (source_.dtype() == DType::F32 && policy_ != NonFinite::Ignore) mark_nonfinite(first, count, dst, rows);
  }

  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override {
    device.copy_h2d(engine_input, slot, bytes_, StreamKind::Copy);
  }

 private:
  static bool finite_row(const uint8_t* row, std::size_t floats) {
    // Exponent bits all ones: Inf or NaN.  OR-ing a flag keeps the loop branch-free.
    uint32_t bad = 0;
    for (std::size_t i = 0; i < floats; ++i) {
      uint32_t bits;
      std::memcpy(&bits, row + 4 * i, 4);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
  }

  void mark_nonfinite(int64_t first, int64_t count, const uint8_t* dst, BatchRows& rows) {
    const std::size_t floats = sample_bytes_ / 4;
    for (int64_t r = 0; r < count; ++r) {
      if (finite_row(dst + static_cast<std::size_t>(r) * sample_bytes_, floats)) continue;
      if (policy_ == NonFinite::Fail)
        throw InputError(str("sample ", first + r, " of ", source_.describe(), " holds NaN or Inf values (--on-nan fail; ",
                             "--on-nan warn computes such samples as given and marks them in /sample_status)"));
      rows.status[static_cast<std::size_t>(r)] = kRowNonFinite;
      if (!warned_.exchange(true))
        log_warn("sample ", first + r, " holds NaN or Inf values: computed as given, marked in /sample_status (2) and ",
                 "counted in the report (--on-nan fail stops the job instead)");
    }
  }

  Source& source_;
  int64_t batch_;
  std::size_t bytes_, sample_bytes_;
  NonFinite policy_;
  std::atomic<bool> warned_{false};
};

}  // namespace

std::unique_ptr<BatchInput> make_tensor_input(Source& source, int64_t batch, std::size_t batch_bytes, NonFinite policy) {
  return std::make_unique<TensorInput>(source, batch, batch_bytes, policy);
}

}  // namespace sluice
