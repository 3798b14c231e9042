#pragma once
// Test images made in memory with the real encoders (TurboJPEG, libspng), and a small encoded
// Source over byte blobs, for the image unit tests.
#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/source.h"

namespace sluice_test {

using Bytes = std::vector<uint8_t>;

// A smooth, non-trivial RGB picture (gradients plus a disc), h x w x 3.
inline Bytes test_picture(int h, int w, int channels = 3) {
  Bytes px(static_cast<std::size_t>(h) * w * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        const double d = std::hypot(y - h / 2.0, x - w / 3.0) < std::min(h, w) / 4.0 ? 60 : 0;
        const double v = 40 + 150.0 * (c % 3 == 0 ? x : c % 3 == 1 ? y : x + y) / (w + h) + d + 10 * c;
        px[(static_cast<std::size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(std::min(255.0, v));
      }
  return px;
}

// pixel_format: TJPF_RGB, TJPF_GRAY or TJPF_CMYK (stored as given: Adobe's inverted convention).
inline Bytes encode_jpeg(const Bytes& px, int h, int w, int pixel_format, int quality = 92, bool progressive = false,
                         int subsamp = TJSAMP_420) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (pixel_format == TJPF_GRAY) subsamp = TJSAMP_GRAY;
  const int flags = TJFLAG_ACCURATEDCT | (progressive ? TJFLAG_PROGRESSIVE : 0);
  if (tjCompress2(tj, px.data(), w, 0, h, pixel_format, &buf, &size, subsamp, quality, flags) != 0)
    throw std::runtime_error(std::string("tjCompress2: ") + tjGetErrorStr2(tj));
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// color_type: 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA; `px` holds the PNG's own samples
// (16-bit ones host-endian), palette indices for type 3 with `palette` its RGB entries.
inline Bytes encode_png(const void* px, std::size_t bytes, int h, int w, int color_type, int depth,
                        const std::vector<uint8_t>& palette = {}) {
  spng_ctx* enc = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(w);
  ihdr.height = static_cast<uint32_t>(h);
  ihdr.bit_depth = static_cast<uint8_t>(depth);
  ihdr.color_type = static_cast<uint8_t>(color_type);
  spng_set_ihdr(enc, &ihdr);
  if (color_type == 3) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(palette.size() / 3);
    for (uint32_t i = 0; i < plte.n_entries; ++i) {
      plte.entries[i].red = palette[3 * i];
      plte.entries[i].green = palette[3 * i + 1];
      plte.entries[i].blue = palette[3 * i + 2];
    }
    spng_set_plte(enc, &plte);
  }
  int rc = spng_encode_image(enc, px, bytes, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (rc) throw std::runtime_error(std::string("spng_encode_image: ") + spng_strerror(rc));
  std::size_t size = 0;
  void* buf = spng_get_png_buffer(enc, &size, &rc);
  if (!buf) throw std::runtime_error(std::string("spng_get_png_buffer: ") + spng_strerror(rc));
  Bytes out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + size);
  std::free(buf);
  spng_ctx_free(enc);
  return out;
}

inline Bytes png_rgb(const Bytes& px, int h, int w) { return encode_png(px.data(), px.size(), h, w, 2, 8); }

// An encoded source over in-memory blobs; a blob equal to `unreadable` stands for a file that
// vanished between listing and reading (read_encoded reports an error for it).
class BlobSource final : public sluice::Source {
 public:
  explicit BlobSource(std::vector<Bytes> blobs) : blobs_(std::move(blobs)) {}
  static Bytes unreadable() { return Bytes{'<', 'g', 'o', 'n', 'e', '>'}; }

  std::string describe() const override { return "blobs"; }
  int64_t size() const override { return static_cast<int64_t>(blobs_.size()); }
  const sluice::Shape& sample_shape() const override { return shape_; }
  sluice::DType dtype() const override { return sluice::DType::U8; }
  void read(int64_t, int64_t, void*) override { throw std::logic_error("BlobSource is encoded"); }
  bool encoded() const override { return true; }
  std::size_t max_encoded_bytes(int64_t count) const override {
    std::vector<std::size_t> sizes;
    for (const auto& b : blobs_) sizes.push_back(b.size());
    std::sort(sizes.rbegin(), sizes.rend());
    std::size_t total = 0;
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(sizes.size()); ++i) total += sizes[static_cast<std::size_t>(i)];
    return total;
  }
  void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity,
                    sluice::EncodedSample* out) override {
    std::size_t off = 0;
    for (int64_t k = 0; k < count; ++k) {
      const Bytes& b = blobs_[static_cast<std::size_t>(first + k)];
      out[k] = sluice::EncodedSample{};
      if (b == unreadable()) {
        out[k].error = "cannot read: No such file or directory";
        continue;
      }
      if (off + b.size() > capacity) throw std::logic_error("read_encoded: capacity too small");
      if (!b.empty()) std::memcpy(dst + off, b.data(), b.size());
      out[k].offset = off;
      out[k].size = b.size();
      off += b.size();
    }
  }
  std::string key(int64_t i) const override { return "img/" + std::to_string(i) + ".jpg"; }
  std::size_t key_bytes() const override { return 16; }

 private:
  std::vector<Bytes> blobs_;
  sluice::Shape shape_;
};

}  // namespace sluice_test
