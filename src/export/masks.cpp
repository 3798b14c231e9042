#include "export/masks.h"

#include <spng.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace sluice {

namespace {

float as_float(const Tensor& t, std::size_t i) {
  switch (t.dtype) {
    case DType::F32: return t.data<float>()[i];
    case DType::F16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DType::BF16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::F64: return static_cast<float>(t.data<double>()[i]);
    default: throw InputError(str("export: cannot read ", dtype_name(t.dtype), " values as scores"));
  }
}

// PIL's nearest-neighbour source index per output position (ImagingScaleAffine): the position is
// stepped by repeated addition in double precision, which is not always what one multiplication
// gives, so the steps are reproduced rather than the formula.
std::vector<int64_t> nearest_sources(int64_t in, int64_t out) {
  std::vector<int64_t> src(static_cast<std::size_t>(out));
  const double step = static_cast<double>(in) / static_cast<double>(out);
  double at = step * 0.5;
  for (int64_t x = 0; x < out; ++x) {
    src[static_cast<std::size_t>(x)] = std::min<int64_t>(static_cast<int64_t>(at), in - 1);
    at += step;
  }
  return src;
}

struct SpngCtx {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  ~SpngCtx() { spng_ctx_free(ctx); }
};

void spng_check(int r, const char* what) {
  if (r != 0) throw Error(str("export: PNG encoding failed in ", what, ": ", spng_strerror(r)));
}

}  // namespace

Mask mask_of_row(const Tensor& rows, int64_t row) {
  Mask m;
  const Shape& s = rows.shape;
  if (s.size() == 3 && (rows.dtype == DType::U8 || rows.dtype == DType::I32 || rows.dtype == DType::I64)) {
    m.height = s[1];
    m.width = s[2];
    const std::size_t n = static_cast<std::size_t>(m.height * m.width), base = static_cast<std::size_t>(row) * n;
    m.classes.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      int64_t v = rows.dtype == DType::U8 ? rows.data<uint8_t>()[base + i]
                  : rows.dtype == DType::I32 ? rows.data<int32_t>()[base + i]
                                             : rows.data<int64_t>()[base + i];
      if (v < 0) throw InputError(str("export: row ", row, " holds the negative class ", v));
      m.classes[i] = static_cast<uint32_t>(v);
    }
    return m;
  }
  if (s.size() != 4)
    throw InputError(str("export: masks need an argmax output [N,H,W] or scores [N,C,H,W], not ", dtype_name(rows.dtype),
                         shape_str(s)));
  const int64_t c = s[1];
  m.height = s[2];
  m.width = s[3];
  const std::size_t plane = static_cast<std::size_t>(m.height * m.width);
  const std::size_t base = static_cast<std::size_t>(row) * static_cast<std::size_t>(c) * plane;
  m.classes.assign(plane, 0);
  std::vector<float> best(plane);
  for (std::size_t i = 0; i < plane; ++i) best[i] = as_float(rows, base + i);
  for (int64_t k = 1; k < c; ++k)
    for (std::size_t i = 0; i < plane; ++i) {
      const float v = as_float(rows, base + static_cast<std::size_t>(k) * plane + i);
      if (v > best[i]) {
        best[i] = v;
        m.classes[i] = static_cast<uint32_t>(k);
      }
    }
  return m;
}

Mask resize_nearest(const Mask& m, int64_t height, int64_t width) {
  if (height < 1 || width < 1) throw InputError(str("export: cannot resize a mask to ", height, "x", width));
  Mask r;
  r.height = height;
  r.width = width;
  r.classes.resize(static_cast<std::size_t>(height * width));
  const std::vector<int64_t> ys = nearest_sources(m.height, height), xs = nearest_sources(m.width, width);
  for (int64_t y = 0; y < height; ++y) {
    const uint32_t* in = m.classes.data() + ys[static_cast<std::size_t>(y)] * m.width;
    uint32_t* out = r.classes.data() + y * width;
    for (int64_t x = 0; x < width; ++x) out[x] = in[xs[static_cast<std::size_t>(x)]];
  }
  return r;
}

