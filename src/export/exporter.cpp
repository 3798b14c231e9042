// The exporter (export/exporter.h).
#include "export/exporter.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "export/draw.h"
#include "export/geometry.h"
#include "export/masks.h"
#include "io/npy.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;

bool is_logits(const std::string& what) { return what == "logits" || what == "npy"; }

// The shortest decimal text that reads back as the same float.
std::string str_float(float v) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

// A detection's label on the preview: its class's name (the labels file's) or id, and its score.
std::string box_label(const Categories& cats, int64_t cls, float score) {
  const std::string name = cats.name(cls);
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", static_cast<double>(score));
  return str(name.empty() ? std::to_string(cats.id(cls)) : name, " ", s);
}

}  // namespace

// ---- the plan's pieces ---------------------------------------------------------------------------

const std::vector<std::string>& source_order(const std::string& what) {
  static const std::vector<std::string> masks{"argmax", "softmax", "logits"}, logits{"logits", "softmax"},
      classes{"topk_probs", "softmax", "logits", "topk"}, detections{"detections"}, embeddings{"embedding"}, none;
  if (what == "masks") return masks;
  if (is_logits(what) || what == "dense") return logits;
  if (what == "classes") return classes;
  if (what == "detections") return detections;
  if (what == "embeddings") return embeddings;
  return none;
}

std::string default_source(const std::string& what, const std::vector<std::string>& outputs) {
  auto has = [&](const std::string& n) { return std::find(outputs.begin(), outputs.end(), n) != outputs.end(); };
  for (const std::string& n : source_order(what))
    if (has(n) || (has(n + "_values") && has(n + "_indices"))) return n;
  if (is_logits(what) && !outputs.empty()) return outputs.front();
  return "";
}

std::string shape_problem(const std::string& what, const std::string& source, const FindOutput& find) {
  const StoredOutput* d = find(source);
  if (!d) return "";  // a top-k prefix (classes)
  const Shape& rs = d->row_shape;
  const std::string has = str("/outputs/", source, " has rows of shape ", shape_str(rs));
  if (what == "detections") {
    const StoredOutput* c = find(source + "_count");
    if (rs.size() != 2 || rs[1] != 6 || !c || !c->row_shape.empty())
      return str(has, c ? "" : str(" and there is no /outputs/", source, "_count"),
                 "; detections are rows [K, 6] with a count per sample");
  } else if (what == "dense") {
    const bool float_map = d->dtype == DType::F32 || d->dtype == DType::F16 || d->dtype == DType::BF16;
    if (!float_map || !(rs.size() == 2 || (rs.size() == 3 && rs[0] == 1)))
      return str("/outputs/", source, " holds ", dtype_name(d->dtype), " rows of shape ", shape_str(rs),
                 "; a dense map is one float value per pixel ([H, W] or [1, H, W])");
  } else if (what == "embeddings") {
    if (rs.size() != 1) return str(has, "; embeddings are one vector [D] per sample");
  } else if (what == "classes") {
    if (rs.empty() || shape_numel(rs) != rs[0]) return str(has, "; a class table needs one score per class ([C])");
  }
  return "";
}

ClassPlan class_plan(const std::string& source, const FindOutput& find, int top_k) {
  ClassPlan p;
  const bool stored = !find(source) && find(source + "_values") && find(source + "_indices");
  p.data = stored ? source + "_values" : source;
  if (stored) p.ids = source + "_indices";
  p.softmax = !stored && source != "softmax";
  if (stored && source != "topk_probs") p.value_name = "logit";
  const StoredOutput* d = find(p.data);
  SLUICE_CHECK(d, "export: no output ", p.data);
  p.width = static_cast<std::size_t>(shape_numel(d->row_shape));
  p.k = std::min<std::size_t>(static_cast<std::size_t>(top_k), stored ? static_cast<std::size_t>(d->row_shape.at(0)) : p.width);
  return p;
}

std::string class_line(const ClassPlan& p, const std::string& key, const Tensor& values, const Tensor& ids, int64_t i,
                       const std::vector<std::string>* labels) {
  const TopK t = p.ids.empty() ? top_k_of(values, static_cast<std::size_t>(i) * p.width, p.width, p.k, p.softmax)
                               : stored_top_k(values, ids, i, p.k);
  return csv_row(key, t, labels);
}

std::string row_extension(const std::string& what) {
  if (what == "masks" || what == "dense") return ".png";
  if (is_logits(what)) return ".npy";
  return "";
}

