// The CUDA device of the pipeline: pinned slots, three non-blocking streams and events between
// them (core/device.h).  Nothing here synchronizes the whole device except synchronize(), which
// the pipeline calls only at start-up and shut-down.
#include <array>
#include <deque>
#include <mutex>

#include "core/cuda/cuda_raii.h"
#include "core/device.h"
#include "core/error.h"

namespace sluice {
namespace {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (ordinal < 0 || ordinal >= count)
      throw UsageError(str("CUDA device ", ordinal, " does not exist (this node has ", count, " GPUs)"));
    CUDA_CHECK(cudaSetDevice(ordinal));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    char bus[32] = {0};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal));
    description_ = str(prop.name, " (", bus, ")");
    // Non-blocking streams do not serialize with the legacy default stream, which libraries may
    // use behind our back.
    for (auto& s : streams_) s = cuda::make_stream();
    // The copy stream also decodes images (nvJPEG's kernels, the resize kernel): at high priority
    // those small kernels start as soon as SMs free up instead of queueing behind a whole forward
    // pass on the compute stream, so decoding the next batch overlaps the model.
    streams_[index(StreamKind::Copy)] = cuda::make_priority_stream();
  }

  ~CudaDevice() override {
    // Work still queued may read slots or events about to be freed.
    (void)cudaSetDevice(ordinal_);
    for (auto& s : streams_) (void)cudaStreamSynchronize(s);
  }

  std::string describe() const override { return description_; }
  bool is_gpu() const override { return true; }
  int ordinal() const override { return ordinal_; }

  void bind_thread() override {
    CUDA_CHECK(cudaSetDevice(ordinal_));
    set_thread_device(ordinal_);
  }

  void* pinned_alloc(std::size_t bytes) override {
    void* p = nullptr;
    // Portable: the slot stays page-locked for every context, should another thread's current
    // device differ.
    CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
    return p;
  }
  void pinned_free(void* p) override {
    if (p) CUDA_CHECK(cudaFreeHost(p));
  }

  void* stream(StreamKind s) override { return streams_[index(s)].get(); }

  void copy_h2d(void* dst, const void* src, std::size_t bytes, StreamKind s) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, streams_[index(s)]));
  }
  void copy_d2h(void* dst, const void* src, std::size_t bytes, StreamKind s) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, streams_[index(s)]));
  }

  int create_event(bool timing) override {
    std::lock_guard<std::mutex> lock(events_mutex_);
    // Blocking sync: the monitor thread sleeps in event_sync instead of spinning on a core the
    // reader and writer threads need.  Ordering-only events skip timing: recording is cheaper.
    cudaEvent_t e = nullptr;
    const unsigned flags = cudaEventBlockingSync | (timing ? 0u : unsigned{cudaEventDisableTiming});
    CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
    events_.emplace_back(e);
    return static_cast<int>(events_.size()) - 1;
  }
  void record(int event, StreamKind s) override {
    CUDA_CHECK(cudaEventRecord(event_at(event), streams_[index(s)]));
  }
  void stream_wait(StreamKind s, int event) override {
    CUDA_CHECK(cudaStreamWaitEvent(streams_[index(s)], event_at(event), 0));
  }
  void event_sync(int event) override { CUDA_CHECK(cudaEventSynchronize(event_at(event))); }
  double elapsed(int start_event, int end_event) override {
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, event_at(start_event), event_at(end_event)));
    return ms * 1e-3;
  }
  void synchronize() override {
    for (auto& s : streams_) CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  static std::size_t index(StreamKind s) { return static_cast<std::size_t>(s); }
  // Events are created at start-up, before the pipeline threads run; a deque keeps references
  // stable while it grows.
  cudaEvent_t event_at(int event) const {
    if (event < 0 || static_cast<std::size_t>(event) >= events_.size())
      SLUICE_THROW("cuda device: event ", event, " was never created");
    return events_[static_cast<std::size_t>(event)].get();
  }

  int ordinal_;
  std::string description_;
  std::array<cuda::Stream, 3> streams_;
  std::mutex events_mutex_;
  std::deque<cuda::Event> events_;
};

}  // namespace

std::unique_ptr<Device> create_cuda_device(int ordinal) { return std::make_unique<CudaDevice>(ordinal); }

}  // namespace sluice
