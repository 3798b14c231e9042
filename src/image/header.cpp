// What an image file is, from its markers alone (no decoding): format, size, channels, JPEG coding
// and colour transform.  The whole marker structure is walked (segments by their lengths, entropy
// data by scanning for the next marker), so a file whose end is missing is caught here, before a
// decoder would fill the missing rows with grey and call it a success.
#include <cstring>
#include <string>

#include "image/image.h"

namespace sluice {

namespace {

// Beyond this the decoded RGB alone takes 400 MB per reader thread: treat it as a bad sample
// rather than letting one odd file exhaust the node's memory.
constexpr int64_t kMaxPixels = int64_t{1} << 27;

uint32_t be16(const uint8_t* p) { return static_cast<uint32_t>(p[0]) << 8 | p[1]; }
uint32_t be32(const uint8_t* p) { return be16(p) << 16 | be16(p + 2); }

bool fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return false;
}

bool check_size(ImageHeader* h, std::string* error) {
  if (h->width <= 0 || h->height <= 0)
    return fail(error, std::string(image_format_name(h->format)) + " with a zero width or height");
  if (static_cast<int64_t>(h->width) * h->height > kMaxPixels)
    return fail(error, std::string("image too large: ") + std::to_string(h->width) + "x" + std::to_string(h->height) +
                           " pixels (the limit is " + std::to_string(kMaxPixels >> 20) + " megapixels)");
  return true;
}

// Names formats we recognise but do not decode, so the reason says what the file is.
const char* other_format(const uint8_t* d, std::size_t n) {
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) return "GIF";
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return "WebP";
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return "BMP";
  if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) return "TIFF";
  if (n >= 12 && std::memcmp(d + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
  return nullptr;
}

// ---- JPEG ----------------------------------------------------------------------------------------

// Markers without a length field: SOI, EOI, RSTn, TEM.
bool standalone(uint8_t m) { return m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01; }

// Start-of-frame markers: C0..CF except DHT (C4), JPG (C8) and DAC (CC).
bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

bool parse_jpeg(const uint8_t* d, std::size_t n, ImageHeader* h, std::string* error) {
  h->format = ImageFormat::Jpeg;
  bool have_sof = false, in_scan = false;
  uint8_t sof = 0;
  std::size_t p = 2;  // after SOI
  for (;;) {
    if (in_scan) {
      // Entropy-coded data: 0xFF is followed by 0x00 (a stuffed byte) or RSTn inside the scan;
      // anything else is the next marker.
      for (;;) {
        const void* ff = p < n ? std::memchr(d + p, 0xFF, n - p) : nullptr;
        if (!ff) return fail(error, "truncated JPEG: no end-of-image marker");
        p = static_cast<std::size_t>(static_cast<const uint8_t*>(ff) - d);
        if (p + 1 >= n) return fail(error, "truncated JPEG: no end-of-image marker");
        const uint8_t next = d[p + 1];
        if (next == 0x00 || (next >= 0xD0 && next <= 0xD7) || next == 0xFF) {
          p += next == 0xFF ? 1 : 2;
          continue;
        }
        break;
      }
      in_scan = false;
    }
    // A marker: 0xFF, optional fill bytes 0xFF, the code.
    if (p >= n) return fail(error, "truncated JPEG: no end-of-image marker");
    if (d[p] != 0xFF) return fail(error, "corrupt JPEG: expected a marker at byte " + std::to_string(p));
    while (p < n && d[p] == 0xFF) ++p;
    if (p >= n) return fail(error, "truncated JPEG: no end-of-image marker");
    const uint8_t m = d[p++];
    if (m == 0xD9) break;  // EOI
    if (m == 0xD8) return fail(error, "corrupt JPEG: a second start-of-image marker");
    if (standalone(m)) continue;
    if (m == 0x00) return fail(error, "corrupt JPEG: an empty marker at byte " + std::to_string(p - 1));
    if (p + 2 > n) return fail(error, "truncated JPEG: no end-of-image marker");
    const std::size_t len = be16(d + p);
    if (len < 2) return fail(error, "corrupt JPEG: a segment of length " + std::to_string(len));
    if (p + len > n) return fail(error, "truncated JPEG: no end-of-image marker");
    const uint8_t* s = d + p + 2;  // the segment's payload
    const std::size_t sn = len - 2;
    if (is_sof(m)) {
      if (have_sof) return fail(error, "corrupt JPEG: more than one frame header");
      if (sn < 6) return fail(error, "corrupt JPEG: short frame header");
      have_sof = true;
      sof = m;
      const int precision = s[0];
      h->height = static_cast<int>(be16(s + 1));
      h->width = static_cast<int>(be16(s + 3));
      h->channels = s[5];
      if (sn < 6 + 3 * static_cast<std::size_t>(h->channels)) return fail(error, "corrupt JPEG: short frame header");
      if (m == 0xC3 || m == 0xC7 || m == 0xCB || m == 0xCF)
        return fail(error, "unsupported JPEG: lossless coding");
      if ((m >= 0xC5 && m <= 0xC7) || (m >= 0xCD && m <= 0xCF))
        return fail(error, "unsupported JPEG: hierarchical (differential) coding");
      if (precision != 8)
        return fail(error, "unsupported JPEG: " + std::to_string(precision) + "-bit samples (8-bit JPEGs are decoded)");
      if (h->channels != 1 && h->channels != 3 && h->channels != 4)
        return fail(error, "unsupported JPEG: " + std::to_string(h->channels) + " components");
      if (h->height == 0) return fail(error, "unsupported JPEG: the height is set by a later DNL marker");
    } else if (m == 0xDA) {
      if (!have_sof) return fail(error, "corrupt JPEG: a scan before the frame header");
      in_scan = true;
    } else if (m == 0xDC && !have_sof) {
      return fail(error, "unsupported JPEG: the height is set by a DNL marker");
    }
    p += len;
  }
  if (!have_sof) return fail(error, "corrupt JPEG: no frame header");
  // SOF0 baseline and SOF1 extended sequential (Huffman) are what nvJPEG's decoders take.
  h->progressive = !(sof == 0xC0 || sof == 0xC1);
  // Four components are CMYK or YCCK (Adobe's APP14 transform 0 or 2); libjpeg decodes both to
  // CMYK.  Like PIL, the decoder takes them as Adobe writes them: inverted (255 = no ink).
  h->cmyk = h->channels == 4;
  h->gpu_decodable = !h->progressive && (h->channels == 1 || h->channels == 3);
  return check_size(h, error);
}

// ---- PNG -----------------------------------------------------------------------------------------

bool parse_png(const uint8_t* d, std::size_t n, ImageHeader* h, std::string* error) {
  h->format = ImageFormat::Png;
  // Signature (8), then IHDR: length (4) "IHDR" (4) width height (4 + 4) depth type ... (5) CRC (4).
  if (n < 8 + 8 + 13 + 4) return fail(error, "truncated PNG: no complete header");
  if (be32(d + 8) != 13 || std::memcmp(d + 12, "IHDR", 4) != 0) return fail(error, "corrupt PNG: IHDR is not the first chunk");
  const uint32_t w = be32(d + 16), hh = be32(d + 20);
  const int depth = d[24], type = d[25];
  if (w > 0x7FFFFFFFu || hh > 0x7FFFFFFFu) return fail(error, "corrupt PNG: width or height out of range");
  h->width = static_cast<int>(w);
  h->height = static_cast<int>(hh);
  switch (type) {
    case 0: h->channels = 1; break;  // grey
    case 2: h->channels = 3; break;  // RGB
    case 3: h->channels = 3; break;  // palette (of RGB entries)
    case 4: h->channels = 2; break;  // grey + alpha
    case 6: h->channels = 4; break;  // RGBA
    default: return fail(error, "corrupt PNG: colour type " + std::to_string(type));
  }
  const bool depth_ok = (type == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)) ||
                        (type == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                        ((type == 2 || type == 4 || type == 6) && (depth == 8 || depth == 16));
  if (!depth_ok) return fail(error, "corrupt PNG: bit depth " + std::to_string(depth) + " with colour type " + std::to_string(type));
  // Walk the chunks by their lengths to IEND; running off the end means the file was cut short.
  std::size_t p = 8;
  bool idat = false;
  for (;;) {
    if (p + 12 > n) return fail(error, "truncated PNG: no IEND chunk");
    const uint32_t len = be32(d + p);
    if (len > 0x7FFFFFFFu) return fail(error, "corrupt PNG: chunk length out of range");
    if (len + 12 > n - p) return fail(error, "truncated PNG: no IEND chunk");
    const uint8_t* type_code = d + p + 4;
    if (std::memcmp(type_code, "IDAT", 4) == 0) idat = true;
    if (std::memcmp(type_code, "IEND", 4) == 0) break;
    p += len + 12;
  }
  if (!idat) return fail(error, "corrupt PNG: no image data (IDAT)");
  return check_size(h, error);
}

}  // namespace

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    default: return "unknown";
  }
}

bool parse_image_header(const uint8_t* data, std::size_t size, ImageHeader* header, std::string* error) {
  ImageHeader h;
  bool ok = false;
  if (size == 0 || data == nullptr) {
    ok = fail(error, "empty file");
  } else if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8) {
    ok = parse_jpeg(data, size, &h, error);
  } else if (size >= 8 && std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0) {
    ok = parse_png(data, size, &h, error);
  } else if (const char* other = other_format(data, size)) {
    ok = fail(error, std::string("unsupported image format: ") + other + " (JPEG and PNG are decoded)");
  } else {
    ok = fail(error, "not a JPEG or PNG file");
  }
  if (header) *header = h;
  return ok;
}

}  // namespace sluice
