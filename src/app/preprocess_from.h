#pragma once
// --preprocess-from DIR: a model's own image preprocessing, read from the files its library writes
// beside it, as job options.
//  - Hugging Face: preprocessor_config.json (size as shortest_edge or height x width, crop_size and
//    do_center_crop, crop_pct (ConvNeXt), resample, do_rescale / rescale_factor, do_normalize /
//    image_mean / image_std; DETR's and YOLOS's {shortest_edge, longest_edge}, or size and max_size,
//    as --resize-shortest, --max-size, --size-multiple 16 for YOLOS, and --pad-mean);
//  - timm: config.json's pretrained_cfg (input_size, crop_pct, crop_mode center or squash,
//    interpolation, mean, std), as timm's eval transform applies it.
// What a processor does that Sluice cannot (a longest edge alone, Lanczos) is refused, naming the key.
#include <string>
#include <utility>
#include <vector>

#include "app/job.h"

namespace sluice {

struct PreprocessFrom {
  std::string file;  // the file read
  // The job options it sets, in order, as {option name, value as text}; options the caller says
  // were given (`given`) keep their values and are listed in `kept`.
  std::vector<std::pair<std::string, std::string>> chosen, kept;
};

// Reads job.preprocess_from (a folder holding preprocessor_config.json or a timm config.json, or
// such a file) and sets job.resize, center_crop, resize_shortest, max_size, size_multiple, pad_mean,
// interpolation, scale, mean and stddev except those named in `given` (long option names).  UsageError (exit 2) for a file or value it cannot
// take, saying what to pass instead.
PreprocessFrom apply_preprocess_from(JobConfig& job, const std::vector<std::string>& given);

// "--resize 224 --center-crop 224 --interpolation bicubic ..." for the set-up line.
std::string preprocess_from_summary(const PreprocessFrom& p);

}  // namespace sluice