void write_row_file(ExportFolder& folder, const std::string& rel, const std::string& key, const std::string& what,
                    const StoredOutput& o, const void* row) {
  if (what == "masks") {
    Shape shape{1};
    shape.insert(shape.end(), o.row_shape.begin(), o.row_shape.end());
    Tensor t(o.dtype, shape);
    std::memcpy(t.bytes.data(), row, t.nbytes());
    folder.write(rel, key, encode_mask_png(mask_of_row(t, 0)));
    return;
  }
  SLUICE_CHECK(is_logits(what), "export: no row format ", what);
  const std::string tmp = folder.begin(rel);
  try {
    write_npy(tmp, o.dtype, o.row_shape, row);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  folder.commit(rel, key);
}

// ---- the exporter --------------------------------------------------------------------------------

Exporter::Exporter(const ExportSpec& spec, const RunOutputs& r, ExportFolder& folder, KeptRows kept)
    : s_(spec), r_(r), f_(folder), kept_(std::move(kept)),
      names_("export: ", row_extension(spec.what), spec.keep_extension, true) {
  if (s_.original_size && r_.preprocess()) geometry_ = geometry_from_json(*r_.preprocess());
}

void Exporter::run() {
  if (s_.what == "classes") classes();
  else if (s_.what == "detections") {
    detections();
    if (!s_.photos.empty()) draw();
  }
  else if (s_.what == "embeddings") embeddings();
  else if (s_.what == "dense") dense();
  else per_sample();
}

int64_t Exporter::block_rows(const std::string& name) const { return sluice::block_rows(*r_.output(name)); }

Tensor Exporter::read(const std::string& name, int64_t first, int64_t count) const {
  return kept_.read ? kept_.read(name, first, count) : r_.read_rows(name, first, count);
}

void Exporter::add_notes(const ExportNotes& n) {
  notes_.insert(notes_.end(), n.notes.begin(), n.notes.end());
  warnings_.insert(warnings_.end(), n.warnings.begin(), n.warnings.end());
}

void Exporter::mark_bad_rows() {
  for (int64_t row = 0; row < r_.size(); ++row)
    if (r_.status()[static_cast<std::size_t>(row)] != 0) bad_.push_back(row);
}

// Test hook: stop (SIGSTOP) once, holding the run folder's lock, before the first rows are read, so
// that a test can start a job on the same folder at that very moment.
void Exporter::maybe_stop() {
  if (!s_.test_stop_before_reading || stopped_) return;
  stopped_ = true;
  std::fflush(nullptr);
  std::raise(SIGSTOP);
}

void Exporter::maybe_die(const std::string& rel) {
  if (s_.test_kill_after < 0 || f_.written() < s_.test_kill_after) return;
  // Test hook: leave a claimed, half-written file behind, as a kill -9 in the middle would.
  if (std::FILE* f = std::fopen(f_.begin(rel).c_str(), "wb")) {
    std::fputs("partial", f);
    std::fclose(f);
  }
  std::fflush(nullptr);
  std::raise(SIGKILL);
}

// Masks and logits: one file per good row.
void Exporter::per_sample() {
  const int64_t n = r_.size(), step = block_rows(s_.source);
  const StoredOutput& s = *r_.output(s_.source);
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
      rel = names_.claim(key, row);
      const std::string why = f_.name_problem(rel);
      if (!why.empty()) {
        // A key whose file name this file system cannot hold: the others are still exported.
        unwritable_.push_back(str("'", key, "' (", why, ")"));
        continue;
      }
      todo[static_cast<std::size_t>(i)] = !f_.done(rel);
    }
    if (std::find(todo.begin(), todo.end(), true) == todo.end()) continue;
    maybe_stop();
    const Tensor rows = r_.read_rows(s_.source, first, count);
    std::vector<std::string> pngs;
    if (s_.what == "masks") pngs = encode_block(rows, first, keys, todo);
    for (int64_t i = 0; i < count; ++i) {
      if (!todo[static_cast<std::size_t>(i)]) continue;
      const std::string& rel = rels[static_cast<std::size_t>(i)];
      const std::string& key = keys[static_cast<std::size_t>(i)];
      maybe_die(rel);
      if (s_.what == "masks") f_.write(rel, key, pngs[static_cast<std::size_t>(i)]);
      else write_row_file(f_, rel, key, s_.what, s, rows.bytes.data() + static_cast<std::size_t>(i) * s.row_bytes());
    }
  }
}

