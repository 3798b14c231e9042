#pragma once
// Drawing on interleaved RGB pictures, for the detection previews (`sluice export --what
// detections --draw`): a box's outline, and its label written in a small built-in bitmap font.
//
// The font is Sluice's own: 5 x 7 pixel capitals, digits and common punctuation, one column apart,
// drawn `scale` pixels per font pixel.  Lower case is written in capitals; any other character
// (outside printable ASCII, or one it has no glyph for) as '?', once per UTF-8 character.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// Draws the outline of box (x1, y1, x2, y2, in the image's pixels) `thickness` pixels wide, inside
// the box, clipped to the image, into interleaved RGB.
void draw_box(std::vector<uint8_t>& rgb, int height, int width, const float* xyxy, const uint8_t colour[3], int thickness);

// The font's pixels per font pixel for a picture of `height` x `width`: 1 up to 399 pixels on the
// shorter side, one more per 200, at most 4.
int label_scale(int height, int width);

// The size in pixels of `text` written by draw_text: a margin of `scale` around the glyphs.
struct TextSize {
  int width = 0, height = 0;
};
TextSize text_size(const std::string& text, int scale);

// Writes `text` on a filled rectangle of `background` (text_size), its top-left corner at (x, y),
// clipped to the image; the letters black or white, whichever stands out from the background.
void draw_text(std::vector<uint8_t>& rgb, int height, int width, int x, int y, const std::string& text,
               const uint8_t background[3], int scale);

// A detection's label on its box (drawn by draw_box with `thickness`): above the box's top edge
// when there is room, else just inside it, below the outline; moved left where it would leave the
// image.  The box's top-left corner pixel is never written.
void draw_box_label(std::vector<uint8_t>& rgb, int height, int width, const float* xyxy, const std::string& text,
                    const uint8_t colour[3], int thickness);

// The glyph of `c` (after the upper-casing and '?' above): 7 rows, bit 4 the leftmost column.
const uint8_t* font_glyph(char c);

}  // namespace sluice
