#pragma once
// GridSample's attributes and shapes as the spec of engine/grid_sample.h (host code, both engines).
#include <string>

#include "core/error.h"
#include "engine/grid_sample.h"
#include "model/graph.h"

namespace sluice {

// GridSample's attributes as the spec of engine/grid_sample.h; the error names what is refused.
inline bool grid_sample_spec(const Node& node, const Shape& x, const Shape& grid, GridSampleSpec& s, std::string& why) {
  const std::string mode = node.get_string("mode", "bilinear"), pad = node.get_string("padding_mode", "zeros");
  if (x.size() != 4 || grid.size() != 4 || grid[3] != 2 || grid[0] != x[0]) {
    why = str("input ", shape_str(x), " and grid ", shape_str(grid), " are not a 2-D GridSample's [N, C, H, W] and [N, Ho, Wo, 2]");
    return false;
  }
  if (mode != "bilinear" && mode != "linear" && mode != "nearest") {
    why = str("mode '", mode, "' is not supported (bilinear/linear and nearest are)");
    return false;
  }
  if (pad != "zeros" && pad != "border" && pad != "reflection") {
    why = str("padding_mode '", pad, "' is not zeros, border or reflection");
    return false;
  }
  s.n = x[0], s.c = x[1], s.h = x[2], s.w = x[3], s.ho = grid[1], s.wo = grid[2];
  s.nearest = mode == "nearest";
  s.padding = pad == "zeros" ? GridPadding::Zeros : pad == "border" ? GridPadding::Border : GridPadding::Reflection;
  s.align_corners = node.get_int("align_corners", 0) != 0;
  return true;
}

}  // namespace sluice
