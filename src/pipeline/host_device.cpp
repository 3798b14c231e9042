// The host device: the pipeline's device interface on plain memory.  Copies happen at once and an
// event is complete as soon as it is recorded, so every stage, queue and slot of the pipeline runs
// (and is tested) exactly as on a GPU, minus the asynchrony.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace sluice {

namespace {

class HostDevice final : public Device {
 public:
  std::string describe() const override { return "host"; }
  bool is_gpu() const override { return false; }
  int ordinal() const override { return -1; }
  void bind_thread() override { set_thread_device(-1); }

  void* pinned_alloc(std::size_t bytes) override {
    // 64-byte alignment matches what cudaHostAlloc gives and keeps SIMD loads aligned.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    SLUICE_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void pinned_free(void* p) override { std::free(p); }

  void* stream(StreamKind) override { return nullptr; }
  void copy_h2d(void* dst, const void* src, std::size_t bytes, StreamKind) override { std::memcpy(dst, src, bytes); }
  void copy_d2h(void* dst, const void* src, std::size_t bytes, StreamKind) override { std::memcpy(dst, src, bytes); }

  int create_event(bool) override {
    std::lock_guard<std::mutex> lock(mutex_);
    stamps_.push_back(0);
    return static_cast<int>(stamps_.size()) - 1;
  }
  void record(int event, StreamKind) override {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    std::lock_guard<std::mutex> lock(mutex_);
    stamps_.at(static_cast<std::size_t>(event)) = now;
  }
  void stream_wait(StreamKind, int) override {}
  void event_sync(int) override {}
  double elapsed(int a, int b) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<double>(stamps_.at(static_cast<std::size_t>(b)) - stamps_.at(static_cast<std::size_t>(a))) * 1e-9;
  }
  void synchronize() override {}

 private:
  std::mutex mutex_;
  std::vector<int64_t> stamps_;
};

}  // namespace

std::unique_ptr<Device> create_host_device() { return std::make_unique<HostDevice>(); }

}  // namespace sluice
