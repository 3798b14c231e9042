#include "app/preprocess_from.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/error.h"

namespace sluice {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string number_text(double v) {
  std::ostringstream os;
  os << std::setprecision(9) << v;
  return os.str();
}

std::string list_text(const std::vector<float>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + number_text(v[i]);
  return out;
}

// What the file says, in Sluice's terms, before the given options are kept.
struct Settings {
  std::string resize, center_crop, interpolation;
  int resize_shortest = 0, max_size = 0, size_multiple = 0;  // DETR's and YOLOS's resize
  bool pad_mean = false;
  float scale = 1.0f;
  std::vector<float> mean, stddev;
};

[[noreturn]] void refuse(const std::string& file, const std::string& what, const std::string& hint) {
  throw UsageError(str("--preprocess-from ", file, ": ", what), hint);
}

std::vector<float> floats(const std::string& file, const json& j, const char* key) {
  if (!j.contains(key)) return {};
  const json& v = j.at(key);
  std::vector<float> out;
  if (v.is_number()) {
    out.assign(3, v.get<float>());
  } else if (v.is_array()) {
    for (const json& x : v) {
      if (!x.is_number()) refuse(file, str(key, " holds ", x.dump(), ", not a number"), "give --mean and --std yourself");
      out.push_back(x.get<float>());
    }
  } else {
    refuse(file, str(key, " is ", v.dump(), ", not a list of numbers"), "give --mean and --std yourself");
  }
  return out;
}

// PIL's resampling codes (what Hugging Face's processors store as `resample`).
std::string pil_filter(const std::string& file, const json& j) {
  if (!j.contains("resample")) return "bilinear";  // the image processors' usual default
  const json& r = j.at("resample");
  const int code = r.is_number_integer() ? r.get<int>() : -1;
  switch (code) {
    case 0: return "nearest";
    case 2: return "bilinear";
    case 3: return "bicubic";
    default: break;
  }
  const char* names[] = {"NEAREST", "LANCZOS", "BILINEAR", "BICUBIC", "BOX", "HAMMING"};
  const std::string name = code >= 0 && code < 6 ? names[code] : r.dump();
  refuse(file, str("resample = ", r.dump(), " (PIL ", name, "): Sluice resizes with nearest, bilinear or bicubic"),
         "pass --interpolation bicubic (the nearest of the three to Lanczos) to run it anyway");
}

// {"height": H, "width": W} or {"shortest_edge": S} or a bare S, as "HxW" / "S"; "" for none.
std::string size_text(const std::string& file, const json& s, const char* key, bool* shortest) {
  *shortest = false;
  if (s.is_number_integer()) {
    *shortest = std::string(key) == "size";  // an old processor's bare size: the shorter side
    return std::to_string(s.get<int>());
  }
  if (!s.is_object()) refuse(file, str(key, " is ", s.dump()), "give --resize and --center-crop yourself");
  if (s.contains("longest_edge") || s.contains("max_height"))
    refuse(file, str(key, " = ", s.dump(), ": Sluice follows a longest edge with a shortest one only (DETR's "
                     "{\"shortest_edge\": N, \"longest_edge\": M})"),
           "pass --resize-shortest N --max-size M, or --letterbox, yourself");
  if (s.contains("height") && s.contains("width"))
    return str(s.at("height").get<int>(), "x", s.at("width").get<int>());
  if (s.contains("shortest_edge")) {
    *shortest = true;
    return std::to_string(s.at("shortest_edge").get<int>());
  }
  refuse(file, str(key, " = ", s.dump(), " names no height and width nor shortest_edge"),
         "give --resize and --center-crop yourself");
}

std::string text_of(const json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}

int positive_int(const std::string& file, const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65535)
    refuse(file, str(key, " = ", v.dump(), ": expected a size in pixels"), "give the resize options yourself");
  return v.get<int>();
}

