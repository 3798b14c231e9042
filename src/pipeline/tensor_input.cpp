// A tensor source (synthetic, HDF5, .npy) as the engine's input: the reader threads read whole
// samples into the pinned slot, the driver copies the batch to the device in one piece.
#include <cstring>

#include "core/error.h"
#include "pipeline/batch_input.h"

namespace sluice {

namespace {

class TensorInput final : public BatchInput {
 public:
  TensorInput(Source& source, int64_t batch, std::size_t batch_bytes)
      : source_(source), batch_(batch), bytes_(batch_bytes), sample_bytes_(source.sample_bytes()) {
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
  }

  void enqueue_copy(void* slot, const BatchRows& rows, void* engine_input, Device& device) override {
    device.copy_h2d(engine_input, slot, bytes_, StreamKind::Copy);
  }

 private:
  Source& source_;
  int64_t batch_;
  std::size_t bytes_, sample_bytes_;
};

}  // namespace

std::unique_ptr<BatchInput> make_tensor_input(Source& source, int64_t batch, std::size_t batch_bytes) {
  return std::make_unique<TensorInput>(source, batch, batch_bytes);
}

}  // namespace sluice
