#include "export/detections.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/json_text.h"
#include "export/classes.h"

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

void draw_box(std::vector<uint8_t>& rgb, int height, int width, const float* b, const uint8_t colour[3], int thickness) {
  const int x1 = std::clamp(static_cast<int>(std::floor(b[0])), 0, width - 1);
  const int y1 = std::clamp(static_cast<int>(std::floor(b[1])), 0, height - 1);
  const int x2 = std::clamp(static_cast<int>(std::ceil(b[2])) - 1, 0, width - 1);
  const int y2 = std::clamp(static_cast<int>(std::ceil(b[3])) - 1, 0, height - 1);
  auto put = [&](int x, int y) {
    uint8_t* p = rgb.data() + (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 3;
    p[0] = colour[0];
    p[1] = colour[1];
    p[2] = colour[2];
  };
  for (int t = 0; t < thickness; ++t) {
    for (int x = x1; x <= x2; ++x) {
      put(x, std::min(y1 + t, y2));
      put(x, std::max(y2 - t, y1));
    }
    for (int y = y1; y <= y2; ++y) {
      put(std::min(x1 + t, x2), y);
      put(std::max(x2 - t, x1), y);
    }
  }
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

}  // namespace sluice
