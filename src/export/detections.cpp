#include "export/detections.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/json_text.h"
#include "core/dtype.h"
#include "export/classes.h"
#include "export/geometry.h"

namespace sluice {

void box_to_original(float* b, int in_h, int in_w, const std::optional<PreprocessSpec>& spec, int model_h, int model_w) {
  float ox = 0.f, oy = 0.f, sx, sy;
  if (spec) {
    const ResizePlan p = plan_resize(in_h, in_w, *spec);
    ox = static_cast<float>(p.offset_x);
    oy = static_cast<float>(p.offset_y);
    sx = static_cast<float>(in_w) / static_cast<float>(p.resized_w);
    sy = static_cast<float>(in_h) / static_cast<float>(p.resized_h);
  } else {
    sx = static_cast<float>(in_w) / static_cast<float>(model_w);
    sy = static_cast<float>(in_h) / static_cast<float>(model_h);
  }
  for (int j = 0; j < 4; ++j) {
    const bool is_x = j % 2 == 0;
    const float v = (b[j] + (is_x ? ox : oy)) * (is_x ? sx : sy);
    b[j] = std::clamp(v, 0.f, static_cast<float>(is_x ? in_w : in_h));
  }
}

int64_t Categories::id(int64_t cls) const {
  if (ids.empty()) return cls;
  if (cls < 0 || cls >= static_cast<int64_t>(ids.size()))
    throw InputError(str("export: class ", cls, " has no line in the labels file (it has ", ids.size(), ")"));
  return ids[static_cast<std::size_t>(cls)];
}

std::string Categories::name(int64_t cls) const {
  if (names.empty()) return "";
  id(cls);
  return names[static_cast<std::size_t>(cls)];
}

Categories read_categories(const std::string& path) {
  Categories c;
  if (path.empty()) return c;
  for (const std::string& line : read_labels(path)) {
    std::size_t i = 0;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    if (i > 0 && i < 19 && i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
      c.ids.push_back(std::stoll(line.substr(0, i)));
      c.names.push_back(line.substr(line.find_first_not_of(" \t", i) == std::string::npos ? line.size()
                                                                                         : line.find_first_not_of(" \t", i)));
    } else {
      c.ids.push_back(static_cast<int64_t>(c.ids.size()));
      c.names.push_back(line);
    }
  }
  return c;
}

ImageIds coco_image_ids(const std::vector<std::string>& keys, const std::vector<bool>& used) {
  ImageIds r;
  r.ids.assign(keys.size(), -1);
  std::unordered_map<int64_t, std::size_t> first_with;  // number -> the first row whose stem it is
  for (std::size_t row = 0; row < keys.size() && r.why_rows.empty(); ++row) {
    if (!used[row]) continue;
    const std::string& key = keys[row];
    std::string stem = key.substr(key.find_last_of('/') == std::string::npos ? 0 : key.find_last_of('/') + 1);
    stem = stem.substr(0, stem.find('.'));
    const bool digits = !stem.empty() && stem.size() < 19 &&
                        std::all_of(stem.begin(), stem.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
    if (!digits) {
      r.why_rows = str("the file name of '", key, "' is not a number");
      break;
    }
    const int64_t id = std::stoll(stem);
    const auto [it, fresh] = first_with.emplace(id, row);
    if (!fresh) r.why_rows = str("'", keys[it->second], "' and '", key, "' are both number ", id);
    r.ids[row] = id;
  }
  if (!r.why_rows.empty())
    for (std::size_t row = 0; row < keys.size(); ++row) r.ids[row] = static_cast<int64_t>(row);
  return r;
}

bool detection_is_finite(const float* row) {
  for (int j = 0; j < 6; ++j)
    if (!std::isfinite(row[j])) return false;
  return std::fabs(row[5]) < 9.0e18f;  // a class that an int64 holds
}

std::string keys_file_line(const std::string& key, bool* escaped) {
  std::string line;
  line.reserve(key.size());
  for (char c : key) {
    if (c == '\\') line += "\\\\";
    else if (c == '\n') line += "\\n";
    else if (c == '\r') line += "\\r";
    else line += c;
  }
  if (escaped && line.size() != key.size()) *escaped = true;
  return line;
}

namespace {
// Shortest text that reads back as the same float.
std::string num(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  for (int digits = 6; digits < 9; ++digits) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(shorter, nullptr) == v) return shorter;
  }
  return buf;
}
}  // namespace

std::string coco_entry(int64_t image_id, const std::string& key, int64_t category, const float* b, float score) {
  return str("{\"image_id\": ", image_id, ", \"file_name\": ", dump_json(nlohmann::json(key)), ", \"category_id\": ", category,
             ", \"bbox\": [", num(b[0]), ", ", num(b[1]), ", ", num(b[2] - b[0]), ", ", num(b[3] - b[1]),
             "], \"score\": ", num(score), "}");
}

