#pragma once
// The image geometry of a run, recorded for `sluice export --original-size`: how each image became
// the model's input (core/image_geometry.h, PreprocessSpec), written by the run as the attribute
// "preprocess" of outputs.h5 (a JSON object), and its inverse for a mask.
//
// Undoing it: the mask is first brought to the model's input size (nearest neighbour, when the
// model's output is smaller, as a stride-8 network's), then each model-input pixel goes back to
// where it came from in the resized image (the letterbox padding is dropped; what a center crop
// cut off gets the class `outside`, since the model never saw it), and that resized image is scaled
// to the original size (nearest neighbour, as PIL's NEAREST).
#include <cstdint>
#include <optional>
#include <string>

#include "export/masks.h"
#include "core/image_geometry.h"
#include "io/run_outputs.h"  // kPreprocessAttr

namespace sluice {

// {"mode": "exact" | "shorter_side" | "letterbox" | "none" | "shortest_edge", "resize_short",
//  "resize_h", "resize_w", "crop_h", "crop_w", "out_h", "out_w"; shortest_edge: "max_size",
//  "size_multiple"}
std::string geometry_json(const PreprocessSpec& spec);
// The spec of geometry_json's text; InputError for text it cannot read.
PreprocessSpec geometry_from_json(const std::string& text);

// The mask of one image of `in_h` x `in_w` pixels at that size, undoing `spec` as described above.
Mask undo_geometry(const Mask& m, int in_h, int in_w, const PreprocessSpec& spec, uint32_t outside);

}  // namespace sluice
