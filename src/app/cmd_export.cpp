// `sluice export RUN_DIR`: a finished run's outputs as ordinary files, named after the samples' keys.
//   masks    one palette PNG per sample (export/masks.h), optionally at the image's original size
//   classes  one CSV table: key, top-k class ids (and names), probabilities (export/classes.h)
//   logits   one .npy per sample
//   detections  detections.json (COCO results) and detections.csv, boxes in the original image's
//            pixels, and images.json, the COCO images they refer to (export/detections.h)
//   embeddings  embeddings.npy [N, D] float16 (or --dtype float32) and embeddings.keys.txt, in the
//            same order
//   dense    dense float maps (depth): one 16-bit grayscale PNG per sample, and dense_scale.csv with
//            each map's range (value = min + pixel / 65535 * (max - min))
// Samples whose status is not ok (unreadable images, non-finite inputs) have no result and are
// skipped, and listed.  The export folder's manifest (export/journal.h) makes a rerun finish an
// interrupted export and keeps the command from replacing files it did not write.  The run folder's
// lock (app/folder_lock.h) is held throughout, so no job changes the run while it is read.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "app/commands.h"
#include "app/folder_lock.h"
#include "app/job_file.h"
#include "cluster/launch.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/sha256.h"
#include "core/thread.h"
#include "export/classes.h"
#include "export/detections.h"
#include "export/geometry.h"
#include "export/journal.h"
#include "export/masks.h"
#include "export/run_outputs.h"
#include "image/image.h"
#include "io/npy.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ExportOptions {
  std::string run_dir;
  std::string out;                  // default RUN_DIR/export
  std::string what = "auto";        // auto | masks | classes | logits | detections | embeddings | dense
  std::string output;               // the /outputs dataset (or topk prefix) to read; default by `what`
  bool original_size = false;       // masks: back to each image's size, undoing the run's geometry
  int64_t outside = 255;            // masks, --original-size: the class of pixels a center crop cut off
  std::string labels;               // classes: one name per line
  int top_k = 5;                    // classes from scores: how many
  std::string csv = "classes.csv";  // classes: the table's file name in the export folder
  bool keep_extension = false;      // name files <key>.png instead of replacing the key's extension
  bool draw = false;                // detections: draw/<key>.png previews, boxes over the photos
  std::string dtype;                // embeddings: float16 (the default, "") or float32
  bool overwrite = false;           // replace files the export did not write
  int threads = 0;                  // PNG encoding threads (0: the machine's cores)
  int64_t test_kill_after = -1;     // test only: SIGKILL in the middle of the file after this many
  bool test_stop_before_reading = false;  // test only: SIGSTOP itself (holding the run's lock) before reading rows
};

constexpr std::size_t kBlockBytes = 64u << 20;  // rows read at once: at most this much, at least one row

bool has(const RunOutputs& r, const std::string& name) { return r.output(name) != nullptr; }

int64_t row_values(const StoredOutput& o) { return shape_numel(o.row_shape); }

// Scores [C] per row (extra axes of size 1 allowed, as [C,1,1]).
bool is_vector_row(const StoredOutput& o) { return !o.row_shape.empty() && row_values(o) == o.row_shape[0]; }

// The export's plan: what it writes and from which datasets.
struct Plan {
  std::string what;
  std::string source;   // dataset (masks, logits, classes from scores) or top-k prefix
  bool stored_topk = false;
  bool softmax = false;  // classes: compute softmax of the source
  std::string value_name = "prob";
};

// The job text in RUN_DIR/report.json ("" when there is none).
std::string job_text_of_report(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "report.json", std::ios::binary);
  if (!in) return "";
  const json j = json::parse(in, nullptr, false);
  return j.is_object() && j.contains("job_toml") && j["job_toml"].is_string() ? j["job_toml"].get<std::string>() : "";
}

// The string value of `option` in the job's TOML ("" when absent or unreadable).
std::string job_string(const std::string& toml, const std::string& option) {
  if (toml.empty()) return "";
  try {
    for (const JobEntry& e : parse_job_text(toml, "report.json's job"))
      if (e.key == option && !e.is_array && e.values.size() == 1 && e.values[0].kind == JobScalar::Kind::String)
        return e.values[0].text;
  } catch (const Error&) {
  }
  return "";
}

// Whether the job's TOML gives `option` a value other than false or "".
bool job_sets(const std::string& toml, const std::string& option) {
  std::istringstream lines(toml);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    auto trim = [](std::string& t) {
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t\r") + 1);
    };
    trim(k);
    trim(v);
    if (k == option) return !(v == "false" || v == "\"\"" || v.empty());
  }
  return false;
}

