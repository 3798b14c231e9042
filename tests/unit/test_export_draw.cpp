// The detection previews' drawing (export/draw.h): the built-in font's glyphs land pixel for pixel
// where draw_text says, in black or white against the background, scaled; lower case is drawn in
// capitals and a character without a glyph (a UTF-8 one counted once) as '?'; a box's label sits
// above the box, or inside below its outline when there is no room, moved left to stay in the
// picture, and never covers the box's top-left corner.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "export/draw.h"

using namespace sluice;

namespace {

struct Picture {
  int h, w;
  std::vector<uint8_t> rgb;
  Picture(int height, int width, uint8_t grey = 50) : h(height), w(width), rgb(static_cast<std::size_t>(height * width * 3), grey) {}
  const uint8_t* at(int x, int y) const { return rgb.data() + (static_cast<std::size_t>(y) * w + x) * 3; }
  bool is(int x, int y, uint8_t r, uint8_t g, uint8_t b) const {
    const uint8_t* p = at(x, y);
    return p[0] == r && p[1] == g && p[2] == b;
  }
};

// The glyph of `c` as seven rows of '#' and '.'.
std::vector<std::string> art(char c) {
  const uint8_t* g = font_glyph(c);
  std::vector<std::string> rows;
  for (int r = 0; r < 7; ++r) {
    std::string row;
    for (int col = 0; col < 5; ++col) row += (g[r] & (0x10 >> col)) ? '#' : '.';
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST(ExportDraw, TextIsTheFontsGlyphsPixelForPixelOnItsBackground) {
  const uint8_t dark[3] = {0, 0, 128}, light[3] = {224, 224, 192};
  for (const int scale : {1, 3}) {
    Picture p(40, 80);
    draw_text(p.rgb, p.h, p.w, 4, 5, "A7", dark, scale);
    const TextSize size = text_size("A7", scale);
    EXPECT_EQ(size.width, (2 * 6 - 1 + 2) * scale);
    EXPECT_EQ(size.height, 9 * scale);
    for (int i = 0; i < 2; ++i) {
      const std::vector<std::string> g = art("A7"[i]);
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          for (int dy = 0; dy < scale; ++dy)
            for (int dx = 0; dx < scale; ++dx) {
              const int x = 4 + scale + (i * 6 + col) * scale + dx, y = 5 + scale + r * scale + dy;
              if (g[static_cast<std::size_t>(r)][static_cast<std::size_t>(col)] == '#')
                EXPECT_TRUE(p.is(x, y, 255, 255, 255)) << "white ink on navy at " << x << "," << y;
              else
                EXPECT_TRUE(p.is(x, y, 0, 0, 128)) << x << "," << y;
            }
    }
    EXPECT_TRUE(p.is(4, 5, 0, 0, 128));                                        // the margin
    EXPECT_TRUE(p.is(4 + size.width - 1, 5 + size.height - 1, 0, 0, 128));
    EXPECT_TRUE(p.is(4 + size.width, 5, 50, 50, 50));                           // nothing outside
    EXPECT_TRUE(p.is(3, 5, 50, 50, 50));
  }
  Picture q(20, 20);
  draw_text(q.rgb, q.h, q.w, 0, 0, "I", light, 1);
  EXPECT_TRUE(q.is(3, 3, 0, 0, 0));  // black ink on a light background: the I's stem
  EXPECT_TRUE(q.is(2, 3, 224, 224, 192));
}

TEST(ExportDraw, LowerCaseIsDrawnInCapitalsAndUnknownCharactersAsAQuestionMark) {
  EXPECT_EQ(art('q'), art('Q'));
  EXPECT_EQ(art('\x01'), art('?'));
  EXPECT_NE(art('C'), art('O'));
  EXPECT_NE(art('0'), art('O'));
  EXPECT_EQ(text_size("caf\xc3\xa9", 1).width, text_size("cafe", 1).width);  // é is one character
  const uint8_t bg[3] = {0, 0, 0};
  Picture a(12, 40), b(12, 40);
  draw_text(a.rgb, a.h, a.w, 0, 0, "caf\xc3\xa9", bg, 1);
  draw_text(b.rgb, b.h, b.w, 0, 0, "CAF?", bg, 1);
  EXPECT_EQ(a.rgb, b.rgb);
}

TEST(ExportDraw, ALabelSitsAboveItsBoxOrInsideBelowTheOutlineAndStaysInThePicture) {
  const uint8_t red[3] = {128, 0, 0};
  const int thickness = 2;
  const TextSize size = text_size("cat 0.91", 1);
  {  // room above: the label's bottom row is the row above the box
    Picture p(100, 100);
    const float box[4] = {20, 40, 60, 80};
    draw_box(p.rgb, p.h, p.w, box, red, thickness);
    draw_box_label(p.rgb, p.h, p.w, box, "cat 0.91", red, thickness);
    EXPECT_TRUE(p.is(20, 39, 128, 0, 0));
    EXPECT_TRUE(p.is(20, 40 - size.height, 128, 0, 0));
    EXPECT_TRUE(p.is(20, 40 - size.height - 1, 50, 50, 50));
    int ink = 0;
    for (int y = 40 - size.height; y < 40; ++y)
      for (int x = 20; x < 20 + size.width; ++x) ink += p.is(x, y, 255, 255, 255);
    EXPECT_GT(ink, 20);
  }
  {  // no room above, and the right edge near: inside, below the outline, moved left
    Picture p(100, 100);
    const float box[4] = {90, 3, 99, 50};
    draw_box(p.rgb, p.h, p.w, box, red, thickness);
    draw_box_label(p.rgb, p.h, p.w, box, "cat 0.91", red, thickness);
    EXPECT_TRUE(p.is(90, 3, 128, 0, 0));   // the box's corner: its own colour
    EXPECT_TRUE(p.is(90, 4, 128, 0, 0));   // the outline's second row
    EXPECT_TRUE(p.is(100 - size.width, 3 + thickness, 128, 0, 0));  // the label's corner
    EXPECT_TRUE(p.is(99, 3 + thickness + size.height - 1, 128, 0, 0));
    EXPECT_TRUE(p.is(100 - size.width - 1, 3 + thickness, 50, 50, 50));
  }
  EXPECT_EQ(label_scale(64, 64), 1);
  EXPECT_EQ(label_scale(480, 640), 2);
  EXPECT_EQ(label_scale(4000, 3000), 4);
}
