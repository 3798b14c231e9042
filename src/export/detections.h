#pragma once
// Detections and embeddings as the files the next tool reads (`sluice export --what detections |
// embeddings`):
//   detections  detections.json, COCO's results format (a list of {"image_id", "file_name",
//               "category_id", "bbox": [x, y, w, h], "score"}), and detections.csv (key, category,
//               label, score, x1, y1, x2, y2), both in the original image's pixels; images.json, a
//               COCO dataset without annotations ({"images": [{"id", "file_name", "width",
//               "height"}], "annotations": [], "categories": [{"id", "name"}]}) for COCO().loadRes
//   embeddings  embeddings.npy [N, D] float16 or float32 (the good samples in run order) and
//               embeddings.keys.txt (their keys, one a line, escaped, in the same order)
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/image_geometry.h"
#include "core/tensor.h"
#include "io/run_outputs.h"

namespace sluice {

// Model-input pixels to the original image's (in_w x in_h), undoing `spec` (resize, center crop or
// letterbox: core/image_geometry.h's plan_resize): x_orig = (x + offset_x) * in_w / resized_w, clipped to the
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

// COCO's image_id of each row, unique among the rows that are `used` (the good samples): the
// number of the file name's stem when every used key's stem is all digits and no two are the same
// number (COCO's 000000397133.jpg is image 397133), else the row for every one of them.  `why_rows`
// says why the rows were taken ("" when the numbers were).
struct ImageIds {
  std::vector<int64_t> ids;  // per row (meaningful for used rows)
  std::string why_rows;
};
ImageIds coco_image_ids(const std::vector<std::string>& keys, const std::vector<bool>& used);

// Whether a detection's row (x1, y1, x2, y2, score, class) is finite numbers, so that it can be
// written as JSON (which has no NaN or infinity) and as a category id.
bool detection_is_finite(const float* row);

// A key as its line of embeddings.keys.txt (no newline): a backslash written as two, a newline as
// the two characters \n, a carriage return as \r, so that every line is one key.  Sets *escaped
// when the line differs from the key.
std::string keys_file_line(const std::string& key, bool* escaped = nullptr);

// One COCO result entry (no trailing comma) and one CSV line.
std::string coco_entry(int64_t image_id, const std::string& key, int64_t category, const float* xyxy, float score);
std::string detection_csv_header();
std::string detection_csv_row(const std::string& key, int64_t category, const std::string& label, float score,
                              const float* xyxy);

// Rows [first, first + count) of the dataset `name` of a run, in its stored type: from outputs.h5
// (`sluice export`) or from rows the run kept as it committed them (`sluice run --export`).
using RowReader = std::function<Tensor(const std::string& name, int64_t first, int64_t count)>;

// What a whole-file export says beside its files: notes (what to know about them) and warnings
// (what they lack), one line each, without a prefix.
struct ExportNotes {
  std::vector<std::string> notes, warnings;
};

// The three detection files of run `r` (its dataset `source` [K, 6] and `source`_count), as
// `sluice export --what detections` writes them; the rows are read through `read`, block by block.
struct DetectionFiles {
  std::string json, csv, images;  // detections.json, detections.csv, images.json
  ExportNotes notes;
};
DetectionFiles detection_files(const RunOutputs& r, const std::string& source, const Categories& cats,
                               const RowReader& read);

// embeddings.npy [N good, D] written to `f` (at `path`, named in errors) as `sluice export --what
// embeddings` writes it (float16, or float32 as stored), the rows read through `read`; returns
// embeddings.keys.txt's text.  InputError for a value float16 cannot hold (the caller removes the
// file); notes and warnings are added to `notes`.
std::string write_embeddings_npy(const RunOutputs& r, const std::string& source, bool f32, const RowReader& read,
                                 std::FILE* f, const std::string& path, ExportNotes& notes);

}  // namespace sluice
