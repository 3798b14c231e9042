// Boxes and their labels on RGB pictures (export/draw.h).
#include "export/draw.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sluice {

namespace {

// Sluice's own 5 x 7 font: each glyph's seven rows, top first, '#' a pixel of the letter.
struct GlyphArt {
  char c;
  const char* rows;
};
constexpr GlyphArt kGlyphArt[] = {
    {'A', ".###. #...# #...# ##### #...# #...# #...#"},
    {'B', "####. #...# #...# ####. #...# #...# ####."},
    {'C', ".###. #...# #.... #.... #.... #...# .###."},
    {'D', "####. #...# #...# #...# #...# #...# ####."},
    {'E', "##### #.... #.... ####. #.... #.... #####"},
    {'F', "##### #.... #.... ####. #.... #.... #...."},
    {'G', ".###. #...# #.... #.### #...# #...# .####"},
    {'H', "#...# #...# #...# ##### #...# #...# #...#"},
    {'I', ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'J', "..### ...#. ...#. ...#. ...#. #..#. .##.."},
    {'K', "#...# #..#. #.#.. ##... #.#.. #..#. #...#"},
    {'L', "#.... #.... #.... #.... #.... #.... #####"},
    {'M', "#...# ##.## #.#.# #.#.# #...# #...# #...#"},
    {'N', "#...# #...# ##..# #.#.# #..## #...# #...#"},
    {'O', ".###. #...# #...# #...# #...# #...# .###."},
    {'P', "####. #...# #...# ####. #.... #.... #...."},
    {'Q', ".###. #...# #...# #...# #.#.# #..#. .##.#"},
    {'R', "####. #...# #...# ####. #.#.. #..#. #...#"},
    {'S', ".#### #.... #.... .###. ....# ....# ####."},
    {'T', "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
    {'U', "#...# #...# #...# #...# #...# #...# .###."},
    {'V', "#...# #...# #...# #...# #...# .#.#. ..#.."},
    {'W', "#...# #...# #...# #.#.# #.#.# #.#.# .#.#."},
    {'X', "#...# #...# .#.#. ..#.. .#.#. #...# #...#"},
    {'Y', "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#.."},
    {'Z', "##### ....# ...#. ..#.. .#... #.... #####"},
    {'0', ".###. #...# #..## #.#.# ##..# #...# .###."},
    {'1', "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'2', ".###. #...# ....# ...#. ..#.. .#... #####"},
    {'3', "####. ....# ....# .###. ....# ....# ####."},
    {'4', "...#. ..##. .#.#. #..#. ##### ...#. ...#."},
    {'5', "##### #.... ####. ....# ....# #...# .###."},
    {'6', "..##. .#... #.... ####. #...# #...# .###."},
    {'7', "##### ....# ...#. ..#.. .#... .#... .#..."},
    {'8', ".###. #...# #...# .###. #...# #...# .###."},
    {'9', ".###. #...# #...# .#### ....# ...#. .##.."},
    {'.', "..... ..... ..... ..... ..... .##.. .##.."},
    {',', "..... ..... ..... ..... .##.. ..#.. .#..."},
    {':', "..... .##.. .##.. ..... .##.. .##.. ....."},
    {';', "..... .##.. .##.. ..... .##.. ..#.. .#..."},
    {'-', "..... ..... ..... .###. ..... ..... ....."},
    {'_', "..... ..... ..... ..... ..... ..... #####"},
    {'/', "..... ....# ...#. ..#.. .#... #.... ....."},
    {'\\', "..... #.... .#... ..#.. ...#. ....# ....."},
    {'(', "...#. ..#.. .#... .#... .#... ..#.. ...#."},
    {')', ".#... ..#.. ...#. ...#. ...#. ..#.. .#..."},
    {'[', ".###. .#... .#... .#... .#... .#... .###."},
    {']', ".###. ...#. ...#. ...#. ...#. ...#. .###."},
    {'\'', "..#.. ..#.. .#... ..... ..... ..... ....."},
    {'"', ".#.#. .#.#. .#.#. ..... ..... ..... ....."},
    {'%', "##... ##..# ...#. ..#.. .#... #..## ...##"},
    {'+', "..... ..#.. ..#.. ##### ..#.. ..#.. ....."},
    {'=', "..... ..... ##### ..... ##### ..... ....."},
    {'#', ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#."},
    {'&', ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#"},
    {'!', "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#.."},
    {'?', ".###. #...# ....# ...#. ..#.. ..... ..#.."},
    {'*', "..... #.#.# .###. ##### .###. #.#.# ....."},
    {'<', "...#. ..#.. .#... #.... .#... ..#.. ...#."},
    {'>', ".#... ..#.. ...#. ....# ...#. ..#.. .#..."},
    {'@', ".###. #...# #.### #.#.# #.### #.... .####"},
    {'|', "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
};

using Glyph = std::array<uint8_t, 7>;

const std::array<Glyph, 128>& glyphs() {
  static const std::array<Glyph, 128> table = [] {
    std::array<Glyph, 128> t{};
    for (const GlyphArt& g : kGlyphArt) {
      Glyph& out = t[static_cast<unsigned char>(g.c)];
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (g.rows[r * 6 + col] == '#') out[static_cast<std::size_t>(r)] |= static_cast<uint8_t>(0x10 >> col);
    }
    return t;
  }();
  return table;
}

bool has_glyph(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 128) return false;
  for (const GlyphArt& g : kGlyphArt)
    if (g.c == c) return true;
  return false;
}

// The characters drawn for `text`: capitals for lower case, '?' for one without a glyph (once per
// UTF-8 character: its continuation bytes are skipped).
std::string drawn(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u & 0xc0) == 0x80) continue;  // a continuation byte: its character is already there
    const char up = c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    out += up == ' ' || has_glyph(up) ? up : '?';
  }
  return out;
}

void fill(std::vector<uint8_t>& rgb, int height, int width, int x0, int y0, int x1, int y1, const uint8_t colour[3]) {
  for (int y = std::max(y0, 0); y < std::min(y1, height); ++y)
    for (int x = std::max(x0, 0); x < std::min(x1, width); ++x) {
      uint8_t* p = rgb.data() + (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 3;
      p[0] = colour[0];
      p[1] = colour[1];
      p[2] = colour[2];
    }
}

}  // namespace

const uint8_t* font_glyph(char c) { return glyphs()[static_cast<unsigned char>(drawn(std::string(1, c)).at(0))].data(); }

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

int label_scale(int height, int width) { return std::clamp(std::min(height, width) / 200, 1, 4); }

TextSize text_size(const std::string& text, int scale) {
  const int n = static_cast<int>(drawn(text).size());
  return {n > 0 ? (6 * n - 1 + 2) * scale : 2 * scale, (7 + 2) * scale};
}

void draw_text(std::vector<uint8_t>& rgb, int height, int width, int x, int y, const std::string& text,
               const uint8_t background[3], int scale) {
  const TextSize size = text_size(text, scale);
  fill(rgb, height, width, x, y, x + size.width, y + size.height, background);
  // Black on a light background, white on a dark one (ITU-R BT.601 luma).
  const double luma = 0.299 * background[0] + 0.587 * background[1] + 0.114 * background[2];
  const uint8_t ink[3] = {luma < 128 ? uint8_t{255} : uint8_t{0}, luma < 128 ? uint8_t{255} : uint8_t{0},
                          luma < 128 ? uint8_t{255} : uint8_t{0}};
  const std::string chars = drawn(text);
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const Glyph& g = glyphs()[static_cast<unsigned char>(chars[i])];
    const int gx = x + scale + static_cast<int>(i) * 6 * scale, gy = y + scale;
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (g[static_cast<std::size_t>(r)] & (0x10 >> col))
          fill(rgb, height, width, gx + col * scale, gy + r * scale, gx + (col + 1) * scale, gy + (r + 1) * scale, ink);
  }
}

void draw_box_label(std::vector<uint8_t>& rgb, int height, int width, const float* b, const std::string& text,
                    const uint8_t colour[3], int thickness) {
  const int x1 = std::clamp(static_cast<int>(std::floor(b[0])), 0, width - 1);
  const int y1 = std::clamp(static_cast<int>(std::floor(b[1])), 0, height - 1);
  const int scale = label_scale(height, width);
  const TextSize size = text_size(text, scale);
  const int y = y1 - size.height >= 0 ? y1 - size.height : y1 + thickness;
  const int x = x1 + size.width <= width ? x1 : std::max(0, width - size.width);
  draw_text(rgb, height, width, x, y, text, colour, scale);
}

}  // namespace sluice
