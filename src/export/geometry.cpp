#include "export/geometry.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace sluice {

namespace {

using nlohmann::json;
using Resize = PreprocessSpec::Resize;

const char* mode_name(Resize m) {
  switch (m) {
    case Resize::Exact: return "exact";
    case Resize::ShorterSide: return "shorter_side";
    case Resize::Letterbox: return "letterbox";
    case Resize::None: return "none";
    case Resize::ShortestEdge: return "shortest_edge";
  }
  return "exact";
}

}  // namespace

std::string geometry_json(const PreprocessSpec& s) {
  json j{{"mode", mode_name(s.mode)}, {"resize_short", s.resize_short}, {"resize_h", s.resize_h},
         {"resize_w", s.resize_w},    {"crop_h", s.crop_h},             {"crop_w", s.crop_w},
         {"out_h", s.out_h},          {"out_w", s.out_w}};
  if (s.mode == Resize::ShortestEdge) {
    j["max_size"] = s.max_size;
    j["size_multiple"] = s.size_multiple;
  }
  return j.dump();
}

PreprocessSpec geometry_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  PreprocessSpec s;
  const std::string mode = j.is_object() ? j.value("mode", std::string()) : std::string();
  if (mode == "exact") s.mode = Resize::Exact;
  else if (mode == "shorter_side") s.mode = Resize::ShorterSide;
  else if (mode == "letterbox") s.mode = Resize::Letterbox;
  else if (mode == "none") s.mode = Resize::None;
  else if (mode == "shortest_edge") s.mode = Resize::ShortestEdge;
  else throw InputError(str("export: the recorded image geometry '", text, "' is not one this sluice reads"));
  s.resize_short = j.value("resize_short", 0);
  s.resize_h = j.value("resize_h", 0);
  s.resize_w = j.value("resize_w", 0);
  s.crop_h = j.value("crop_h", 0);
  s.crop_w = j.value("crop_w", 0);
  s.max_size = j.value("max_size", 0);
  s.size_multiple = j.value("size_multiple", 0);
  s.out_h = j.value("out_h", 0);
  s.out_w = j.value("out_w", 0);
  if (s.out_h < 1 || s.out_w < 1)
    throw InputError(str("export: the recorded image geometry '", text, "' has no model input size"));
  return s;
}

Mask undo_geometry(const Mask& m, int in_h, int in_w, const PreprocessSpec& spec, uint32_t outside) {
  const ResizePlan p = plan_resize(in_h, in_w, spec);
  if (p.offset_y == 0 && p.offset_x == 0 && p.resized_h == p.out_h && p.resized_w == p.out_w)
    return resize_nearest(m, in_h, in_w);  // a plain resize: one step back
  const Mask at_input = (m.height == p.out_h && m.width == p.out_w) ? m : resize_nearest(m, p.out_h, p.out_w);
  // Resized pixel (y, x) is model-input pixel (y - offset_y, x - offset_x) (image/image.h).
  Mask resized;
  resized.height = p.resized_h;
  resized.width = p.resized_w;
  resized.classes.assign(static_cast<std::size_t>(p.resized_h) * static_cast<std::size_t>(p.resized_w), outside);
  for (int y = 0; y < p.resized_h; ++y) {
    const int oy = y - p.offset_y;
    if (oy < 0 || oy >= p.out_h) continue;
    for (int x = 0; x < p.resized_w; ++x) {
      const int ox = x - p.offset_x;
      if (ox < 0 || ox >= p.out_w) continue;
      resized.classes[static_cast<std::size_t>(y) * static_cast<std::size_t>(p.resized_w) + static_cast<std::size_t>(x)] =
          at_input.classes[static_cast<std::size_t>(oy) * static_cast<std::size_t>(p.out_w) + static_cast<std::size_t>(ox)];
    }
  }
  return resize_nearest(resized, in_h, in_w);
}

}  // namespace sluice