Plan make_plan(const RunOutputs& r, const ExportOptions& o) {
  Plan p;
  p.what = o.what;
  auto topk_prefix = [&](const std::string& prefix) { return has(r, prefix + "_values") && has(r, prefix + "_indices"); };
  if (p.what == "auto") {
    if (!o.output.empty()) {
      const StoredOutput* s = r.output(o.output);
      p.what = topk_prefix(o.output) ? "classes" : !s ? "" : (s->dtype == DType::U8 || s->dtype == DType::I32) ? "masks"
               : is_vector_row(*s) ? "classes" : "masks";
    } else if (has(r, "detections") && has(r, "detections_count")) {
      p.what = "detections";
    } else if (has(r, "embedding")) {
      p.what = "embeddings";
    } else if (has(r, "argmax")) {
      p.what = "masks";
    } else if (topk_prefix("topk_probs") || topk_prefix("topk")) {
      p.what = "classes";
    } else {
      for (const char* n : {"softmax", "logits"})
        if (const StoredOutput* s = r.output(n)) {
          p.what = is_vector_row(*s) ? "classes" : "masks";
          break;
        }
    }
    if (p.what.empty())
      throw InputError(str("export: ", r.path(), ": cannot tell what to export; choose --what masks, classes or logits"));
  }
  auto first_of = [&](std::initializer_list<const char*> names) -> std::string {
    if (!o.output.empty()) return o.output;
    for (const char* n : names)
      if (has(r, n) || topk_prefix(n)) return n;
    return "";
  };
  if (p.what == "masks") p.source = first_of({"argmax", "softmax", "logits"});
  else if (p.what == "detections") p.source = first_of({"detections"});
  else if (p.what == "embeddings") p.source = first_of({"embedding"});
  else if (p.what == "dense") p.source = first_of({"logits", "softmax"});
  else if (p.what == "classes") p.source = first_of({"topk_probs", "softmax", "logits", "topk"});
  else p.source = first_of({"logits", "softmax"});
  if (p.source.empty() && p.what == "logits" && !r.outputs().empty()) p.source = r.outputs().front().name;
  if (p.source.empty() || (!has(r, p.source) && !topk_prefix(p.source))) {
    std::string names;
    for (const auto& s : r.outputs()) names += (names.empty() ? "" : ", ") + s.name;
    throw InputError(str("export: ", r.path(), " has no output to export as ", p.what,
                         o.output.empty() ? "" : " named '" + o.output + "'", " (it has: ", names, ")"));
  }
  if (p.what == "detections") {
    const StoredOutput& d = *r.output(p.source);
    const StoredOutput* c = r.output(p.source + "_count");
    if (d.row_shape.size() != 2 || d.row_shape[1] != 6 || !c || !c->row_shape.empty())
      throw InputError(str("export: /outputs/", p.source, " has rows of shape ", shape_str(d.row_shape),
                           c ? "" : str(" and there is no /outputs/", p.source, "_count"),
                           "; detections are rows [K, 6] with a count per sample (sluice run --outputs detections)"));
  }
  if (p.what == "dense") {
    const StoredOutput& d = *r.output(p.source);
    const bool float_map = d.dtype == DType::F32 || d.dtype == DType::F16 || d.dtype == DType::BF16;
    const Shape& rs = d.row_shape;
    if (!float_map || !(rs.size() == 2 || (rs.size() == 3 && rs[0] == 1)))
      throw InputError(str("export: /outputs/", p.source, " holds ", dtype_name(d.dtype), " rows of shape ", shape_str(rs),
                           "; a dense map is one float value per pixel ([H, W] or [1, H, W])"));
  }
  if (p.what == "embeddings" && r.output(p.source)->row_shape.size() != 1)
    throw InputError(str("export: /outputs/", p.source, " has rows of shape ", shape_str(r.output(p.source)->row_shape),
                         "; embeddings are one vector [D] per sample (sluice run --outputs embedding)"));
  if (p.what == "classes") {
    p.stored_topk = !has(r, p.source) && topk_prefix(p.source);
    if (!p.stored_topk && !is_vector_row(*r.output(p.source)))
      throw InputError(str("export: /outputs/", p.source, " has rows of shape ", shape_str(r.output(p.source)->row_shape),
                           "; a class table needs one score per class ([C])"));
    p.softmax = !p.stored_topk && p.source != "softmax";
    if (p.stored_topk && p.source != "topk_probs") p.value_name = "logit";
  }
  const bool resampled = p.what == "masks" || p.what == "dense";  // what --original-size applies to
  if (o.original_size && resampled && !r.has_sizes())
    throw InputError(str("export: --original-size needs /sample_size in ", r.path(),
                         " (written for image inputs); this run's input had no image sizes"));
  if (o.original_size && resampled && !r.preprocess()) {
    // A run from before the geometry was recorded: a plain resize is undone by a resize, but the
    // padding of --letterbox or the cut of --center-crop cannot be told from the file.
    const std::string job = job_text_of_report(o.run_dir);
    for (const char* option : {"letterbox", "center-crop"})
      if (job_sets(job, option))
        throw InputError(str("export: --original-size cannot undo --", option, " of this run: ", r.path(),
                             " does not record the image geometry (it was written by an older sluice); "
                             "rerun the job with this version (or export without --original-size)"));
  }
  return p;
}

