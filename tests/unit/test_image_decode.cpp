// CPU decoding to RGB: every JPEG and PNG kind comes out as 8-bit RGB the way PIL's
// convert("RGB") makes it, and broken files fail with a reason instead of an image.
#include <gtest/gtest.h>

#include "image/image.h"
#include "test_image_util.h"

using namespace sluice;
using namespace sluice_test;

namespace {

Bytes decode_ok(const Bytes& file, int h, int w) {
  Bytes rgb;
  int dh = 0, dw = 0;
  std::string error;
  EXPECT_TRUE(decode_image_rgb(file.data(), file.size(), rgb, &dh, &dw, &error)) << error;
  EXPECT_EQ(dh, h);
  EXPECT_EQ(dw, w);
  EXPECT_EQ(rgb.size(), static_cast<std::size_t>(h) * w * 3);
  return rgb;
}

std::string decode_error(const Bytes& file) {
  Bytes rgb;
  int h = 0, w = 0;
  std::string error;
  EXPECT_FALSE(decode_image_rgb(file.data(), file.size(), rgb, &h, &w, &error));
  return error;
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(int{a[i]} - int{b[i]});
  return s / static_cast<double>(a.size());
}

}  // namespace

TEST(ImageDecode, JpegBaselineAndProgressiveMatchTheSource) {
  const int h = 48, w = 64;
  const Bytes px = test_picture(h, w);
  const Bytes base = decode_ok(encode_jpeg(px, h, w, TJPF_RGB, 95), h, w);
  const Bytes prog = decode_ok(encode_jpeg(px, h, w, TJPF_RGB, 95, true), h, w);
  EXPECT_LT(mean_abs_diff(base, px), 2.5);
  // Progressive coding is lossless re-ordering of the same coefficients: the same pixels.
  EXPECT_EQ(prog, base);
}

TEST(ImageDecode, GreyJpegIsReplicated) {
  const int h = 24, w = 40;
  const Bytes px = test_picture(h, w, 1);
  const Bytes rgb = decode_ok(encode_jpeg(px, h, w, TJPF_GRAY, 95), h, w);
  Bytes grey(px.size());
  for (std::size_t i = 0; i < px.size(); ++i) {
    EXPECT_EQ(rgb[3 * i], rgb[3 * i + 1]);
    EXPECT_EQ(rgb[3 * i], rgb[3 * i + 2]);
    grey[i] = rgb[3 * i];
  }
  EXPECT_LT(mean_abs_diff(grey, px), 2.0);
}

TEST(ImageDecode, CmykJpegThroughPilsFormula) {
  // A flat inverted-CMYK colour (as Adobe stores it): stored c, m, y, k = 255 - ink.
  const int h = 16, w = 16;
  const uint8_t stored[4] = {200, 120, 40, 180};
  Bytes px(static_cast<std::size_t>(h) * w * 4);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = stored[i % 4];
  const Bytes rgb = decode_ok(encode_jpeg(px, h, w, TJPF_CMYK, 100, false, TJSAMP_444), h, w);
  // PIL: R = (255 - K) - C * (255 - K) / 255 with C = 255 - c, K = 255 - k.
  for (int c = 0; c < 3; ++c) {
    const double expect = stored[3] - (255.0 - stored[c]) * stored[3] / 255.0;
    EXPECT_NEAR(rgb[static_cast<std::size_t>(c)], expect, 2.0) << "channel " << c;
    EXPECT_NEAR(rgb[static_cast<std::size_t>(3 * (h * w / 2) + c)], expect, 2.0);
  }
}

TEST(ImageDecode, PngRgbIsExact) {
  const int h = 13, w = 17;
  const Bytes px = test_picture(h, w);
  EXPECT_EQ(decode_ok(png_rgb(px, h, w), h, w), px);
}

TEST(ImageDecode, PngGreyAlphaPaletteRgbaAnd16Bit) {
  const int h = 5, w = 7, n = h * w;
  Bytes grey(n), ga(2 * n), rgba(4 * n), idx(n);
  std::vector<uint16_t> rgb16(3 * n);
  const std::vector<uint8_t> palette = {10, 20, 30, 200, 100, 0, 7, 255, 9};
  for (int i = 0; i < n; ++i) {
    grey[i] = static_cast<uint8_t>(i * 7);
    ga[2 * i] = static_cast<uint8_t>(i * 5);
    ga[2 * i + 1] = static_cast<uint8_t>(i);  // alpha: dropped
    for (int c = 0; c < 4; ++c) rgba[4 * i + c] = static_cast<uint8_t>(i * 3 + c * 50);
    idx[i] = static_cast<uint8_t>(i % 3);
    for (int c = 0; c < 3; ++c) rgb16[3 * i + c] = static_cast<uint16_t>(i * 1000 + c * 7 + 0x80);
  }
  const Bytes g = decode_ok(encode_png(grey.data(), grey.size(), h, w, 0, 8), h, w);
  const Bytes a = decode_ok(encode_png(ga.data(), ga.size(), h, w, 4, 8), h, w);
  const Bytes r = decode_ok(encode_png(rgba.data(), rgba.size(), h, w, 6, 8), h, w);
  const Bytes p = decode_ok(encode_png(idx.data(), idx.size(), h, w, 3, 8, palette), h, w);
  const Bytes s = decode_ok(encode_png(rgb16.data(), rgb16.size() * 2, h, w, 2, 16), h, w);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(g[3 * i + c], grey[i]);
      EXPECT_EQ(a[3 * i + c], ga[2 * i]);
      EXPECT_EQ(r[3 * i + c], rgba[4 * i + c]);
      EXPECT_EQ(p[3 * i + c], palette[3 * idx[i] + c]);
      EXPECT_EQ(s[3 * i + c], rgb16[3 * i + c] >> 8);  // the high byte
    }
}

TEST(ImageDecode, BrokenFilesFailWithAReason) {
  EXPECT_EQ(decode_error(Bytes{}), "empty file");
  const Bytes j = encode_jpeg(test_picture(32, 32), 32, 32, TJPF_RGB);
  EXPECT_EQ(decode_error(Bytes(j.begin(), j.begin() + static_cast<std::ptrdiff_t>(j.size() / 2))),
            "truncated JPEG: no end-of-image marker");
  // Huffman tables replaced by garbage of the same length: the markers are intact, libjpeg refuses.
  Bytes bad_tables = j;
  for (std::size_t i = 2; i + 4 < bad_tables.size(); ++i)
    if (bad_tables[i] == 0xFF && bad_tables[i + 1] == 0xC4) {
      const std::size_t len = (std::size_t{bad_tables[i + 2]} << 8) | bad_tables[i + 3];
      for (std::size_t k = 4; k < len + 2; ++k) bad_tables[i + k] = 0x7F;
      break;
    }
  EXPECT_EQ(decode_error(bad_tables).rfind("corrupt JPEG: ", 0), 0u) << decode_error(bad_tables);
  // The thread's decompressor carries nothing of the bad file into the next, good one.
  decode_ok(j, 32, 32);
  // A PNG whose image data fails its CRC.
  const int h = 8, w = 8;
  Bytes png = png_rgb(test_picture(h, w), h, w);
  const auto idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::end("IDAT") - 1);
  ASSERT_NE(idat, png.end());
  idat[6] ^= 0x55;
  EXPECT_EQ(decode_error(png).rfind("corrupt PNG: ", 0), 0u) << decode_error(png);
}
