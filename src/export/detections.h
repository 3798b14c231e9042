#pragma once
// Detections and embeddings as the files the next tool reads (`sluice export --what detections |
// embeddings`):
//   detections  detections.json, COCO's results format (a list of {"image_id", "file_name",
//               "category_id", "bbox": [x, y, w, h], "score"}), and detections.csv (key, category,
//               label, score, x1, y1, x2, y2), both in the original image's pixels
//   embeddings  embeddings.npy [N, D] float16 (the good samples in run order) and embeddings.keys.txt
//               (their keys, one a line, in the same order)
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "image/image.h"

namespace sluice {

// Model-input pixels to the original image's (in_w x in_h), undoing `spec` (resize, center crop or
// letterbox: image/image.h's plan_resize): x_orig = (x + offset_x) * in_w / resized_w, clipped to the
// image.  Without a recorded geometry, a plain resize from the model input (model_w x model_h).
void box_to_original(float* xyxy, int in_h, int in_w, const std::optional<PreprocessSpec>& spec, int model_h,
                     int model_w);

// Class index -> COCO category id and name, from a labels file: a line "ID NAME" (an integer, white
// space, the name: COCO's 1..90 with gaps) or "NAME" (the id is the class index).  Empty: ids are the
// class indices, no names.
struct Categories {
  std::vector<int64_t> ids;
  std::vector<std::string> names;
  int64_t id(int64_t cls) const;
  std::string name(int64_t cls) const;  // "" without labels; InputError for a class past the file
};
Categories read_categories(const std::string& path);

// COCO's image_id for a key: the digits of the file name's stem when it is all digits (COCO's
// 000000397133.jpg is image 397133), else the sample's row.
int64_t coco_image_id(const std::string& key, int64_t row);

// Draws the outline of box (x1, y1, x2, y2, in the image's pixels) `thickness` pixels wide, inside
// the box, clipped to the image, into interleaved RGB.
void draw_box(std::vector<uint8_t>& rgb, int height, int width, const float* xyxy, const uint8_t colour[3], int thickness);

// One COCO result entry (no trailing comma) and one CSV line.
std::string coco_entry(int64_t image_id, const std::string& key, int64_t category, const float* xyxy, float score);
std::string detection_csv_header();
std::string detection_csv_row(const std::string& key, int64_t category, const std::string& label, float score,
                              const float* xyxy);

}  // namespace sluice