// DETR's family (DETR, Conditional and Deformable DETR, DETA, YOLOS): {"shortest_edge": N,
// "longest_edge": M}, or an older file's bare size N with max_size M (1333 where absent, the
// processors' default), then a pad of each batch to its largest image; YOLOS rounds the sides down
// to multiples of 16.  False for any other size.
bool detr_resize(const std::string& file, const json& j, Settings* s) {
  const std::string type = text_of(j, "image_processor_type") + text_of(j, "feature_extractor_type");
  const bool detr_family = type.find("Detr") != std::string::npos || type.find("Deta") != std::string::npos ||
                           type.find("Yolos") != std::string::npos;
  const json& size = j.at("size");
  if (size.is_object() && size.contains("shortest_edge") && size.contains("longest_edge")) {
    s->resize_shortest = positive_int(file, size, "shortest_edge");
    s->max_size = positive_int(file, size, "longest_edge");
  } else if (size.is_number_integer() && (detr_family || j.contains("max_size"))) {
    s->resize_shortest = positive_int(file, j, "size");
    s->max_size = j.contains("max_size") && !j.at("max_size").is_null() ? positive_int(file, j, "max_size") : 1333;
  } else {
    return false;
  }
  if (type.find("Yolos") != std::string::npos) s->size_multiple = 16;
  // The processor pads after normalizing, with zeros: the colour the normalization takes to 0.
  s->pad_mean = true;
  return true;
}

// Hugging Face's preprocessor_config.json.
Settings from_hf(const std::string& file, const json& j) {
  Settings s;
  s.interpolation = pil_filter(file, j);
  const bool resize = j.value("do_resize", true);
  if (resize && j.contains("size") && detr_resize(file, j, &s)) {
    if (j.value("do_rescale", true)) s.scale = j.value("rescale_factor", 1.0 / 255.0);
    if (j.value("do_normalize", true)) {
      s.mean = floats(file, j, "image_mean");
      s.stddev = floats(file, j, "image_std");
    }
    return s;
  }
  bool shortest = false, crop_shortest = false;
  const std::string size = resize && j.contains("size") ? size_text(file, j.at("size"), "size", &shortest) : "";
  const bool crop = j.value("do_center_crop", false) && j.contains("crop_size");
  const std::string crop_size = crop ? size_text(file, j.at("crop_size"), "crop_size", &crop_shortest) : "";
  if (j.contains("crop_pct") && !j.at("crop_pct").is_null() && shortest && !crop) {
    // ConvNeXt's processor: below 384 the shorter side goes to S / crop_pct, then a center crop
    // of S; from 384 on, an exact S x S (its own rule).
    const int S = std::stoi(size);
    const double pct = j.at("crop_pct").get<double>();
    if (S < 384) {
      s.resize = std::to_string(static_cast<int>(S / pct));
      s.center_crop = std::to_string(S);
    } else {
      s.resize = str(S, "x", S);
    }
  } else {
    s.resize = size;
    s.center_crop = crop_size;
  }
  if (shortest && s.center_crop.empty() && s.resize.find('x') == std::string::npos)
    refuse(file, str("size = ", j.at("size").dump(), " with no center crop: images keep their aspect and come out "
                     "in different sizes"),
           "pass --resize HxW (the model's input) or --center-crop H[xW] to fix the size");
  if (j.value("do_rescale", true)) s.scale = j.value("rescale_factor", 1.0 / 255.0);
  if (j.value("do_normalize", true)) {
    s.mean = floats(file, j, "image_mean");
    s.stddev = floats(file, j, "image_std");
  }
  return s;
}

// timm's pretrained_cfg, as its eval transform uses it (Resize to input_size / crop_pct, then a
// center crop of input_size).
Settings from_timm(const std::string& file, const json& cfg) {
  Settings s;
  const std::string interp = cfg.value("interpolation", std::string("bilinear"));
  if (interp != "nearest" && interp != "bilinear" && interp != "bicubic")
    refuse(file, str("interpolation = \"", interp, "\": Sluice resizes with nearest, bilinear or bicubic"),
           "pass --interpolation bicubic to run it anyway");
  s.interpolation = interp;
  const json& in = cfg.at("input_size");
  if (!in.is_array() || in.size() != 3) refuse(file, str("input_size = ", in.dump(), ": expected [3, H, W]"), "");
  const int H = in.at(1).get<int>(), W = in.at(2).get<int>();
  const double pct = cfg.contains("crop_pct") && !cfg.at("crop_pct").is_null() ? cfg.at("crop_pct").get<double>() : 0.875;
  const std::string mode = cfg.value("crop_mode", std::string("center"));
  const int sh = static_cast<int>(std::floor(H / pct)), sw = static_cast<int>(std::floor(W / pct));
  if (mode == "center") {
    s.resize = H == W ? std::to_string(sh) : str(sh, "x", sw);
  } else if (mode == "squash") {
    s.resize = str(sh, "x", sw);
  } else {
    refuse(file, str("crop_mode = \"", mode, "\" is not offered (center and squash are)"),
           "give --resize and --center-crop (or --letterbox) yourself");
  }
  s.center_crop = H == W ? std::to_string(H) : str(H, "x", W);
  s.scale = 1.0f / 255.0f;
  s.mean = floats(file, cfg, "mean");
  s.stddev = floats(file, cfg, "std");
  return s;
}

