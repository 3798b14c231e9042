#pragma once
// nvJPEG's batched decoder behind two calls: supports() (reader threads: would the batched decoder
// take this JPEG?) and decode() (driver thread: a batch to interleaved RGB on a stream).
//
// Backends: the hardware JPEG engines of A100/H100/H200-class GPUs (NVJPEG_BACKEND_HARDWARE:
// baseline, single-scan JPEGs; nvjpegDecodeBatchedSupported says which) or, where the GPU has none,
// GPU_HYBRID (Huffman decoding helped by the GPU for large batches).  The decoder holds `states`
// decoding states (nvjpegJpegState_t, one per batch in flight); decode() alternates between them
// itself, decode_on() leaves the choice, and the waiting, to the caller.
//
// The hardware backend writes its output when nvjpegDecodeBatched is called, not when the stream
// reaches the decode (seen by torchcodec's authors on H100 with nvJPEG 12.3 to 13.2: a
// cudaStreamWaitEvent before the call does not hold the write back, a host wait does).  So a
// caller must know on the host that nothing still reads the output buffers it passes, and that
// the state's previous decode is done, before it calls.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "image/cuda/gpu_image_input.h"
#include "image/cuda/nvjpeg_check.h"

namespace sluice {

class NvjpegBatchDecoder {
 public:
  // own_handles: each state gets an nvJPEG handle of its own (the same backend), so batches on
  // different states share nothing inside nvJPEG; otherwise all states use one handle.
  NvjpegBatchDecoder(GpuImageOptions::Backend backend, bool upsample_interpolate, int max_batch, int states = 2,
                     bool own_handles = false);
  ~NvjpegBatchDecoder();
  NvjpegBatchDecoder(const NvjpegBatchDecoder&) = delete;
  NvjpegBatchDecoder& operator=(const NvjpegBatchDecoder&) = delete;

  bool hardware() const { return hardware_; }
  int states() const { return static_cast<int>(states_.size()); }
  std::string describe() const;

  // Thread-safe: whether the batched decoder takes this JPEG (the hardware backend refuses some
  // baseline JPEGs, e.g. 4:1:1 subsampling).  The hybrid backend is asked nothing: true.
  bool supports(const uint8_t* data, std::size_t size);

  // One thread at a time.  Decodes n JPEGs to interleaved RGB (out[i].channel[0], pitch[0]) on
  // `stream`, with the states in turn; a state is reused once the batch that last used it is
  // decoded (a host wait on its event).  Returns false, with `error` set, when nvJPEG rejects the
  // batch (a bad bitstream): the caller decodes those samples another way.  CUDA failures throw.
  // max_w/max_h: the largest image of the batch (sizes the hardware decoder's buffers once).
  bool decode(int n, const unsigned char* const* data, const std::size_t* lengths, nvjpegImage_t* out, int max_w,
              int max_h, cudaStream_t stream, std::string* error);
  // The same with state `state` (0..states()-1) and no wait: the caller makes sure on the host that
  // the state's previous batch is decoded and that nothing reads `out` any more.  Different states
  // may decode on different threads at once (nvJPEG's handle is thread-safe, a state is not).
  bool decode_on(int state, int n, const unsigned char* const* data, const std::size_t* lengths, nvjpegImage_t* out,
                 int max_w, int max_h, cudaStream_t stream, std::string* error);

 private:
  struct State {
    nvjpegHandle_t handle = nullptr;  // the handle the state was made with (handles_ owns it)
    cuda::NvjpegState state;
    cuda::Event done;        // decode() only: recorded after the last decode that used this state
    int batch = -1;          // the size nvjpegDecodeBatchedInitialize was last called with
    bool used = false;
    bool preallocated = false;
  };

  cuda::NvjpegHandle handle_;                      // supports(), and every state without own_handles
  std::vector<cuda::NvjpegHandle> state_handles_;  // own_handles: one per state
  bool hardware_ = false;
  bool interpolate_ = false;
  int max_batch_ = 0;
  std::vector<State> states_;
  int next_ = 0;
  std::mutex streams_mutex_;
  std::vector<nvjpegJpegStream_t> free_streams_;   // parsers for supports(), one per concurrent caller
  std::vector<cuda::NvjpegStream> streams_;        // owns them
};

}  // namespace sluice
