// Header parsing: what each kind of JPEG and PNG is reported as, and every way a file can be
// unusable (empty, cut short, not an image, absurd sizes) caught before any decoder runs.
#include <gtest/gtest.h>

#include "image/image.h"
#include "test_image_util.h"

using namespace sluice;
using namespace sluice_test;

namespace {

ImageHeader parse_ok(const Bytes& b) {
  ImageHeader h;
  std::string error;
  EXPECT_TRUE(parse_image_header(b.data(), b.size(), &h, &error)) << error;
  return h;
}

std::string parse_error(const Bytes& b) {
  ImageHeader h;
  std::string error;
  EXPECT_FALSE(parse_image_header(b.data(), b.size(), &h, &error));
  return error;
}

Bytes rgb_jpeg(bool progressive = false) { return encode_jpeg(test_picture(37, 53), 37, 53, TJPF_RGB, 90, progressive); }

}  // namespace

TEST(ImageHeader, BaselineJpegIsGpuDecodable) {
  const ImageHeader h = parse_ok(rgb_jpeg());
  EXPECT_EQ(h.format, ImageFormat::Jpeg);
  EXPECT_EQ(h.width, 53);
  EXPECT_EQ(h.height, 37);
  EXPECT_EQ(h.channels, 3);
  EXPECT_FALSE(h.progressive);
  EXPECT_FALSE(h.cmyk);
  EXPECT_TRUE(h.gpu_decodable);
}

TEST(ImageHeader, ProgressiveJpegIsNotGpuDecodable) {
  const ImageHeader h = parse_ok(rgb_jpeg(true));
  EXPECT_EQ(h.width, 53);
  EXPECT_EQ(h.height, 37);
  EXPECT_TRUE(h.progressive);
  EXPECT_FALSE(h.gpu_decodable);
}

TEST(ImageHeader, GreyJpegHasOneChannel) {
  const ImageHeader h = parse_ok(encode_jpeg(test_picture(20, 30, 1), 20, 30, TJPF_GRAY));
  EXPECT_EQ(h.channels, 1);
  EXPECT_TRUE(h.gpu_decodable);
}

TEST(ImageHeader, AdobeCmykJpegIsFlagged) {
  const Bytes j = encode_jpeg(test_picture(16, 24, 4), 16, 24, TJPF_CMYK, 90, false, TJSAMP_444);
  // libjpeg writes an Adobe APP14 marker for CMYK/YCCK.
  EXPECT_NE(std::search(j.begin(), j.end(), std::begin("Adobe"), std::end("Adobe") - 1), j.end());
  const ImageHeader h = parse_ok(j);
  EXPECT_EQ(h.channels, 4);
  EXPECT_TRUE(h.cmyk);
  EXPECT_FALSE(h.gpu_decodable);
}

TEST(ImageHeader, PngKinds) {
  const int h = 9, w = 11;
  const Bytes grey(static_cast<std::size_t>(h * w), 7);
  const Bytes ga(static_cast<std::size_t>(h * w * 2), 7);
  const Bytes rgba(static_cast<std::size_t>(h * w * 4), 7);
  const std::vector<uint16_t> rgb16(static_cast<std::size_t>(h * w * 3), 700);
  const Bytes idx(static_cast<std::size_t>(h * w), 1);
  struct Case { Bytes png; int channels; };
  const Case cases[] = {
      {encode_png(grey.data(), grey.size(), h, w, 0, 8), 1},
      {encode_png(ga.data(), ga.size(), h, w, 4, 8), 2},
      {png_rgb(test_picture(h, w), h, w), 3},
      {encode_png(idx.data(), idx.size(), h, w, 3, 8, {0, 0, 0, 255, 0, 0}), 3},
      {encode_png(rgba.data(), rgba.size(), h, w, 6, 8), 4},
      {encode_png(rgb16.data(), rgb16.size() * 2, h, w, 2, 16), 3},
  };
  for (const Case& c : cases) {
    const ImageHeader hd = parse_ok(c.png);
    EXPECT_EQ(hd.format, ImageFormat::Png);
    EXPECT_EQ(hd.width, w);
    EXPECT_EQ(hd.height, h);
    EXPECT_EQ(hd.channels, c.channels);
    EXPECT_FALSE(hd.gpu_decodable);
  }
}