std::string detection_csv_header() { return "key,category_id,label,score,x1,y1,x2,y2\n"; }

std::string detection_csv_row(const std::string& key, int64_t category, const std::string& label, float score,
                              const float* b) {
  return str(csv_field(key), ",", category, ",", csv_field(label), ",", num(score), ",", num(b[0]), ",", num(b[1]), ",",
             num(b[2]), ",", num(b[3]), "\n");
}

namespace {

// COCO's dataset file without annotations for the results: every good sample as an image (its
// id, key as file_name, original width and height: in model-input pixels without image sizes,
// none when even those are not recorded), and the categories (the labels file's, else the ids
// the results use, named by their number).
std::string images_json(const RunOutputs& r, const std::vector<std::string>& keys, const std::vector<bool>& good,
                        const ImageIds& ids, const Categories& cats, const std::set<int64_t>& seen,
                        const std::optional<PreprocessSpec>& spec) {
  using nlohmann::json;
  std::string text = "{\"images\": [";
  bool first = true;
  for (std::size_t row = 0; row < keys.size(); ++row) {
    if (!good[row]) continue;
    int32_t h = 0, w = 0;
    if (r.has_sizes() && spec) std::tie(h, w) = r.original_size(static_cast<int64_t>(row));
    if ((h < 1 || w < 1) && spec && spec->out_h > 0 && spec->out_w > 0) std::tie(h, w) = std::make_pair(spec->out_h, spec->out_w);
    json img{{"id", ids.ids[row]}, {"file_name", keys[row]}};
    if (h > 0 && w > 0) {
      img["width"] = w;
      img["height"] = h;
    }
    text += str(first ? "\n" : ",\n", dump_json(img));
    first = false;
  }
  text += "\n], \"annotations\": [], \"categories\": [";
  first = true;
  std::set<int64_t> listed;
  auto category = [&](int64_t id, const std::string& name) {
    if (!listed.insert(id).second) return;
    text += str(first ? "\n" : ",\n", dump_json(json{{"id", id}, {"name", name}}));
    first = false;
  };
  if (!cats.ids.empty())
    for (std::size_t c = 0; c < cats.ids.size(); ++c) category(cats.ids[c], cats.names[c]);
  else
    for (const int64_t id : seen) category(id, std::to_string(id));
  return text + "\n]}\n";
}

}  // namespace

DetectionFiles detection_files(const RunOutputs& r, const std::string& source, const Categories& cats,
                               const RowReader& read) {
  DetectionFiles out;
  const int64_t n = r.size();
  std::vector<bool> good(static_cast<std::size_t>(n), false);
  for (int64_t row = 0; row < n; ++row) good[static_cast<std::size_t>(row)] = r.status()[static_cast<std::size_t>(row)] == 0;
  // Boxes are in model-input pixels; with image sizes they go back to the original image.
  std::optional<PreprocessSpec> spec;
  if (r.preprocess()) spec = geometry_from_json(*r.preprocess());
  // Sizes without the geometry (not written by sluice run): the boxes stay in model-input pixels.
  const bool to_photo = r.has_sizes() && spec;
  if (r.has_sizes() && !spec)
    out.notes.notes.push_back(str(r.path(), " does not record the run's image geometry: the boxes are in the model "
                                  "input's pixels, not the photos'"));
  const std::vector<std::string> all_keys = r.keys(0, n);
  const ImageIds ids = coco_image_ids(all_keys, good);
  if (!ids.why_rows.empty())
    out.notes.notes.push_back(str("image_id is each sample's index, not its file name's number (", ids.why_rows,
                                  "): images.json names the file of each id"));
  const int64_t k = r.output(source)->row_shape[0];
  std::string json = "[", csv = detection_csv_header();
  bool first_entry = true;
  std::set<int64_t> seen_categories;
  int64_t dropped = 0;
  std::string dropped_first;
  const int64_t step = block_rows(*r.output(source));
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    const std::vector<float> v = read(source, first, count).as_float();
    const std::vector<int64_t> stored = read(source + "_count", first, count).as_int64();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = first + i;
      if (!good[static_cast<std::size_t>(row)]) continue;
      const std::string& key = all_keys[static_cast<std::size_t>(row)];
      const int32_t m = std::min<int32_t>(static_cast<int32_t>(stored[static_cast<std::size_t>(i)]), static_cast<int32_t>(k));
      std::pair<int32_t, int32_t> size{0, 0};
      if (to_photo) size = r.original_size(row);
      for (int32_t d = 0; d < m; ++d) {
        const float* x = v.data() + (i * k + d) * 6;
        if (!detection_is_finite(x)) {
          if (dropped++ == 0)
            dropped_first = str("'", keys_file_line(key), "' (row ", row, ", detection ", d, ": box ", num(x[0]), ", ",
                                num(x[1]), ", ", num(x[2]), ", ", num(x[3]), ", score ", num(x[4]), ", class ",
                                num(x[5]), ")");
          continue;
        }
        float box[4] = {x[0], x[1], x[2], x[3]};
        if (size.first > 0 && size.second > 0)
          box_to_original(box, size.first, size.second, spec, spec ? spec->out_h : 0, spec ? spec->out_w : 0);
        const int64_t cls = static_cast<int64_t>(x[5]);
        json += str(first_entry ? "\n" : ",\n",
                    coco_entry(ids.ids[static_cast<std::size_t>(row)], key, cats.id(cls), box, x[4]));
        first_entry = false;
        seen_categories.insert(cats.id(cls));
        csv += detection_csv_row(key, cats.id(cls), cats.name(cls), x[4], box);
      }
    }
  }
  json += "\n]\n";
  if (dropped > 0)
    out.notes.warnings.push_back(str(dropped, " detection(s) with a box, score or class that is not a finite number were "
                                     "left out of detections.json and detections.csv, the first ", dropped_first,
                                     "; the model gave them so (check its outputs for that image)"));
  out.json = std::move(json);
  out.csv = std::move(csv);
  out.images = images_json(r, all_keys, good, ids, cats, seen_categories, spec);
  return out;
}