class Exporter {
 public:
  Exporter(const ExportOptions& o, const RunOutputs& r, const Plan& p, ExportJournal& j) : o_(o), r_(r), p_(p), j_(j) {
    if (o_.original_size && r_.preprocess()) geometry_ = geometry_from_json(*r_.preprocess());
  }

  void run() {
    if (p_.what == "classes") classes();
    else if (p_.what == "detections") {
      const std::string photos = o_.draw ? photo_folder() : "";  // refused before anything is written
      detections();
      if (o_.draw) draw(photos);
    }
    else if (p_.what == "embeddings") embeddings();
    else if (p_.what == "dense") dense();
    else per_sample();
  }
  const std::vector<int64_t>& bad() const { return bad_; }
  const std::vector<std::string>& unwritable() const { return unwritable_; }
  // Keys with '..' parts (written with kUpPart instead), and the first of them with its file.
  int64_t went_up() const { return went_up_; }
  const std::pair<std::string, std::string>& first_up() const { return first_up_; }
  // Lines for the summary: notes (what to know about the files) and warnings (what they lack).
  const std::vector<std::string>& notes() const { return notes_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // Rows per read so that one block stays under kBlockBytes.
  int64_t block_rows(const std::string& name) const {
    const StoredOutput* s = r_.output(name);
    const std::size_t row = static_cast<std::size_t>(row_values(*s)) * dtype_size(s->dtype);
    return static_cast<int64_t>(std::max<std::size_t>(1, kBlockBytes / std::max<std::size_t>(row, 1)));
  }

  // Test hook: stop (SIGSTOP) once, holding the run folder's lock, before the first rows are read, so
  // that a test can start a job on the same folder at that very moment.
  void maybe_stop() {
    if (!o_.test_stop_before_reading || stopped_) return;
    stopped_ = true;
    std::fflush(nullptr);
    std::raise(SIGSTOP);
  }

  void maybe_die(const std::string& tmp) {
    if (o_.test_kill_after < 0 || j_.written() < o_.test_kill_after) return;
    // Test hook: leave a claimed, half-written file behind, as a kill -9 in the middle would.
    if (std::FILE* f = std::fopen(tmp.c_str(), "wb")) {
      std::fputs("partial", f);
      std::fclose(f);
    }
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }

  // Records that `key` (row) is written to `rel`; InputError saying what to do when another key was.
  void claim(std::unordered_map<std::string, std::pair<std::string, int64_t>>& owner, const std::string& rel,
             const std::string& key, int64_t row, const std::string& ext) const {
    const auto [it, fresh] = owner.emplace(rel, std::make_pair(key, row));
    if (fresh) return;
    const KeyClash c = key_clash(it->second.first, it->second.second, key, row, rel, ext, o_.keep_extension, true);
    throw InputError(str("export: ", c.what), c.hint);
  }

  // Masks and logits: one file per good row.
  void per_sample() {
    const std::string ext = p_.what == "masks" ? ".png" : ".npy";
    std::unordered_map<std::string, std::pair<std::string, int64_t>> owner;  // path -> key, row: two keys on one file
    const int64_t n = r_.size(), step = block_rows(p_.source);
    for (int64_t first = 0; first < n; first += step) {
      const int64_t count = std::min(step, n - first);
      const std::vector<std::string> keys = r_.keys(first, count);
      std::vector<std::string> rels(static_cast<std::size_t>(count));
      std::vector<bool> todo(static_cast<std::size_t>(count), false);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t row = first + i;
        if (r_.status()[static_cast<std::size_t>(row)] != 0) {
          bad_.push_back(row);
          continue;
        }
        const std::string& key = keys[static_cast<std::size_t>(i)];
        std::string& rel = rels[static_cast<std::size_t>(i)];
        bool up = false;
        rel = export_path(key, ext, o_.keep_extension, &up);
        if (up && ++went_up_ == 1) first_up_ = {key, rel};
        claim(owner, rel, key, row, ext);
        const std::string why = j_.name_problem(rel);
        if (!why.empty()) {
          // A key whose file name this file system cannot hold: the others are still exported.
          unwritable_.push_back(str("'", key, "' (", why, ")"));
          continue;
        }
        todo[static_cast<std::size_t>(i)] = !j_.done(rel);
      }
      if (std::find(todo.begin(), todo.end(), true) == todo.end()) continue;
      maybe_stop();
      const Tensor rows = r_.read_rows(p_.source, first, count);
      std::vector<std::string> pngs;
      if (p_.what == "masks") pngs = encode_block(rows, first, keys, todo);
      for (int64_t i = 0; i < count; ++i) {
        if (!todo[static_cast<std::size_t>(i)]) continue;
        const std::string& rel = rels[static_cast<std::size_t>(i)];
        const std::string& key = keys[static_cast<std::size_t>(i)];
        if (p_.what == "masks") {
          if (o_.test_kill_after >= 0 && j_.written() >= o_.test_kill_after) maybe_die(j_.begin(rel));
          j_.write(rel, key, pngs[static_cast<std::size_t>(i)]);  // begin, write, commit
        } else {
          const StoredOutput& s = *r_.output(p_.source);
          const std::size_t bytes = static_cast<std::size_t>(row_values(s)) * dtype_size(s.dtype);
          const std::string tmp = j_.begin(rel);
          maybe_die(tmp);
          write_npy(tmp, s.dtype, s.row_shape, rows.bytes.data() + static_cast<std::size_t>(i) * bytes);
          j_.commit(rel, key);
        }
      }
    }
  }

