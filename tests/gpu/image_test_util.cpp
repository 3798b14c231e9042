#include "image_test_util.h"

#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/error.h"

namespace sluice::imagetest {

namespace {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 11);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() % 1000000) / 1e6f; }
};

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

void png_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, static_cast<uint32_t>(crc32(0, out.data() + start, static_cast<uInt>(out.size() - start))));
}

}  // namespace

std::vector<uint8_t> natural_rgb(int h, int w, uint32_t seed) {
  Rng rng(seed);
  float corner[4][3];
  for (auto& c : corner)
    for (float& v : c) v = rng.uniform(20.f, 235.f);
  struct Blob { float cy, cx, ry, rx, edge, rgb[3]; };
  std::vector<Blob> blobs(6);
  for (Blob& b : blobs) {
    b.cy = rng.uniform(0.f, static_cast<float>(h));
    b.cx = rng.uniform(0.f, static_cast<float>(w));
    b.ry = rng.uniform(0.05f, 0.4f) * static_cast<float>(h) + 1.f;
    b.rx = rng.uniform(0.05f, 0.4f) * static_cast<float>(w) + 1.f;
    b.edge = rng.uniform(0.02f, 0.3f);
    for (float& v : b.rgb) v = rng.uniform(0.f, 255.f);
  }
  std::vector<uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const float fy = h > 1 ? static_cast<float>(y) / (h - 1) : 0.f, fx = w > 1 ? static_cast<float>(x) / (w - 1) : 0.f;
      float px[3];
      for (int c = 0; c < 3; ++c)
        px[c] = (1 - fy) * ((1 - fx) * corner[0][c] + fx * corner[1][c]) + fy * ((1 - fx) * corner[2][c] + fx * corner[3][c]);
      for (const Blob& b : blobs) {
        const float dy = (y - b.cy) / b.ry, dx = (x - b.cx) / b.rx;
        const float d = std::sqrt(dy * dy + dx * dx);
        // Soft-edged shapes: full colour inside, a ramp of width `edge` at the rim.
        const float a = std::clamp((1.f - d) / b.edge, 0.f, 1.f);
        for (int c = 0; c < 3; ++c) px[c] = (1 - a) * px[c] + a * b.rgb[c];
      }
      uint8_t* o = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
      for (int c = 0; c < 3; ++c)
        o[c] = static_cast<uint8_t>(std::clamp(px[c] + static_cast<float>(rng.next() % 7) - 3.f, 0.f, 255.f));
    }
  return rgb;
}

const char* jpeg_name(Jpeg kind) {
  switch (kind) {
    case Jpeg::S444: return "4:4:4";
    case Jpeg::S422: return "4:2:2";
    case Jpeg::S420: return "4:2:0";
    case Jpeg::S440: return "4:4:0";
    case Jpeg::S411: return "4:1:1";
    case Jpeg::Grey: return "grey";
    case Jpeg::Progressive420: return "progressive 4:2:0";
    case Jpeg::Cmyk: return "CMYK";
  }
  return "?";
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int h, int w, Jpeg kind, int quality) {
  tjhandle tj = tjInitCompress();
  if (!tj) throw std::runtime_error("tjInitCompress failed");
  int samp = TJSAMP_420, flags = 0, format = TJPF_RGB;
  std::vector<uint8_t> cmyk;
  const uint8_t* src = rgb.data();
  switch (kind) {
    case Jpeg::S444: samp = TJSAMP_444; break;
    case Jpeg::S422: samp = TJSAMP_422; break;
    case Jpeg::S420: samp = TJSAMP_420; break;
    case Jpeg::S440: samp = TJSAMP_440; break;
    case Jpeg::S411: samp = TJSAMP_411; break;
    case Jpeg::Grey: samp = TJSAMP_GRAY; break;
    case Jpeg::Progressive420: samp = TJSAMP_420; flags = TJFLAG_PROGRESSIVE; break;
    case Jpeg::Cmyk:
      // Naive RGB -> CMYK; TurboJPEG stores it as an Adobe YCCK JPEG.
      samp = TJSAMP_444;
      format = TJPF_CMYK;
      cmyk.resize(static_cast<std::size_t>(h) * w * 4);
      for (std::size_t i = 0; i < static_cast<std::size_t>(h) * w; ++i) {
        const int k = 255 - std::max({rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]});
        for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = static_cast<uint8_t>(255 - rgb[3 * i + c] - k);
        cmyk[4 * i + 3] = static_cast<uint8_t>(k);
      }
      src = cmyk.data();
      break;
  }
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, src, w, 0, h, format, &buf, &size, samp, quality, flags) != 0) {
    const std::string e = tjGetErrorStr2(tj);
    tjDestroy(tj);
    throw std::runtime_error("tjCompress2: " + e);
  }
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, int h, int w) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter method change, no interlace
  png_chunk(out, "IHDR", ihdr);
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter type None
    raw.insert(raw.end(), rgb.begin() + static_cast<std::ptrdiff_t>(y) * w * 3, rgb.begin() + static_cast<std::ptrdiff_t>(y + 1) * w * 3);
  }
  uLongf zsize = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zsize);
  if (compress2(z.data(), &zsize, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw std::runtime_error("compress2 failed");
  z.resize(zsize);
  png_chunk(out, "IDAT", z);
  png_chunk(out, "IEND", {});
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void MemorySource::read(int64_t, int64_t, void*) { SLUICE_THROW("MemorySource holds encoded files: read_encoded"); }

std::size_t MemorySource::max_encoded_bytes(int64_t count) const {
  std::vector<std::size_t> sizes;
  for (const File& f : files_) sizes.push_back(f.bytes.size());
  std::sort(sizes.rbegin(), sizes.rend());
  std::size_t total = 0;
  for (int64_t i = 0; i < count && i < static_cast<int64_t>(sizes.size()); ++i) total += sizes[static_cast<std::size_t>(i)];
  return total;
}

void MemorySource::read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) {
  std::size_t at = 0;
  for (int64_t k = 0; k < count; ++k) {
    const File& f = files_[static_cast<std::size_t>(first + k)];
    out[k] = EncodedSample{};
    if (!f.error.empty()) {
      out[k].error = f.error;
      continue;
    }
    SLUICE_CHECK(at + f.bytes.size() <= capacity, "MemorySource: slot too small");
    if (!f.bytes.empty()) std::memcpy(dst + at, f.bytes.data(), f.bytes.size());
    out[k].offset = at;
    out[k].size = f.bytes.size();
    at += f.bytes.size();
  }
}

std::size_t MemorySource::key_bytes() const {
  std::size_t n = 1;
  for (const File& f : files_) n = std::max(n, f.key.size());
  return n;
}

DiffStats diff_stats(const uint8_t* a, const uint8_t* b, std::size_t n, int threshold) {
  DiffStats s;
  double sum = 0;
  std::size_t over = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int d = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    s.max = std::max(s.max, d);
    sum += d;
    if (d > threshold) ++over;
  }
  s.mean = n ? sum / static_cast<double>(n) : 0;
  s.over = n ? static_cast<double>(over) / static_cast<double>(n) : 0;
  return s;
}

}  // namespace sluice::imagetest