json read_json(const std::string& file) {
  std::ifstream f(file);
  if (!f) throw UsageError(str("--preprocess-from: cannot read ", file), kPathsHint);
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw UsageError(str("--preprocess-from ", file, ": not JSON (", e.what(), ")"));
  }
}

}  // namespace

PreprocessFrom apply_preprocess_from(JobConfig& job, const std::vector<std::string>& given) {
  PreprocessFrom out;
  std::error_code ec;
  std::string file = job.preprocess_from;
  if (fs::is_directory(file, ec)) {
    const fs::path d(file);
    if (fs::exists(d / "preprocessor_config.json", ec)) file = (d / "preprocessor_config.json").string();
    else if (fs::exists(d / "config.json", ec)) file = (d / "config.json").string();
    else
      throw UsageError(str("--preprocess-from ", job.preprocess_from,
                           ": the folder holds no preprocessor_config.json (Hugging Face) nor config.json (timm)"),
                       "name the model folder that transformers' save_pretrained or timm's push_to_hub wrote");
  } else if (!fs::exists(file, ec)) {
    throw UsageError(str("--preprocess-from ", file, ": no such file or folder"), kPathsHint);
  }
  out.file = file;
  const json j = read_json(file);
  if (!j.is_object()) refuse(file, "not a JSON object", "");
  Settings s;
  if (j.contains("pretrained_cfg") && j.at("pretrained_cfg").is_object()) s = from_timm(file, j.at("pretrained_cfg"));
  else if (j.contains("input_size") && j.contains("mean")) s = from_timm(file, j);
  else if (j.contains("image_processor_type") || j.contains("feature_extractor_type") || j.contains("size") ||
           j.contains("image_mean"))
    s = from_hf(file, j);
  else
    refuse(file, "neither a Hugging Face preprocessor_config.json nor a timm config with pretrained_cfg",
           "name the model folder, or give --resize, --center-crop, --interpolation, --scale, --mean and --std");

  const auto set = [&](const char* name, const std::string& text, auto assign) {
    if (std::find(given.begin(), given.end(), name) != given.end()) {
      out.kept.emplace_back(name, text);
      return;
    }
    assign();
    out.chosen.emplace_back(name, text);
  };
  const auto count = [](int v) { return v > 0 ? std::to_string(v) : std::string(); };
  set("resize", s.resize, [&] { job.resize = s.resize; });
  set("center-crop", s.center_crop, [&] { job.center_crop = s.center_crop; });
  set("resize-shortest", count(s.resize_shortest), [&] { job.resize_shortest = s.resize_shortest; });
  set("max-size", count(s.max_size), [&] { job.max_size = s.max_size; });
  set("size-multiple", count(s.size_multiple), [&] { job.size_multiple = s.size_multiple; });
  set("pad-mean", s.pad_mean ? "true" : "", [&] { job.pad_mean = s.pad_mean; });
  set("interpolation", s.interpolation, [&] { job.interpolation = s.interpolation; });
  set("scale", number_text(s.scale), [&] { job.scale = s.scale; });
  set("mean", list_text(s.mean), [&] { job.mean = s.mean; });
  set("std", list_text(s.stddev), [&] { job.stddev = s.stddev; });
  return out;
}

std::string preprocess_from_summary(const PreprocessFrom& p) {
  std::string line;
  for (const auto& [name, value] : p.chosen)
    if (!value.empty()) line += str(line.empty() ? "" : " ", "--", name, value == "true" ? "" : " " + value);  // a flag alone
  if (!p.kept.empty()) {
    line += " (kept as given:";
    for (const auto& [name, value] : p.kept) line += str(" --", name);
    line += ")";
  }
  return line;
}

}  // namespace sluice