  // The PNG files of a block's rows that are to be written, encoded on o_.threads threads (the
  // encoding is the export's cost; the files are then written in order by the caller).
  std::vector<std::string> encode_block(const Tensor& rows, int64_t first, const std::vector<std::string>& keys,
                                        const std::vector<bool>& todo) {
    std::vector<std::string> pngs(todo.size());
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&] {
      try {
        for (std::size_t i; (i = next++) < todo.size();) {
          if (!todo[i]) continue;
          Mask m = mask_of_row(rows, static_cast<int64_t>(i));
          if (o_.original_size) {
            const auto [h, w] = r_.original_size(first + static_cast<int64_t>(i));
            if (h < 1 || w < 1)
              throw InputError(str("export: sample '", keys[i], "' has no original size in /sample_size (", h, "x", w, ")"));
            m = geometry_ ? undo_geometry(m, h, w, *geometry_, static_cast<uint32_t>(o_.outside)) : resize_nearest(m, h, w);
          }
          pngs[i] = encode_mask_png(m);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = todo.size();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < o_.threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
    return pngs;
  }

  // Classes: one table, written whole (a rerun rewrites it unless it is complete).
  void classes() {
    const std::string rel = o_.csv;
    const int64_t n = r_.size();
    std::vector<std::string> labels;
    if (!o_.labels.empty()) labels = read_labels(o_.labels);
    const std::size_t k = p_.stored_topk ? static_cast<std::size_t>(std::min<int64_t>(
                                               o_.top_k, r_.output(p_.source + "_values")->row_shape.at(0)))
                                         : static_cast<std::size_t>(std::min<int64_t>(o_.top_k, row_values(*r_.output(p_.source))));
    for (int64_t row = 0; row < n; ++row)
      if (r_.status()[static_cast<std::size_t>(row)] != 0) bad_.push_back(row);
    if (j_.done(rel)) return;
    const std::string tmp = j_.begin(rel);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) throw Error(str("export: cannot create ", tmp));
    std::string text = csv_header(k, !labels.empty(), p_.value_name);
    const std::string data = p_.stored_topk ? p_.source + "_values" : p_.source;
    const int64_t step = block_rows(data);
    maybe_stop();
    for (int64_t first = 0; first < n; first += step) {
      const int64_t count = std::min(step, n - first);
      const std::vector<std::string> keys = r_.keys(first, count);
      const Tensor values = r_.read_rows(data, first, count);
      const Tensor ids = p_.stored_topk ? r_.read_rows(p_.source + "_indices", first, count) : Tensor();
      const std::size_t width = static_cast<std::size_t>(row_values(*r_.output(data)));
      for (int64_t i = 0; i < count; ++i) {
        if (r_.status()[static_cast<std::size_t>(first + i)] != 0) continue;
        const TopK t = p_.stored_topk ? stored_top_k(values, ids, i, k)
                                      : top_k_of(values, static_cast<std::size_t>(i) * width, width, k, p_.softmax);
        text += csv_row(keys[static_cast<std::size_t>(i)], t, labels.empty() ? nullptr : &labels);
      }
      if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
        throw Error(str("export: cannot write ", tmp, " (disk full?)"));
      text.clear();
    }
    if (std::fclose(f.release()) != 0) throw Error(str("export: cannot write ", tmp));
    j_.commit(rel, "");
  }

  // Detections: detections.json (COCO results), detections.csv and images.json (the COCO images
  // they refer to), written whole.  A detection with a value that is not a finite number is left
  // out of both lists (JSON has no NaN), and counted in a warning.
  void detections() {
    const Categories cats = read_categories(o_.labels);
    for (int64_t row = 0; row < r_.size(); ++row)
      if (r_.status()[static_cast<std::size_t>(row)] != 0) bad_.push_back(row);
    const bool done = j_.done("detections.json") && j_.done("detections.csv") && j_.done("images.json");
    if (!done) maybe_stop();
    const DetectionFiles files = detection_files(r_, p_.source, cats, outputs_h5());
    notes_.insert(notes_.end(), files.notes.notes.begin(), files.notes.notes.end());
    warnings_.insert(warnings_.end(), files.notes.warnings.begin(), files.notes.warnings.end());
    if (done) return;
    if (!j_.done("detections.json")) j_.write("detections.json", "", files.json);
    if (!j_.done("detections.csv")) j_.write("detections.csv", "", files.csv);
    if (!j_.done("images.json")) j_.write("images.json", "", files.images);
  }

  // The rows of the run's outputs.h5.
  RowReader outputs_h5() const {
    return [this](const std::string& name, int64_t first, int64_t count) { return r_.read_rows(name, first, count); };
  }

  // Previews: each good photo with its boxes drawn (2 px, the class's palette colour), as
  // draw/<key>.png.  The photos are read again from the run's input folder.
  std::string photo_folder() const {
    const std::string input = job_string(job_text_of_report(o_.run_dir), "input");
    std::error_code ec;
    if (input.empty() || !fs::is_directory(input, ec))
      throw InputError(str("export --draw reads the photos from the run's input folder, and this run's input ('", input,
                           "') is not a folder"), "export without --draw");
    return input;
  }

  void draw(const std::string& input) {
    std::optional<PreprocessSpec> spec;
    if (r_.preprocess()) spec = geometry_from_json(*r_.preprocess());
    const int64_t n = r_.size(), k = r_.output(p_.source)->row_shape[0];
    const int64_t step = block_rows(p_.source);
    const auto& palette = class_palette();
    for (int64_t first = 0; first < n; first += step) {
      const int64_t count = std::min(step, n - first);
      const std::vector<std::string> keys = r_.keys(first, count);
      const std::vector<float> v = r_.read_rows(p_.source, first, count).as_float();
      const std::vector<int64_t> stored = r_.read_rows(p_.source + "_count", first, count).as_int64();
      for (int64_t i = 0; i < count; ++i) {
        if (r_.status()[static_cast<std::size_t>(first + i)] != 0) continue;
        const std::string& key = keys[static_cast<std::size_t>(i)];
        const std::string rel = "draw/" + export_path(key, ".png", o_.keep_extension, nullptr);
        if (j_.done(rel)) continue;
        std::ifstream in(fs::path(input) / key, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::vector<uint8_t> rgb;
        int h = 0, w = 0;
        std::string why;
        if (!in.good() && !in.eof()) why = "cannot read it";
        if (why.empty() && !decode_image_rgb(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), rgb, &h, &w, &why))
          why = why.empty() ? "cannot decode it" : why;
        if (!why.empty())
          throw InputError(str("export --draw: ", (fs::path(input) / key).string(), ": ", why,
                               " (the photo changed since the run?)"));
        for (int64_t d = 0; d < std::min<int64_t>(stored[static_cast<std::size_t>(i)], k); ++d) {
          const float* x = v.data() + (i * k + d) * 6;
          if (!detection_is_finite(x)) continue;  // left out of detections.json too (a warning says so)
          float box[4] = {x[0], x[1], x[2], x[3]};
          box_to_original(box, h, w, spec, spec ? spec->out_h : h, spec ? spec->out_w : w);
          const std::size_t c = static_cast<std::size_t>((static_cast<int64_t>(x[5]) + 1) % 256);
          draw_box(rgb, h, w, box, &palette[3 * c], 2);
        }
        j_.write(rel, key, encode_rgb_png(h, w, rgb));
      }
    }
  }

  // Embeddings: one .npy [N, D] of the good samples (float16, or float32 with --dtype float32), and
  // their keys in the same order, one a line (keys_file_line: escaped).  A value float16 cannot hold
  // refuses the export (the partial file is removed); nonzero values that become 0 are warned of.
  void embeddings() {
    const bool f32 = o_.dtype == "float32";
    for (int64_t row = 0; row < r_.size(); ++row)
      if (r_.status()[static_cast<std::size_t>(row)] != 0) bad_.push_back(row);
    if (j_.done("embeddings.npy") && j_.done("embeddings.keys.txt")) return;
    maybe_stop();
    const std::string tmp = j_.begin("embeddings.npy");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) throw Error(str("export: cannot create ", tmp));
    ExportNotes notes;
    std::string keys_text;
    try {
      keys_text = write_embeddings_npy(r_, p_.source, f32, outputs_h5(), f.get(), tmp, notes);
    } catch (const InputError&) {  // a value float16 cannot hold: no file
      f.reset();
      std::remove(tmp.c_str());
      throw;
    }
    if (std::fclose(f.release()) != 0) throw Error(str("export: cannot write ", tmp));
    notes_.insert(notes_.end(), notes.notes.begin(), notes.notes.end());
    warnings_.insert(warnings_.end(), notes.warnings.begin(), notes.warnings.end());
    j_.commit("embeddings.npy", "");
    j_.write("embeddings.keys.txt", "", keys_text);
  }