// The PNG files of a block's rows that are to be written, encoded on s_.threads threads (the
// encoding is the export's cost; the files are then written in order by the caller).
std::vector<std::string> Exporter::encode_block(const Tensor& rows, int64_t first, const std::vector<std::string>& keys,
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
        if (s_.original_size) {
          const auto [h, w] = r_.original_size(first + static_cast<int64_t>(i));
          if (h < 1 || w < 1)
            throw InputError(str("export: sample '", keys[i], "' has no original size in /sample_size (", h, "x", w, ")"));
          m = geometry_ ? undo_geometry(m, h, w, *geometry_, static_cast<uint32_t>(s_.outside)) : resize_nearest(m, h, w);
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
  for (int t = 1; t < s_.threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return pngs;
}

// Classes: one table, written whole (a rerun rewrites it unless it is complete).  A row whose line
// is kept (kept_.class_line) is not computed again; a block whose good rows all are is not read.
void Exporter::classes() {
  const std::string rel = s_.csv;
  const int64_t n = r_.size();
  std::vector<std::string> labels;
  if (!s_.labels.empty()) labels = read_labels(s_.labels);
  const ClassPlan p = class_plan(s_.source, [&](const std::string& name) { return r_.output(name); }, s_.top_k);
  mark_bad_rows();
  if (f_.done(rel)) return;
  const std::string tmp = f_.begin(rel);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) throw Error(str("export: cannot create ", tmp));
  std::string text = csv_header(p.k, !labels.empty(), p.value_name);
  const int64_t step = block_rows(p.data);
  maybe_stop();
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    std::vector<const std::string*> have(static_cast<std::size_t>(count), nullptr);
    bool missing = false;
    for (int64_t i = 0; i < count; ++i) {
      if (r_.status()[static_cast<std::size_t>(first + i)] != 0) continue;
      if (kept_.class_line) have[static_cast<std::size_t>(i)] = kept_.class_line(first + i);
      missing = missing || !have[static_cast<std::size_t>(i)];
    }
    std::vector<std::string> keys;
    Tensor values, ids;
    if (missing) {
      keys = r_.keys(first, count);
      values = r_.read_rows(p.data, first, count);
      if (!p.ids.empty()) ids = r_.read_rows(p.ids, first, count);
    }
    for (int64_t i = 0; i < count; ++i) {
      if (r_.status()[static_cast<std::size_t>(first + i)] != 0) continue;
      if (const std::string* line = have[static_cast<std::size_t>(i)]) text += *line;
      else text += class_line(p, keys[static_cast<std::size_t>(i)], values, ids, i, labels.empty() ? nullptr : &labels);
    }
    if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size()) {
      f.reset();
      ::unlink(tmp.c_str());
      throw Error(str("export: cannot write ", tmp, " (disk full?)"));
    }
    text.clear();
  }
  if (std::fclose(f.release()) != 0) throw Error(str("export: cannot write ", tmp));
  f_.commit(rel, "");
}

// Detections: detections.json (COCO results), detections.csv and images.json (the COCO images
// they refer to), written whole.  A detection with a value that is not a finite number is left
// out of both lists (JSON has no NaN), and counted in a warning.
void Exporter::detections() {
  cats_ = read_categories(s_.labels);
  mark_bad_rows();
  const bool done = f_.done("detections.json") && f_.done("detections.csv") && f_.done("images.json");
  if (!done) maybe_stop();
  const DetectionFiles files =
      detection_files(r_, s_.source, cats_, [this](const std::string& name, int64_t first, int64_t count) {
        return read(name, first, count);
      });
  add_notes(files.notes);
  if (done) return;
  if (!f_.done("detections.json")) f_.write("detections.json", "", files.json);
  if (!f_.done("detections.csv")) f_.write("detections.csv", "", files.csv);
  if (!f_.done("images.json")) f_.write("images.json", "", files.images);
}

