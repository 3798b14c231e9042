// Decoding on the CPU to interleaved 8-bit RGB: JPEG with TurboJPEG (libjpeg-turbo), PNG with
// libspng.  Every input kind ends as RGB the way PIL's convert("RGB") makes it: grey replicated,
// alpha dropped (not composited), CMYK through PIL's formula, 16-bit grey clipped to 255 (PIL reads
// it as integers, mode I, and convert clips), the other 16-bit samples to their high byte (PIL
// reads grey+alpha, RGB and RGBA of 16 bits as 8-bit modes from the high byte).
#include <turbojpeg.h>
#include <spng.h>

#include <memory>
#include <string>
#include <vector>

#include "image/image.h"

namespace sluice {

namespace {

bool fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return false;
}

// One TurboJPEG decompressor per thread, made on first use and kept for the thread's life: the
// reader threads decode thousands of images, and a handle holds libjpeg's allocations.
struct TjHandle {
  tjhandle h = nullptr;
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

TjHandle& thread_handle() {
  thread_local TjHandle handle;
  if (!handle.h) handle.h = tjInitDecompress();
  return handle;
}

// After a fatal error libjpeg's state can carry over into the next image (tables from the bad
// file made a later good one fail as "Bogus Huffman table definition"): start afresh.
bool fail_and_reset(std::string* error, const std::string& what) {
  TjHandle& handle = thread_handle();
  const std::string message = what + tjGetErrorStr2(handle.h);
  tjDestroy(handle.h);
  handle.h = nullptr;
  return fail(error, message);
}

// PIL's CMYK to RGB (Convert.c cmyk2rgb) on inverted CMYK as Adobe stores it: with c = 255 - C
// and k = 255 - K stored, R = (255 - K) - C * (255 - K) / 255, the division rounded as PIL's
// MULDIV255 rounds it.
inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void cmyk_to_rgb(const uint8_t* cmyk, std::size_t pixels, uint8_t* rgb) {
  for (std::size_t i = 0; i < pixels; ++i) {
    const uint8_t* s = cmyk + 4 * i;
    const int nk = s[3];  // stored inverted: 255 - K
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = static_cast<uint8_t>(nk - muldiv255(255 - s[c], nk));
  }
}

bool decode_jpeg(const uint8_t* data, std::size_t size, const ImageHeader& h, std::vector<uint8_t>& rgb,
                 std::string* error) {
  tjhandle tj = thread_handle().h;
  if (!tj) return fail(error, "cannot create a TurboJPEG decompressor");
  int w = 0, hh = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &w, &hh, &subsamp, &colorspace) != 0)
    return fail_and_reset(error, "corrupt JPEG: ");
  if (w != h.width || hh != h.height) return fail(error, "corrupt JPEG: inconsistent frame size");
  const std::size_t pixels = static_cast<std::size_t>(w) * static_cast<std::size_t>(hh);
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  // Accurate (islow) DCT and fancy upsampling: libjpeg's defaults, which PIL uses too.
  // LIMITSCANS refuses progressive files with absurd scan counts (a denial of service otherwise).
  const int flags = TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS;
  thread_local std::vector<uint8_t> cmyk_buf;
  uint8_t* dst = rgb.data();
  if (cmyk) {
    cmyk_buf.resize(pixels * 4);
    dst = cmyk_buf.data();
  }
  const int rc = tjDecompress2(tj, data, static_cast<unsigned long>(size), dst, w, 0, hh, cmyk ? TJPF_CMYK : TJPF_RGB,
                               flags);
  // Warnings (corrupt entropy data, extraneous bytes) still give an image, as in PIL and
  // torchvision; a missing end is caught by the header check before this.
  if (rc != 0 && tjGetErrorCode(tj) != TJERR_WARNING) return fail_and_reset(error, "corrupt JPEG: ");
  if (cmyk) cmyk_to_rgb(cmyk_buf.data(), pixels, rgb.data());
  return true;
}

struct SpngCtx {
  spng_ctx* ctx = spng_ctx_new(0);
  ~SpngCtx() {
    if (ctx) spng_ctx_free(ctx);
  }
};

bool decode_png(const uint8_t* data, std::size_t size, const ImageHeader& h, std::vector<uint8_t>& rgb,
                std::string* error) {
  SpngCtx s;
  if (!s.ctx) return fail(error, "cannot create a libspng context");
  auto spng_fail = [&](int rc) { return fail(error, std::string("corrupt PNG: ") + spng_strerror(rc)); };
  int rc = spng_set_png_buffer(s.ctx, data, size);
  if (rc) return spng_fail(rc);
  // The header check already bounds width * height; these bound libspng's own chunk caches.
  spng_set_chunk_limits(s.ctx, size_t{64} << 20, size_t{64} << 20);
  spng_ihdr ihdr{};
  if ((rc = spng_get_ihdr(s.ctx, &ihdr))) return spng_fail(rc);
  if (static_cast<int64_t>(ihdr.width) != h.width || static_cast<int64_t>(ihdr.height) != h.height)
    return fail(error, "corrupt PNG: inconsistent header");
  if (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 16) {
    // Big-endian 16-bit grey, clipped: a label map stored as 0..255 in 16 bits keeps its values.
    std::size_t raw_bytes = 0;
    if ((rc = spng_decoded_image_size(s.ctx, SPNG_FMT_RAW, &raw_bytes))) return spng_fail(rc);
    if (raw_bytes * 3 != rgb.size() * 2) return fail(error, "corrupt PNG: unexpected decoded size");
    std::vector<uint8_t> raw(raw_bytes);
    if ((rc = spng_decode_image(s.ctx, raw.data(), raw_bytes, SPNG_FMT_RAW, 0))) return spng_fail(rc);
    for (std::size_t i = 0; i < raw_bytes / 2; ++i) {
      const uint8_t v = raw[2 * i] != 0 ? 255 : raw[2 * i + 1];
      rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = v;
    }
    return true;
  }
  std::size_t bytes = 0;
  if ((rc = spng_decoded_image_size(s.ctx, SPNG_FMT_RGB8, &bytes))) return spng_fail(rc);
  if (bytes != rgb.size()) return fail(error, "corrupt PNG: unexpected decoded size");
  // No SPNG_DECODE_TRNS: transparency is dropped, as PIL's convert("RGB") drops alpha.
  if ((rc = spng_decode_image(s.ctx, rgb.data(), bytes, SPNG_FMT_RGB8, 0))) return spng_fail(rc);
  return true;
}

}  // namespace

bool decode_image_rgb(const uint8_t* data, std::size_t size, std::vector<uint8_t>& rgb, int* height, int* width,
                      std::string* error) {
  ImageHeader h;
  if (!parse_image_header(data, size, &h, error)) return false;
  rgb.resize(static_cast<std::size_t>(h.width) * static_cast<std::size_t>(h.height) * 3);
  const bool ok = h.format == ImageFormat::Jpeg ? decode_jpeg(data, size, h, rgb, error) : decode_png(data, size, h, rgb, error);
  if (!ok) return false;
  if (height) *height = h.height;
  if (width) *width = h.width;
  return true;
}

}  // namespace sluice