  // Dense maps: each map scaled to its own range, as 16-bit PNG, and the ranges in one table.
  void dense() {
    const StoredOutput& s = *r_.output(p_.source);
    const int64_t h = s.row_shape[s.row_shape.size() - 2], w = s.row_shape.back();
    std::string table = "key,file,min,max\n";
    const int64_t n = r_.size(), step = block_rows(p_.source);
    std::unordered_map<std::string, std::pair<std::string, int64_t>> owner;
    maybe_stop();
    for (int64_t first = 0; first < n; first += step) {
      const int64_t count = std::min(step, n - first);
      const std::vector<std::string> keys = r_.keys(first, count);
      const std::vector<float> v = r_.read_rows(p_.source, first, count).as_float();
      for (int64_t i = 0; i < count; ++i) {
        if (r_.status()[static_cast<std::size_t>(first + i)] != 0) {
          bad_.push_back(first + i);
          continue;
        }
        const std::string& key = keys[static_cast<std::size_t>(i)];
        bool up = false;
        const std::string rel = export_path(key, ".png", o_.keep_extension, &up);
        if (up && ++went_up_ == 1) first_up_ = {key, rel};
        claim(owner, rel, key, first + i, ".png");
        const float* m = v.data() + i * h * w;
        int64_t mh = h, mw = w;
        std::vector<float> back;
        if (o_.original_size) {  // the map in the photo's pixels: its pixel indices through the masks' geometry
          const auto [ih, iw] = r_.original_size(first + i);
          if (ih < 1 || iw < 1)
            throw InputError(str("export: sample '", key, "' has no original size in /sample_size (", ih, "x", iw, ")"));
          Mask index;
          index.height = h;
          index.width = w;
          index.classes.resize(static_cast<std::size_t>(h * w));
          for (int64_t j = 0; j < h * w; ++j) index.classes[static_cast<std::size_t>(j)] = static_cast<uint32_t>(j);
          constexpr uint32_t kCut = 0xffffffffu;  // cut off by a center crop: the model never saw it
          const Mask at = geometry_ ? undo_geometry(index, ih, iw, *geometry_, kCut) : resize_nearest(index, ih, iw);
          back.resize(at.classes.size());
          for (std::size_t j = 0; j < back.size(); ++j) back[j] = at.classes[j] == kCut ? NAN : m[at.classes[j]];
          m = back.data();
          mh = ih;
          mw = iw;
        }
        // The range of the finite values; a non-finite pixel is written as 0.
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t j = 0; j < mh * mw; ++j)
          if (std::isfinite(m[j])) {
            lo = std::min(lo, m[j]);
            hi = std::max(hi, m[j]);
          }
        if (!(lo <= hi)) lo = hi = 0.f;
        table += str(csv_field(key), ",", csv_field(rel), ",", str_float(lo), ",", str_float(hi), "\n");
        if (j_.done(rel)) continue;
        Mask q;
        q.height = mh;
        q.width = mw;
        q.classes.resize(static_cast<std::size_t>(mh * mw));
        const double span = static_cast<double>(hi) - static_cast<double>(lo);
        for (int64_t j = 0; j < mh * mw; ++j)
          q.classes[static_cast<std::size_t>(j)] =
              !std::isfinite(m[j]) || span <= 0 ? 0u
                                                : static_cast<uint32_t>(std::lround((static_cast<double>(m[j]) - lo) / span * 65535.0));
        j_.write(rel, key, encode_gray16_png(q));
      }
    }
    if (!j_.done("dense_scale.csv")) j_.write("dense_scale.csv", "", table);
  }

  // The shortest decimal text that reads back as the same float.
  static std::string str_float(float v) {
    char buf[32];
    for (int digits = 6; digits <= 9; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
      if (std::strtof(buf, nullptr) == v) break;
    }
    return buf;
  }

  const ExportOptions& o_;
  const RunOutputs& r_;
  const Plan& p_;
  ExportJournal& j_;
  std::vector<int64_t> bad_;
  std::vector<std::string> unwritable_;  // keys whose file could not be named, with why
  std::vector<std::string> notes_, warnings_;
  int64_t went_up_ = 0;
  std::pair<std::string, std::string> first_up_;
  std::optional<PreprocessSpec> geometry_;  // the run's, when recorded (else a plain resize)
  bool stopped_ = false;
};