const std::array<uint8_t, 768>& class_palette() {
  static const std::array<uint8_t, 768> palette = [] {
    std::array<uint8_t, 768> p{};
    for (int c = 0; c < 256; ++c) {
      int bits = c;
      for (int shift = 7; shift >= 0 && bits; --shift, bits >>= 3) {
        p[3 * c + 0] |= static_cast<uint8_t>((bits & 1) << shift);
        p[3 * c + 1] |= static_cast<uint8_t>(((bits >> 1) & 1) << shift);
        p[3 * c + 2] |= static_cast<uint8_t>(((bits >> 2) & 1) << shift);
      }
    }
    return p;
  }();
  return palette;
}

namespace {
std::string encode_png(const Mask& m, bool indexed);
}  // namespace

std::string encode_mask_png(const Mask& m) {
  const uint32_t top = m.classes.empty() ? 0 : *std::max_element(m.classes.begin(), m.classes.end());
  if (top > 65535) throw InputError(str("export: class ", top, " does not fit a 16-bit PNG"));
  return encode_png(m, top < 256);
}

std::string encode_gray16_png(const Mask& m) {
  for (uint32_t v : m.classes)
    if (v > 65535) throw InputError(str("export: value ", v, " does not fit a 16-bit PNG"));
  return encode_png(m, false);
}

namespace {
std::string encode_png(const Mask& m, bool indexed) {
  SpngCtx enc;
  if (!enc.ctx) throw Error("export: cannot create a PNG encoder");
  spng_check(spng_set_option(enc.ctx, SPNG_ENCODE_TO_BUFFER, 1), "spng_set_option");
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(m.width);
  ihdr.height = static_cast<uint32_t>(m.height);
  ihdr.bit_depth = indexed ? 8 : 16;
  ihdr.color_type = indexed ? SPNG_COLOR_TYPE_INDEXED : SPNG_COLOR_TYPE_GRAYSCALE;
  spng_check(spng_set_ihdr(enc.ctx, &ihdr), "spng_set_ihdr");
  std::vector<uint8_t> pixels;
  if (indexed) {
    spng_plte plte{};
    plte.n_entries = 256;
    const auto& p = class_palette();
    for (int c = 0; c < 256; ++c) plte.entries[c] = {p[3 * c], p[3 * c + 1], p[3 * c + 2], 0};
    spng_check(spng_set_plte(enc.ctx, &plte), "spng_set_plte");
    pixels.assign(m.classes.begin(), m.classes.end());
  } else {
    // SPNG_FMT_PNG takes 16-bit samples in host byte order.
    pixels.resize(m.classes.size() * 2);
    for (std::size_t i = 0; i < m.classes.size(); ++i) {
      const uint16_t v = static_cast<uint16_t>(m.classes[i]);
      std::memcpy(pixels.data() + 2 * i, &v, 2);
    }
  }
  spng_check(spng_encode_image(enc.ctx, pixels.data(), pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE),
             "spng_encode_image");
  std::size_t size = 0;
  int err = 0;
  void* buf = spng_get_png_buffer(enc.ctx, &size, &err);
  if (!buf) spng_check(err ? err : 1, "spng_get_png_buffer");
  std::string out(static_cast<const char*>(buf), size);
  std::free(buf);  // the caller owns the buffer (libspng's default allocator is malloc)
  return out;
}
}  // namespace

}  // namespace sluice

namespace sluice {

std::string encode_rgb_png(int64_t height, int64_t width, const std::vector<uint8_t>& rgb) {
  if (rgb.size() != static_cast<std::size_t>(height * width * 3)) throw Error("export: RGB image of the wrong size");
  SpngCtx enc;
  if (!enc.ctx) throw Error("export: cannot create a PNG encoder");
  spng_check(spng_set_option(enc.ctx, SPNG_ENCODE_TO_BUFFER, 1), "spng_set_option");
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  spng_check(spng_set_ihdr(enc.ctx, &ihdr), "spng_set_ihdr");
  spng_check(spng_encode_image(enc.ctx, rgb.data(), rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), "spng_encode_image");
  std::size_t size = 0;
  int err = 0;
  void* buf = spng_get_png_buffer(enc.ctx, &size, &err);
  if (!buf) spng_check(err ? err : 1, "spng_get_png_buffer");
  std::string out(static_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

}  // namespace sluice