// Previews: each good photo with its boxes drawn (2 px, the class's palette colour) and labelled
// (class name or id, and score, in the box's colour: export/draw.h), as draw/<key>.png.  The
// photos are read again from the run's input folder (decoded by spec.decode_photo).  Each box is
// drawn with its label before the next (by score), so the last box's outline is whole.
void Exporter::draw() {
  std::optional<PreprocessSpec> spec;
  if (r_.preprocess()) spec = geometry_from_json(*r_.preprocess());
  const int64_t n = r_.size(), k = r_.output(s_.source)->row_shape[0];
  const int64_t step = block_rows(s_.source);
  const auto& palette = class_palette();
  constexpr int kThickness = 2;
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    const std::vector<std::string> keys = r_.keys(first, count);
    const std::vector<float> v = read(s_.source, first, count).as_float();
    const std::vector<int64_t> stored = read(s_.source + "_count", first, count).as_int64();
    for (int64_t i = 0; i < count; ++i) {
      if (r_.status()[static_cast<std::size_t>(first + i)] != 0) continue;
      const std::string& key = keys[static_cast<std::size_t>(i)];
      const std::string rel = "draw/" + export_path(key, ".png", s_.keep_extension, nullptr);
      if (f_.done(rel)) continue;
      const fs::path photo = fs::path(s_.photos) / key;
      std::ifstream in(photo, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::vector<uint8_t> rgb;
      int h = 0, w = 0;
      std::string why;
      if (!in.good() && !in.eof()) why = "cannot read it";
      SLUICE_CHECK(s_.decode_photo, "export: no photo decoder for --draw");
      if (why.empty() && !s_.decode_photo(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), rgb, &h, &w, &why))
        why = why.empty() ? "cannot decode it" : why;
      if (!why.empty())
        throw InputError(str("export --draw: ", photo.string(), ": ", why, " (the photo changed since the run?)"));
      for (int64_t d = 0; d < std::min<int64_t>(stored[static_cast<std::size_t>(i)], k); ++d) {
        const float* x = v.data() + (i * k + d) * 6;
        if (!detection_is_finite(x)) continue;  // left out of detections.json too (a warning says so)
        float box[4] = {x[0], x[1], x[2], x[3]};
        box_to_original(box, h, w, spec, spec ? spec->out_h : h, spec ? spec->out_w : w);
        const int64_t cls = static_cast<int64_t>(x[5]);
        const uint8_t* colour = &palette[3 * static_cast<std::size_t>(((cls + 1) % 256 + 256) % 256)];
        draw_box(rgb, h, w, box, colour, kThickness);
        draw_box_label(rgb, h, w, box, box_label(cats_, cls, x[4]), colour, kThickness);
      }
      f_.write(rel, key, encode_rgb_png(h, w, rgb));
    }
  }
}

// Embeddings: one .npy [N, D] of the good samples (float16, or float32 as stored), and their keys
// in the same order, one a line (keys_file_line: escaped).  A value float16 cannot hold refuses the
// export (the partial file is removed); nonzero values that become 0 are warned of.
void Exporter::embeddings() {
  mark_bad_rows();
  if (f_.done("embeddings.npy") && f_.done("embeddings.keys.txt")) return;
  maybe_stop();
  const std::string tmp = f_.begin("embeddings.npy");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) throw Error(str("export: cannot create ", tmp));
  ExportNotes notes;
  std::string keys_text;
  try {
    keys_text = write_embeddings_npy(
        r_, s_.source, s_.float32,
        [this](const std::string& name, int64_t first, int64_t count) { return read(name, first, count); }, f.get(), tmp,
        notes);
  } catch (...) {  // a value float16 cannot hold, or a write that failed: no file
    f.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::fclose(f.release()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(str("export: cannot write ", tmp, " (disk full?)"));
  }
  add_notes(notes);
  f_.commit("embeddings.npy", "");
  f_.write("embeddings.keys.txt", "", keys_text);
}

// Dense maps: each map scaled to its own range, as 16-bit PNG, and the ranges in one table.
void Exporter::dense() {
  const StoredOutput& s = *r_.output(s_.source);
  const int64_t h = s.row_shape[s.row_shape.size() - 2], w = s.row_shape.back();
  std::string table = "key,file,min,max\n";
  const int64_t n = r_.size(), step = block_rows(s_.source);
  maybe_stop();
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    const std::vector<std::string> keys = r_.keys(first, count);
    const std::vector<float> v = r_.read_rows(s_.source, first, count).as_float();
    for (int64_t i = 0; i < count; ++i) {
      if (r_.status()[static_cast<std::size_t>(first + i)] != 0) {
        bad_.push_back(first + i);
        continue;
      }
      const std::string& key = keys[static_cast<std::size_t>(i)];
      const std::string rel = names_.claim(key, first + i);
      const float* m = v.data() + i * h * w;
      int64_t mh = h, mw = w;
      std::vector<float> back;
      if (s_.original_size) {  // the map in the photo's pixels: its pixel indices through the masks' geometry
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
      if (f_.done(rel)) continue;
      Mask q;
      q.height = mh;
      q.width = mw;
      q.classes.resize(static_cast<std::size_t>(mh * mw));
      const double span = static_cast<double>(hi) - static_cast<double>(lo);
      for (int64_t j = 0; j < mh * mw; ++j)
        q.classes[static_cast<std::size_t>(j)] =
            !std::isfinite(m[j]) || span <= 0 ? 0u
                                              : static_cast<uint32_t>(std::lround((static_cast<double>(m[j]) - lo) / span * 65535.0));
      f_.write(rel, key, encode_gray16_png(q));
    }
  }
  if (!f_.done("dense_scale.csv")) f_.write("dense_scale.csv", "", table);
}

}  // namespace sluice
