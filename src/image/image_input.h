#pragma once
// Image files as the engine's input: the BatchInput that turns an encoded source's samples
// (JPEG/PNG bytes) into the model input uint8 [B, 3, H, W], and the job options that say how
// (--resize, --center-crop, --letterbox, --resize-shortest, --pad-value, --on-bad-sample).
//
//  - CPU path (image/cpu_image_input.cpp): reader threads read the files into a private buffer,
//    decode (TurboJPEG, libspng) and preprocess (image/preprocess.cpp) straight into the in-slot,
//    which holds the finished uint8 batch; enqueue_copy() is one H2D copy (a memcpy on the host).
//  - GPU path (image/cuda/): the slot carries the compressed bytes, the device
//    decodes them (nvJPEG) and preprocesses with the same plan_resize/axis_taps.
// A sample that cannot be read or decoded is a bad row (zeros, a reason, BatchRows::mark_bad), or
// ends the job with exit 3 under --on-bad-sample fail.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "image/image.h"
#include "io/source.h"
#include "pipeline/batch_input.h"

namespace sluice {

struct ImageInputOptions {
  bool fail_on_bad = false;  // --on-bad-sample fail: the first bad sample ends the job (InputError)
};

// The CPU decoder on any device, or the GPU one on a GPU when this build has it.
std::unique_ptr<BatchInput> make_image_input(Source& source, const PreprocessSpec& spec, int64_t batch, Device& device,
                                             const ImageInputOptions& options);

// Decoding and preprocessing on reader threads; the slot is the model input [batch, 3, out_h, out_w].
std::unique_ptr<BatchInput> make_cpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 const ImageInputOptions& options);

#ifdef SLUICE_HAVE_CUDA
// The nvJPEG input (image/cuda/).  make_image_input calls it on a GPU when the build defines
// SLUICE_HAVE_GPU_IMAGES (every CUDA build does: CMakeLists.txt).
std::unique_ptr<BatchInput> make_gpu_image_input(Source& source, const PreprocessSpec& spec, int64_t batch,
                                                 Device& device, const ImageInputOptions& options);
#endif

// ---- the job's image options -------------------------------------------------------------------

struct ImageJobOptions {
  std::string resize;        // --resize: "" | "S" (shorter side) | "HxW" (exact)
  std::string center_crop;   // --center-crop: "" | "S" | "HxW"
  std::string interpolation = "bilinear";  // --interpolation: nearest | bilinear | bicubic
  bool letterbox = false;    // --letterbox: keep the aspect, pad to the model's input (or --resize HxW)
  int resize_shortest = 0;   // --resize-shortest N: DETR's resize, padded bottom and right (0: off)
  int max_size = 0;          // --max-size M: its longest edge (0: none)
  int size_multiple = 0;     // --size-multiple D: its sides rounded down to multiples of D (YOLOS: 16; 0: none)
  int pad_value = 0;         // --pad-value: 0..255
  // --pad-mean: pad with the colour the job's normalization makes 0, round(mean[c] / scale) (the
  // job's --mean and --scale, copied here), as Hugging Face's processors pad after normalizing.
  bool pad_mean = false;
  float scale = 1.0f;
  std::vector<float> mean;
  std::string on_bad_sample = "skip";  // skip | fail

  // Whether any option says how images become the model's input (they apply to image inputs only).
  bool sets_geometry() const { return !resize.empty() || !center_crop.empty() || letterbox || resize_shortest > 0; }
};

// Checks the options alone (syntax, combinations); throws UsageError with a hint.
void check_image_options(const ImageJobOptions& o);

// The preprocessing for a model whose input is `model_input` ([B, 3, H, W], -1 for dynamic
// dimensions): H and W come from the model, or from the options where the model leaves them open.
// Throws InputError (with a hint) when the options give another size than the model takes, when
// the layout is not [B, 3, H, W], or when a dynamic size is left open.
PreprocessSpec resolve_preprocess(const ImageJobOptions& o, const Shape& model_input, const std::string& model_path);

// One line for the job's log: "resize shorter side to 256, center crop 224x224".
std::string describe_preprocess(const PreprocessSpec& spec);

}  // namespace sluice
