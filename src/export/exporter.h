#pragma once
// The exporter: a run's outputs as ordinary files named after the samples' keys, the one writer of
// them for `sluice export` (app/cmd_export.cpp: its command line and plan) and for `sluice run
// --export` (export/live_export.h: the files while the job runs, and when it completes).
//   masks       one palette PNG per sample (export/masks.h), optionally at the image's original size
//   logits      one .npy per sample (`sluice run --export npy`)
//   classes     one CSV table: key, top-k class ids (and names), probabilities (export/classes.h)
//   detections  detections.json (COCO results), detections.csv and images.json, boxes in the
//               original image's pixels (export/detections.h); optionally draw/<key>.png, each
//               photo with its boxes and their labels (export/draw.h)
//   embeddings  embeddings.npy [N, D] float16 (or float32) and embeddings.keys.txt, in one order
//   dense       dense float maps (depth): one 16-bit grayscale PNG per sample, and dense_scale.csv
//               with each map's range (value = min + pixel / 65535 * (max - min))
// Samples whose status is not ok (unreadable images, non-finite inputs) have no result: skipped,
// and listed (bad()).  Files are named and put in place through an ExportFolder (export/files.h):
// sluice export's manifest (export/journal.h), or the run's own export folder.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/image_geometry.h"
#include "core/tensor.h"
#include "export/classes.h"
#include "export/detections.h"
#include "export/files.h"
#include "io/run_outputs.h"

namespace sluice {

// The stored outputs an export of `what` reads when none is named, best first: masks argmax,
// softmax, logits; logits (and npy) logits, softmax; classes topk_probs, softmax, logits, topk (a
// top-k prefix: its _values and _indices); detections detections (with detections_count);
// embeddings embedding; dense logits, softmax.  Empty for a `what` it does not know.
const std::vector<std::string>& source_order(const std::string& what);
// The first of source_order(what) among `outputs` (dataset names; a top-k prefix counts when both
// its datasets are there); logits and npy take the first output when none is.  "" when none fits.
std::string default_source(const std::string& what, const std::vector<std::string>& outputs);

// A stored output by name (null: none).
using FindOutput = std::function<const StoredOutput*(const std::string& name)>;
// Why `source` cannot be exported as `what` ("" when it can): "/outputs/NAME has rows of shape
// [...]; <what the format needs>".
std::string shape_problem(const std::string& what, const std::string& source, const FindOutput& find);

// The class table of `source` (scores [C], or a stored top-k prefix), with at most `top_k`
// classes a row.
struct ClassPlan {
  std::string data, ids;  // the scores dataset; the stored top-k's indices ("": computed here)
  bool softmax = false;   // probabilities computed from logits
  std::string value_name = "prob";  // "logit" for a stored top-k of logits
  std::size_t width = 0, k = 0;     // values a row of `data`; classes a line
};
ClassPlan class_plan(const std::string& source, const FindOutput& find, int top_k);
// Row `i`'s line of the table (`values`, `ids`: rows of plan.data and plan.ids).
std::string class_line(const ClassPlan& plan, const std::string& key, const Tensor& values, const Tensor& ids, int64_t i,
                       const std::vector<std::string>* labels = nullptr);

// The per-row formats (masks, logits or npy, dense): a file per good row with this extension; ""
// for the others.
std::string row_extension(const std::string& what);
// Writes row `row` (one row of `output`, in its stored type) as its file `rel` of `folder`: a
// palette PNG (masks, at the model's size) or a .npy (logits, npy).
void write_row_file(ExportFolder& folder, const std::string& rel, const std::string& key, const std::string& what,
                    const StoredOutput& output, const void* row);

// What one export writes, and how.
struct ExportSpec {
  std::string what;             // masks | logits | classes | detections | embeddings | dense
  std::string source;           // the stored output (classes: or a top-k prefix)
  bool original_size = false;   // masks, dense: at each image's size, undoing the run's geometry
  int64_t outside = 255;        // masks, original_size: the class of pixels a center crop cut off
  std::string labels;           // classes, detections: the labels file ("": none)
  int top_k = 5;                // classes
  std::string csv = "classes.csv";  // classes: the table's file
  bool keep_extension = false;  // name files <key>.png instead of replacing the key's extension
  std::string photos;           // detections: draw/<key>.png over the photos of this folder ("": none)
  // photos: a photo's file bytes to interleaved RGB, or false and why.  The command passes
  // image/image.h's decode_image_rgb (export does not build on the image inputs).
  std::function<bool(const uint8_t* data, std::size_t size, std::vector<uint8_t>& rgb, int* height, int* width,
                     std::string* error)>
      decode_photo;
  bool float32 = false;         // embeddings: as stored (else float16)
  int threads = 1;              // masks: PNG encoding threads
  int64_t test_kill_after = -1;           // test only: SIGKILL in the middle of the file after this many
  bool test_stop_before_reading = false;  // test only: SIGSTOP itself before reading rows
};

// What an export can take from elsewhere than outputs.h5 (`sluice run --export` keeps what its
// ranks committed as the job ran).
struct KeptRows {
  RowReader read;  // embeddings, detections: the rows (null: outputs.h5)
  std::function<const std::string*(int64_t row)> class_line;  // classes: a row's line, when kept
};

class Exporter {
 public:
  Exporter(const ExportSpec& spec, const RunOutputs& r, ExportFolder& folder, KeptRows kept = {});
  void run();

  const std::vector<int64_t>& bad() const { return bad_; }
  // Keys whose file could not be named (with why): not exported, the others are.
  const std::vector<std::string>& unwritable() const { return unwritable_; }
  // Keys with '..' parts (written with kUpPart instead), and the first of them with its file.
  int64_t went_up() const { return names_.went_up(); }
  const std::pair<std::string, std::string>& first_up() const { return names_.first_up(); }
  // Lines for the summary: notes (what to know about the files) and warnings (what they lack).
  const std::vector<std::string>& notes() const { return notes_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  int64_t block_rows(const std::string& name) const;
  void maybe_stop();
  void maybe_die(const std::string& rel);
  void mark_bad_rows();
  void per_sample();
  std::vector<std::string> encode_block(const Tensor& rows, int64_t first, const std::vector<std::string>& keys,
                                        const std::vector<bool>& todo);
  void classes();
  void detections();
  void draw();
  void embeddings();
  void dense();
  Tensor read(const std::string& name, int64_t first, int64_t count) const;
  void add_notes(const ExportNotes& n);

  const ExportSpec& s_;
  const RunOutputs& r_;
  ExportFolder& f_;
  KeptRows kept_;
  FileNames names_;
  Categories cats_;
  std::vector<int64_t> bad_;
  std::vector<std::string> unwritable_;
  std::vector<std::string> notes_, warnings_;
  std::optional<PreprocessSpec> geometry_;  // the run's, when recorded (else a plain resize)
  bool stopped_ = false;
};

}  // namespace sluice
