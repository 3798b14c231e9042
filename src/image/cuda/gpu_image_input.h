#pragma once
// Image files as the engine's input on a CUDA device: JPEGs decoded by nvJPEG's batched API (the
// hardware decoder where the GPU has one), everything else decoded on the reader threads, and one
// kernel that resizes, crops or letterboxes every GPU-decoded image into the uint8 [B, 3, H, W]
// input.  Plain C++ (no CUDA headers): make_image_input (image/cpu_image_input.cpp) calls it on a GPU.
//
// How a batch flows (pipeline/batch_input.h):
//   fill()            reader thread: the files' bytes into the pinned slot, headers parsed, filter
//                     taps computed; PNG, progressive/CMYK JPEG and anything odd decoded and
//                     preprocessed on the CPU into the slot; bad files marked.
//   enqueue_copy()    driver: the CPU-preprocessed rows H2D into the engine input.
//   begin_batch()     dispatcher, in batch order: the batch goes to a decode thread (one per
//                     decode context), which calls nvJPEG's batched decode into the context's
//                     device arena, on the context's stream, as soon as the slot is filled.
//   enqueue_decode()  driver: the copy stream waits for that decode (an event), then the
//                     preprocessing kernel (zeros for bad and padding rows).  A batch nvJPEG
//                     rejects is decoded on the CPU instead (rare), and undecodable samples are
//                     marked bad.  With decode_threads 0 (the default, SLUICE_DECODE_OVERLAP=0)
//                     there are no decode threads: the driver calls nvJPEG itself here, on the
//                     copy stream.
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "image/image.h"
#include "io/source.h"
#include "pipeline/batch_input.h"

namespace sluice {

struct GpuImageOptions {
  // Which nvJPEG backend decodes: Auto takes the hardware decoder when the GPU has one (A100,
  // H100, H200) and the GPU-hybrid decoder otherwise.
  enum class Backend { Auto, Hardware, Hybrid };
  Backend backend = Backend::Auto;
  // --on-bad-sample fail: the first bad sample stops the job (InputError naming its key and why).
  bool fail_on_bad = false;
  // nvJPEG's chroma upsampling by interpolation (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION), as
  // libjpeg-turbo's "fancy upsampling" does; off: nvJPEG's default.
  bool upsample_interpolate = false;
  // Images with more pixels than this are decoded on the CPU (they would grow the device arena
  // for one sample), and so are the images of a batch beyond this many decoded bytes (a batch of
  // 256 photos of 12 megapixels would take 9 GiB).
  int64_t max_gpu_pixels = int64_t{64} << 20;
  int64_t max_arena_bytes = int64_t{4} << 30;
  // Decode threads, each with its own decode context (nvJPEG state, arena, stream), so the nvJPEG
  // calls of the next batches run beside the driver and the model; 0: the driver thread calls
  // nvJPEG on the copy stream (two contexts in turn).  SLUICE_DECODE_OVERLAP=0|1|N sets it (1: 2).
  // Off by default: on the H200 the hardware decoder's calls take turns whichever thread makes
  // them, and W3 ran 5 % slower with the threads (docs/gpu-images.md, BENCHMARKS.md).
  int decode_threads = 0;
  // With decode threads: each context's nvJPEG state on an nvJPEG handle of its own (false: one
  // shared handle).  SLUICE_DECODE_HANDLES=own|shared sets it; the same speed on the H200.
  bool handle_per_context = false;
};

// The device must be a CUDA device (device.is_gpu()); throws otherwise, or when no nvJPEG backend
// can be created.  `batch` is the engine's batch; the engine input is uint8 [batch, 3, spec.out_h,
// spec.out_w].
std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const GpuImageOptions& options = {});

}  // namespace sluice