std::string write_embeddings_npy(const RunOutputs& r, const std::string& source, bool f32, const RowReader& read,
                                 std::FILE* f, const std::string& path, ExportNotes& notes) {
  const int64_t n = r.size();
  const int64_t d = r.output(source)->row_shape[0];
  int64_t good = 0;
  for (int64_t row = 0; row < n; ++row) good += r.status()[static_cast<std::size_t>(row)] == 0 ? 1 : 0;
  // .npy 1.0: magic, version, header length, then the header padded with spaces to 64 bytes.
  std::string header = str("{'descr': '", f32 ? "<f4" : "<f2", "', 'fortran_order': False, 'shape': (", good, ", ", d, "), }");
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  std::string keys_text;
  int64_t escaped = 0, to_zero = 0;
  std::string escaped_first, to_zero_first;
  const int64_t step = block_rows(*r.output(source));
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    const std::vector<std::string> keys = r.keys(first, count);
    const std::vector<float> v = read(source, first, count).as_float();
    for (int64_t i = 0; i < count; ++i) {
      if (r.status()[static_cast<std::size_t>(first + i)] != 0) continue;
      const std::string& key = keys[static_cast<std::size_t>(i)];
      for (int64_t j = 0; j < d; ++j) {
        const float x = v[static_cast<std::size_t>(i * d + j)];
        uint32_t bits;
        if (f32) {
          std::memcpy(&bits, &x, 4);
          for (int b = 0; b < 4; ++b) bytes += static_cast<char>((bits >> (8 * b)) & 0xff);
          continue;
        }
        const uint16_t h = f32_to_f16(x);
        if (std::isfinite(x) && (h & 0x7fffu) == 0x7c00u)
          throw InputError(str("export: the embedding of '", keys_file_line(key), "' (row ", first + i, ") holds ", num(x),
                               " (element ", j, "), beyond float16's range (largest 65504): export with --dtype "
                               "float32 to write the vectors as stored"));
        if (x != 0.f && (h & 0x7fffu) == 0 && to_zero++ == 0)
          to_zero_first = str("'", keys_file_line(key), "' (row ", first + i, ", element ", j, ": ", num(x), ")");
        bytes += static_cast<char>(h & 0xff);
        bytes += static_cast<char>(h >> 8);
      }
      bool changed = false;
      keys_text += keys_file_line(key, &changed) + "\n";
      if (changed && escaped++ == 0) escaped_first = str("'", keys_file_line(key), "' (row ", first + i, ")");
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
      throw Error(str("export: cannot write ", path, " (disk full?)"));
    bytes.clear();
  }
  if (to_zero > 0)
    notes.warnings.push_back(str(to_zero, " nonzero embedding value(s) are below float16's smallest (about 6e-8) and were "
                                 "written as 0, the first in ", to_zero_first, "; --dtype float32 keeps them"));
  if (escaped > 0)
    notes.notes.push_back(str(escaped, " key(s) hold a backslash, newline or carriage return, as ", escaped_first,
                              ": embeddings.keys.txt writes them escaped (\\\\, \\n, \\r), one key a line"));
  return keys_text;
}

}  // namespace sluice
