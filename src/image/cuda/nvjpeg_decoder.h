#pragma once
// nvJPEG's batched decoder behind two calls: supports() (reader threads: would the batched decoder
// take this JPEG?) and decode() (driver thread: a batch to interleaved RGB on a stream).
//
// Backends: the hardware JPEG engines of A100/H100/H200-class GPUs (NVJPEG_BACKEND_HARDWARE:
// baseline, single-scan JPEGs; nvjpegDecodeBatchedSupported says which) or, where the GPU has none,
// GPU_HYBRID (Huffman decoding helped by the GPU for large batches).  Decoding states alternate
// between two so that batch k's host-side work overlaps batch k-1 on the device: a state is
// reused only once the batch that last used it has been decoded (its event), as nvJPEG requires.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "image/cuda/gpu_image_input.h"
#include "image/cuda/nvjpeg_check.h"

namespace sluice {

class NvjpegBatchDecoder {
 public:
  NvjpegBatchDecoder(GpuImageOptions::Backend backend, bool upsample_interpolate, int max_batch);
  ~NvjpegBatchDecoder();
  NvjpegBatchDecoder(const NvjpegBatchDecoder&) = delete;
  NvjpegBatchDecoder& operator=(const NvjpegBatchDecoder&) = delete;

  bool hardware() const { return hardware_; }
  std::string describe() const;

  // Thread-safe: whether the batched decoder takes this JPEG (the hardware backend refuses some
  // baseline JPEGs, e.g. 4:1:1 subsampling).  The hybrid backend is asked nothing: true.
  bool supports(const uint8_t* data, std::size_t size);

  // Driver thread only.  Decodes n JPEGs to interleaved RGB (out[i].channel[0], pitch[0]) on
  // `stream`.  Returns false, with `error` set, when nvJPEG rejects the batch (a bad bitstream):
  // the caller decodes those samples another way.  CUDA failures throw.  max_w/max_h: the largest
  // image of the batch (sizes the hardware decoder's buffers once).
  bool decode(int n, const unsigned char* const* data, const std::size_t* lengths, nvjpegImage_t* out, int max_w,
              int max_h, cudaStream_t stream, std::string* error);

 private:
  struct State {
    cuda::NvjpegState state;
    cuda::Event done;        // recorded after the last decode that used this state
    int batch = -1;          // the size nvjpegDecodeBatchedInitialize was last called with
    bool used = false;
    bool preallocated = false;
  };

  cuda::NvjpegHandle handle_;
  bool hardware_ = false;
  bool interpolate_ = false;
  int max_batch_ = 0;
  std::array<State, 2> states_;
  int next_ = 0;
  std::mutex streams_mutex_;
  std::vector<nvjpegJpegStream_t> free_streams_;   // parsers for supports(), one per concurrent caller
  std::vector<cuda::NvjpegStream> streams_;        // owns them
};

}  // namespace sluice
