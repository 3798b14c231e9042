#include "image/cuda/nvjpeg_decoder.h"

#include <algorithm>

#include "core/log.h"

namespace sluice {

const char* nvjpeg_status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
  }
  return "NVJPEG_STATUS_UNKNOWN";
}

namespace {

nvjpegStatus_t create(nvjpegBackend_t backend, unsigned flags, nvjpegHandle_t* h) {
  *h = nullptr;
  return nvjpegCreateEx(backend, nullptr, nullptr, flags, h);
}

}  // namespace

NvjpegBatchDecoder::NvjpegBatchDecoder(GpuImageOptions::Backend backend, bool upsample_interpolate, int max_batch,
                                       int states, bool own_handles)
    : interpolate_(upsample_interpolate), max_batch_(max_batch), states_(static_cast<std::size_t>(std::max(1, states))) {
  const unsigned flags = upsample_interpolate ? unsigned{NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION} : 0u;
  nvjpegHandle_t h = nullptr;
  if (backend != GpuImageOptions::Backend::Hybrid) {
    // GPUs without JPEG engines refuse the hardware backend at creation (NVJPEG_STATUS_ARCH_MISMATCH
    // or NVJPEG_STATUS_JPEG_NOT_SUPPORTED): that is how Auto finds out.
    const nvjpegStatus_t st = create(NVJPEG_BACKEND_HARDWARE, flags, &h);
    if (st == NVJPEG_STATUS_SUCCESS) {
      hardware_ = true;
    } else if (backend == GpuImageOptions::Backend::Hardware) {
      throw Error(str("nvJPEG: the hardware decoder was asked for but nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE) failed: ",
                      nvjpeg_status_name(st), " (this GPU may have no JPEG engine; use the hybrid backend)"));
    } else {
      log_debug("nvJPEG: no hardware decoder (", nvjpeg_status_name(st), "), using GPU_HYBRID");
    }
  }
  if (!hardware_) NVJPEG_CHECK(create(NVJPEG_BACKEND_GPU_HYBRID, flags, &h));
  handle_ = cuda::NvjpegHandle(h);
  for (State& s : states_) {
    s.handle = handle_;
    if (own_handles) {
      // A handle the library refuses (it may limit hardware handles) leaves the state on the shared one.
      nvjpegHandle_t own = nullptr;
      const nvjpegStatus_t st = create(hardware_ ? NVJPEG_BACKEND_HARDWARE : NVJPEG_BACKEND_GPU_HYBRID, flags, &own);
      if (st == NVJPEG_STATUS_SUCCESS) {
        state_handles_.emplace_back(own);
        s.handle = own;
      } else {
        log_warn("nvJPEG: a decoding state's own handle: ", nvjpeg_status_name(st), "; it shares the first handle");
      }
    }
    nvjpegJpegState_t st = nullptr;
    NVJPEG_CHECK(nvjpegJpegStateCreate(s.handle, &st));
    s.state = cuda::NvjpegState(st);
    s.done = cuda::make_event();
  }
}

NvjpegBatchDecoder::~NvjpegBatchDecoder() {
  // A state may still be decoding on the device (decode_on's callers wait themselves); its
  // buffers must outlive that work.
  for (State& s : states_)
    if (s.used) (void)cudaEventSynchronize(s.done);
}

std::string NvjpegBatchDecoder::describe() const {
  return str("nvJPEG ", hardware_ ? "hardware" : "GPU-hybrid", interpolate_ ? " (interpolated chroma)" : "");
}

bool NvjpegBatchDecoder::supports(const uint8_t* data, std::size_t size) {
  if (!hardware_) return true;
  nvjpegJpegStream_t js = nullptr;
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    if (free_streams_.empty()) {
      NVJPEG_CHECK(nvjpegJpegStreamCreate(handle_, &js));
      streams_.emplace_back(js);
    } else {
      js = free_streams_.back();
      free_streams_.pop_back();
    }
  }
  // A stream nvJPEG cannot parse is not for the batched decoder; the CPU decoder will say what is
  // wrong with it.  nvjpegDecodeBatchedSupported sets 0 for "supported".
  int unsupported = 1;
  if (nvjpegJpegStreamParseHeader(handle_, data, size, js) == NVJPEG_STATUS_SUCCESS)
    NVJPEG_CHECK(nvjpegDecodeBatchedSupported(handle_, js, &unsupported));
  std::lock_guard<std::mutex> lock(streams_mutex_);
  free_streams_.push_back(js);
  return unsupported == 0;
}

bool NvjpegBatchDecoder::decode(int n, const unsigned char* const* data, const std::size_t* lengths, nvjpegImage_t* out,
                                int max_w, int max_h, cudaStream_t stream, std::string* error) {
  if (n <= 0) return true;
  const int k = next_;
  next_ = (next_ + 1) % states();
  State& s = states_[static_cast<std::size_t>(k)];
  // The other states are the ones the latest batches are still using; this one was used
  // states() batches ago and must be done before its buffers take new bitstreams.
  if (s.used) CUDA_CHECK(cudaEventSynchronize(s.done));
  const bool ok = decode_on(k, n, data, lengths, out, max_w, max_h, stream, error);
  CUDA_CHECK(cudaEventRecord(s.done, stream));
  s.used = true;
  return ok;
}

bool NvjpegBatchDecoder::decode_on(int state, int n, const unsigned char* const* data, const std::size_t* lengths,
                                   nvjpegImage_t* out, int max_w, int max_h, cudaStream_t stream, std::string* error) {
  if (n <= 0) return true;
  if (state < 0 || state >= states()) SLUICE_THROW("nvJPEG: decoding state ", state, " of ", states());
  State& s = states_[static_cast<std::size_t>(state)];
  if (hardware_ && !s.preallocated) {
    // Sizes the hardware decoder's buffers once for the batch and image size seen first (a
    // memory pool instead of allocations per batch).  Only a hint: a failure costs speed, not
    // correctness.
    s.preallocated = true;
    const nvjpegStatus_t st = nvjpegDecodeBatchedPreAllocate(s.handle, s.state, max_batch_, max_w, max_h, NVJPEG_CSS_444,
                                                             NVJPEG_OUTPUT_RGBI);
    if (st != NVJPEG_STATUS_SUCCESS) log_debug("nvjpegDecodeBatchedPreAllocate: ", nvjpeg_status_name(st));
  }
  if (s.batch != n) {
    NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(s.handle, s.state, n, 1, NVJPEG_OUTPUT_RGBI));
    s.batch = n;
  }
  const nvjpegStatus_t st = nvjpegDecodeBatched(s.handle, s.state, data, lengths, out, stream);
  if (st == NVJPEG_STATUS_SUCCESS) return true;
  // nvjpegDecodeBatchedInitialize also resets a state after a failed batch.
  s.batch = -1;
  if (st == NVJPEG_STATUS_ALLOCATOR_FAILURE) {
    // Not the data's fault: the device is out of memory, and every later batch would fall back to
    // the CPU without saying so.  (Other device failures surface at the next CUDA call.)
    throw Error(format_failure("nvjpegDecodeBatched", __FILE__, __LINE__,
                               str(nvjpeg_status_name(st), " (out of device memory for ", n, " images)")));
  }
  *error = nvjpeg_status_name(st);
  return false;
}

}  // namespace sluice