// What makes two exports the same: a rerun skips files only when this matches.
std::string header_of(const ExportOptions& o, const RunOutputs& r, const Plan& p) {
  // outputs.h5 is written once, when a run completes: its size and time tell one run from the next.
  struct stat st {};
  ::stat(r.path().c_str(), &st);
  json h{{"run", fs::absolute(o.run_dir).lexically_normal().string()},
         {"outputs_h5", {{"bytes", static_cast<int64_t>(st.st_size)},
                         {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}}},
         {"what", p.what},
         {"source", p.source},
         {"keep_extension", o.keep_extension}};
  if (p.what == "masks" || p.what == "dense") h["original_size"] = o.original_size;
  if (p.what == "masks" && o.original_size) h["outside"] = o.outside;
  if (p.what == "detections") {
    h["labels_sha256"] = o.labels.empty() ? "" : sha256_file(o.labels);
    h["draw"] = o.draw;
    h["images"] = "images.json";  // written beside the results (and image ids unique) since this field
  }
  if (p.what == "embeddings") {
    h["dtype"] = o.dtype.empty() ? "float16" : o.dtype;
    h["keys"] = "escaped";  // embeddings.keys.txt: keys_file_line
  }
  if (p.what == "classes") {
    h["top_k"] = o.top_k;
    h["csv"] = o.csv;
    h["labels_sha256"] = o.labels.empty() ? "" : sha256_file(o.labels);
  }
  return dump_json(h);
}