TEST(ImageHeader, TruncatedJpegIsCaught) {
  const Bytes j = rgb_jpeg();
  for (std::size_t keep : {j.size() / 2, j.size() - 2, j.size() - 1, std::size_t{200}, std::size_t{3}}) {
    const Bytes cut(j.begin(), j.begin() + static_cast<std::ptrdiff_t>(keep));
    EXPECT_EQ(parse_error(cut), "truncated JPEG: no end-of-image marker") << "kept " << keep << " bytes";
  }
  const Bytes p = rgb_jpeg(true);
  EXPECT_EQ(parse_error(Bytes(p.begin(), p.end() - 40)), "truncated JPEG: no end-of-image marker");
}

TEST(ImageHeader, EndMarkerInsideAnEarlierSegmentDoesNotHideTruncation) {
  // An APP1 segment (EXIF, say, with a thumbnail) carrying FF D9 before the frame: only a marker
  // walk that skips segments by their length sees that the real end is missing.
  Bytes j = rgb_jpeg();
  const Bytes app1 = {0xFF, 0xE1, 0x00, 0x08, 'E', 'x', 0xFF, 0xD9, 0xFF, 0xD9};
  j.insert(j.begin() + 2, app1.begin(), app1.end());
  parse_ok(j);
  EXPECT_EQ(parse_error(Bytes(j.begin(), j.end() - 100)), "truncated JPEG: no end-of-image marker");
}

TEST(ImageHeader, BytesAfterTheEndMarkerAreAccepted) {
  Bytes j = rgb_jpeg();
  j.insert(j.end(), 300, 0);
  EXPECT_EQ(parse_ok(j).width, 53);
}

TEST(ImageHeader, TruncatedPngIsCaught) {
  const Bytes p = png_rgb(test_picture(30, 40), 30, 40);
  EXPECT_EQ(parse_error(Bytes(p.begin(), p.end() - 12)), "truncated PNG: no IEND chunk");
  EXPECT_EQ(parse_error(Bytes(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(p.size() / 2))), "truncated PNG: no IEND chunk");
  EXPECT_EQ(parse_error(Bytes(p.begin(), p.begin() + 20)), "truncated PNG: no complete header");
}

TEST(ImageHeader, EmptyGarbageAndOtherFormats) {
  EXPECT_EQ(parse_error(Bytes{}), "empty file");
  EXPECT_EQ(parse_error(Bytes{'h', 'e', 'l', 'l', 'o', '\n'}), "not a JPEG or PNG file");
  EXPECT_EQ(parse_error(Bytes{'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0}), "unsupported image format: GIF (JPEG and PNG are decoded)");
  EXPECT_EQ(parse_error(Bytes{0xFF, 0xD8}), "truncated JPEG: no end-of-image marker");
  EXPECT_EQ(parse_error(Bytes{0xFF, 0xD8, 0x12, 0x34, 0xFF, 0xD9}), "corrupt JPEG: expected a marker at byte 2");
  EXPECT_EQ(parse_error(Bytes(100, 0)), "not a JPEG or PNG file");
}

TEST(ImageHeader, AbsurdSizesAreRefused) {
  // A frame header claiming 60000 x 60000 in a tiny file: refused before anything allocates.
  Bytes j = rgb_jpeg();
  for (std::size_t i = 2; i + 9 < j.size(); ++i)
    if (j[i] == 0xFF && j[i + 1] == 0xC0) {
      j[i + 5] = 0xEA; j[i + 6] = 0x60;  // height 60000
      j[i + 7] = 0xEA; j[i + 8] = 0x60;  // width 60000
      break;
    }
  EXPECT_EQ(parse_error(j).rfind("image too large: 60000x60000", 0), 0u);
  Bytes z = rgb_jpeg();
  for (std::size_t i = 2; i + 9 < z.size(); ++i)
    if (z[i] == 0xFF && z[i + 1] == 0xC0) {
      z[i + 7] = 0; z[i + 8] = 0;  // width 0
      break;
    }
  EXPECT_EQ(parse_error(z), "JPEG with a zero width or height");
}

TEST(ImageHeader, UnsupportedCodings) {
  Bytes j = rgb_jpeg();
  for (std::size_t i = 2; i + 9 < j.size(); ++i)
    if (j[i] == 0xFF && j[i + 1] == 0xC0) {
      j[i + 1] = 0xC3;  // lossless
      break;
    }
  EXPECT_EQ(parse_error(j), "unsupported JPEG: lossless coding");
}
