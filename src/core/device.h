#pragma once
// The device the pipeline drives: pinned host memory, three streams (copy, compute, egress) and
// events between them.  The cuda device maps these onto CUDA; the host device implements them with
// plain memory, memcpy and events that are complete as soon as they are recorded, so the same
// pipeline code runs, and is tested, without a GPU.
#include <cstddef>
#include <memory>
#include <string>

namespace sluice {

enum class StreamKind { Copy = 0, Compute = 1, Egress = 2 };

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string describe() const = 0;   // "host", "NVIDIA H200 (0000:19:00.0)"
  virtual bool is_gpu() const = 0;
  virtual int ordinal() const = 0;            // CUDA device ordinal, -1 for the host
  // Makes this device current for the calling thread (every pipeline thread calls it first).
  virtual void bind_thread() = 0;

  // Pinned (page-locked) host memory, allocated once at start-up, never in the steady state.
  virtual void* pinned_alloc(std::size_t bytes) = 0;
  virtual void pinned_free(void* p) = 0;

  // The native stream handle (cudaStream_t) to hand to Engine::forward; nullptr on the host.
  virtual void* stream(StreamKind s) = 0;
  virtual void copy_h2d(void* dst, const void* src, std::size_t bytes, StreamKind s) = 0;
  virtual void copy_d2h(void* dst, const void* src, std::size_t bytes, StreamKind s) = 0;

  // Events are created once (create_event returns a small integer id) and re-recorded per batch.
  // Timing events (timing = true) can be measured with elapsed(); others are cheaper (CUDA:
  // cudaEventDisableTiming).
  virtual int create_event(bool timing = false) = 0;
  virtual void record(int event, StreamKind s) = 0;
  // Makes stream `s` wait for the event's last recording (no host wait).
  virtual void stream_wait(StreamKind s, int event) = 0;
  // Blocks the calling thread until the event's last recording has completed (the monitor thread).
  virtual void event_sync(int event) = 0;
  // Seconds between the last recordings of two completed timing events (on the device's clock).
  virtual double elapsed(int start_event, int end_event) = 0;
  // Blocks until all streams are idle (start-up and shut-down only).
  virtual void synchronize() = 0;
};

std::unique_ptr<Device> create_host_device();
#ifdef SLUICE_HAVE_CUDA
std::unique_ptr<Device> create_cuda_device(int ordinal);
#endif

}  // namespace sluice