// Under a launcher every rank meets the others once in the start-up verdict (cluster/launch.h),
// after rank 0's work or its error line (the command line's error path brings rank 0's status
// there): every rank then exits with rank 0's status.
void meet_the_other_ranks() {
  if (const int status = settle_at_start(0, "")) throw CLI::RuntimeError(status);
}

void export_command(const ExportOptions& o) {
  // Export is one process's work; under mpirun or srun the other ranks leave it to rank 0.
  if (launcher_rank() != 0) {
    meet_the_other_ranks();
    return;
  }
  if (o.top_k < 1) throw UsageError(str("--top-k must be at least 1, got ", o.top_k));
  if (o.threads < 0) throw UsageError(str("--threads must be 0 (all cores) or more, got ", o.threads));
  check_thread_count("--threads", o.threads);
  {
    // The table is a file of the export folder: never a path out of it (nor onto the run's files).
    const fs::path csv(o.csv);
    bool up = false;
    for (const auto& part : csv) up = up || part == "..";
    if (o.csv.empty() || csv.is_absolute() || up || !csv.has_filename())
      throw UsageError(str("--csv '", o.csv, "': the table is written inside the export folder; give a file name such "
                           "as classes.csv (a subfolder at most, no '..', not an absolute path), and choose the folder "
                           "with --out"));
  }
  ExportOptions opts = o;
  if (opts.threads == 0) opts.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The run folder's lock, held to the end: no `sluice run` (a resume, an --overwrite that moves the
  // files away and writes new rank files) can change what outputs.h5 maps while it is read.  A job
  // holding it is running: outputs.h5, if there, is not the final one (or is about to be replaced).
  std::error_code ec;
  if (!fs::is_directory(o.run_dir, ec)) throw InputError(str("export: ", o.run_dir, ": no such run folder"));
  std::string holder;
  const std::unique_ptr<FolderLock> lock = FolderLock::try_acquire(o.run_dir, "sluice export", &holder);
  if (!lock)
    throw InputError(str("export: the run folder ", o.run_dir, " is in use (", holder,
                         "): a job is still writing it, or another export reads it; wait for it to end, then export"),
                     str("`sluice inspect ", o.run_dir, "` shows how far the job is"));
  const RunOutputs r(o.run_dir);
  const Plan p = make_plan(r, opts);
  if (p.what != "masks" && p.what != "dense" && o.original_size)
    throw UsageError("--original-size applies to masks and dense maps (--what dense) only");
  if (p.what != "detections" && o.draw) throw UsageError("--draw applies to detections only");
  if (p.what != "embeddings" && !o.dtype.empty()) throw UsageError("--dtype applies to embeddings only");
  if (p.what != "classes" && p.what != "detections" && !o.labels.empty())
    throw UsageError("--labels applies to classes and detections only");
  const std::string out = o.out.empty() ? (fs::path(o.run_dir) / "export").string() : o.out;
  ExportJournal journal(out, header_of(o, r, p), o.overwrite, o.run_dir);
  Exporter e(opts, r, p, journal);
  e.run();

  const std::string unit = p.what == "classes" ? "table" : p.what == "masks" ? "masks" : "files";
  std::string line = str("export: ", p.what == "classes" ? out + "/" + o.csv : out, ": ", journal.written(), " ", unit,
                         " written, ", journal.skipped(), " already there");
  line += str(", ", r.size() - static_cast<int64_t>(e.bad().size()), " of ", r.size(), " samples from /outputs/",
              p.source, p.stored_topk ? "_{values,indices}" : "");
  if (!e.bad().empty()) {
    const std::vector<std::string> all = r.keys(0, r.size());
    line += str("; ", e.bad().size(), " bad sample(s) skipped:");
    constexpr std::size_t kListed = 10;
    for (std::size_t i = 0; i < e.bad().size() && i < kListed; ++i) {
      const int64_t row = e.bad()[i];
      const std::string why = r.bad_reason(row);
      line += str(i ? ", " : " ", all[static_cast<std::size_t>(row)], why.empty() ? "" : " (" + why + ")");
    }
    if (e.bad().size() > kListed) line += str(", ... (", e.bad().size() - kListed, " more in /bad_samples)");
  }
  std::printf("%s\n", line.c_str());
  for (const std::string& note : e.notes()) std::printf("export: note: %s\n", note.c_str());
  if (e.went_up() > 0)
    std::printf("export: note: %lld key(s) start above the input's folder, as '%s' (a list file's '..' entries); "
                "each '..' part is written as '%s' inside %s, so it is %s/%s\n",
                static_cast<long long>(e.went_up()), e.first_up().first.c_str(), kUpPart, out.c_str(), out.c_str(),
                e.first_up().second.c_str());
  std::fflush(stdout);
  for (const std::string& warning : e.warnings()) std::fprintf(stderr, "export: warning: %s\n", warning.c_str());
  std::fflush(stderr);
  if (!e.unwritable().empty()) {
    std::string names;
    constexpr std::size_t kListed = 5;
    for (std::size_t i = 0; i < e.unwritable().size() && i < kListed; ++i) names += (i ? ", " : "") + e.unwritable()[i];
    if (e.unwritable().size() > kListed) names += str(", ... (", e.unwritable().size() - kListed, " more)");
    throw InputError(str("export: ", e.unwritable().size(), " sample(s) not exported, their file names cannot be ",
                         "written in ", out, ": ", names),
                     "shorten those file names in the input (or export to a file system that takes longer names)");
  }
  meet_the_other_ranks();
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand("export", "Write a finished run's outputs as files named after the samples' keys: "
                                               "PNG masks, a CSV of top-k classes, or .npy arrays");
  sub->add_option("RUN_DIR", o->run_dir, "the run's output folder (with outputs.h5)")->required();
  sub->add_option("--out", o->out, "the export folder (default RUN_DIR/export)");
  sub->add_option("--what", o->what,
                  "masks | classes | logits | detections (COCO JSON, CSV, images.json) | embeddings (.npy and keys) | "
                  "dense (float maps as 16-bit PNGs and their ranges) | auto (by the stored outputs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "masks", "classes", "logits", "detections", "embeddings", "dense"}));
  sub->add_option("--output", o->output, "the stored output to read (e.g. argmax, logits, topk_probs)");
  sub->add_flag("--original-size", o->original_size,
                "masks, dense: each mask or map at its image's original size, undoing the run's resize, center crop "
                "or letterbox (nearest neighbour, as PIL's NEAREST; a dense map's pixels the crop cut off are 0)");
  sub->add_option("--outside", o->outside,
                  "masks with --original-size: the class of the pixels a --center-crop cut off (the model never saw them)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--labels", o->labels,
                  "classes, detections: a text file with one class name per line (line i: class i); detections also "
                  "take \"ID NAME\" lines, ID being the COCO category_id of class i");
  sub->add_option("--top-k", o->top_k, "classes: how many classes per row (at most what a topk output holds)")
      ->capture_default_str();
  sub->add_option("--csv", o->csv, "classes: the table's file name in the export folder")->capture_default_str();
  sub->add_flag("--draw", o->draw,
                "detections: also draw/<key>.png, each photo with its boxes (read again from the run's input folder)");
  sub->add_option("--dtype", o->dtype,
                  "embeddings: float16 (the default; a value beyond its range is refused) or float32 (as stored)")
      ->check(CLI::IsMember({"float16", "float32"}));
  sub->add_flag("--keep-extension", o->keep_extension, "name files <key>.png instead of replacing the key's extension");
  sub->add_flag("--overwrite", o->overwrite, "replace files in the export folder that this command did not write");
  sub->add_option("--threads", o->threads, "masks: PNG encoding threads (0: all cores; at most 4 per core, or 8)")
      ->capture_default_str();
  sub->add_option("--test-kill-after", o->test_kill_after, "")->group("");
  sub->add_flag("--test-stop-before-reading", o->test_stop_before_reading, "")->group("");
  sub->callback([o] { export_command(*o); });
}

}  // namespace sluice
