#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sluice {
namespace {

struct Descr {
  DType dtype;
  bool swap;  // big-endian data
};

Descr parse_descr(const std::string& path, const std::string& d) {
  if (d.size() < 3) throw InputError(str(path, ": unsupported dtype '", d, "'"));
  const char order = d[0];
  const std::string kind = d.substr(1);
  DType t = DType::Undefined;
  if (kind == "f4") t = DType::F32;
  else if (kind == "f2") t = DType::F16;
  else if (kind == "f8") t = DType::F64;
  else if (kind == "u1") t = DType::U8;
  else if (kind == "i1") t = DType::I8;
  else if (kind == "i4") t = DType::I32;
  else if (kind == "i8") t = DType::I64;
  else if (kind == "b1") t = DType::Bool;
  if (t == DType::Undefined || (order != '<' && order != '>' && order != '|' && order != '='))
    throw InputError(str(path, ": unsupported dtype '", d, "' (float32, float16, float64, uint8, int8, int32, int64, bool)"));
  return {t, order == '>' && dtype_size(t) > 1};
}

// The value of `key` in the header dict, as its raw text up to the next top-level comma.
std::string dict_value(const std::string& path, const std::string& header, const std::string& key) {
  std::size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) at = header.find("\"" + key + "\"");
  if (at == std::string::npos) throw InputError(str(path, ": .npy header has no '", key, "'"));
  at = header.find(':', at);
  if (at == std::string::npos) throw InputError(str(path, ": broken .npy header"));
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  std::size_t end = at;
  int depth = 0;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  return header.substr(at, end - at);
}

Shape parse_shape(const std::string& path, const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') throw InputError(str(path, ": bad shape ", text));
  Shape s;
  std::string num;
  for (std::size_t i = 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      num += c;
    } else if (c == ',' || c == ')') {
      if (!num.empty()) s.push_back(std::stoll(num));
      num.clear();
    } else if (c != ' ' && c != 'L') {
      throw InputError(str(path, ": bad shape ", text));
    }
  }
  return s;
}

void byte_swap(std::vector<uint8_t>& d, std::size_t elem) {
  for (std::size_t i = 0; i + elem <= d.size(); i += elem)
    for (std::size_t a = 0, b = elem - 1; a < b; ++a, --b) std::swap(d[i + a], d[i + b]);
}

// Fortran (column-major) to C (row-major) order.
std::vector<uint8_t> fortran_to_c(const std::vector<uint8_t>& f, const Shape& s, std::size_t elem) {
  std::vector<uint8_t> c(f.size());
  const std::size_t r = s.size();
  std::vector<int64_t> fstride(r, 1), idx(r, 0);
  for (std::size_t d = 1; d < r; ++d) fstride[d] = fstride[d - 1] * s[d - 1];
  const int64_t n = shape_numel(s);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (std::size_t d = 0; d < r; ++d) off += idx[d] * fstride[d];
    std::memcpy(&c[static_cast<std::size_t>(i) * elem], &f[static_cast<std::size_t>(off) * elem], elem);
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return c;
}

}  // namespace

NpyHeader read_npy_header(std::istream& f, const std::string& path) {
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw InputError(str(path, ": not a .npy file"));
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t hlen = 0;
  std::size_t preamble = 10;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw InputError(str(path, ": truncated .npy header"));
    hlen = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw InputError(str(path, ": truncated .npy header"));
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    preamble = 12;
  } else {
    throw InputError(str(path, ": unsupported .npy version ", major));
  }
  if (hlen > (1u << 20)) throw InputError(str(path, ": .npy header too large"));
  std::string header(hlen, '\0');
  if (!f.read(&header[0], hlen)) throw InputError(str(path, ": truncated .npy header"));

  std::string descr = dict_value(path, header, "descr");
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) throw InputError(str(path, ": unsupported dtype ", descr));
  descr = descr.substr(1, descr.size() - 2);
  const Descr d = parse_descr(path, descr);
  NpyHeader h;
  h.dtype = d.dtype;
  h.big_endian = d.swap;
  h.fortran_order = dict_value(path, header, "fortran_order").rfind("True", 0) == 0;
  h.shape = parse_shape(path, dict_value(path, header, "shape"));
  h.data_offset = preamble + hlen;
  return h;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(str(path, ": cannot open the file"));
  const NpyHeader h = read_npy_header(f, path);
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = h.shape;
  const std::size_t elem = dtype_size(a.dtype);
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(a.shape)) * elem;
  a.data.resize(bytes);
  if (bytes && !f.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(bytes)))
    throw InputError(str(path, ": truncated data (expected ", bytes, " bytes for ", shape_str(a.shape), ")"));
  if (h.big_endian) byte_swap(a.data, elem);
  if (h.fortran_order && a.shape.size() > 1) a.data = fortran_to_c(a.data, a.shape, elem);
  return a;
}

void write_npy(const std::string& path, DType dtype, const Shape& shape, const void* data) {
  std::vector<float> widened;
  if (dtype == DType::BF16) {  // no .npy name: store the exact float32 values
    const int64_t n = shape_numel(shape);
    widened.resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) widened[i] = bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    data = widened.data();
    dtype = DType::F32;
  }
  const char* descr = nullptr;
  switch (dtype) {
    case DType::F32: descr = "<f4"; break;
    case DType::F16: descr = "<f2"; break;
    case DType::F64: descr = "<f8"; break;
    case DType::U8: descr = "|u1"; break;
    case DType::I8: descr = "|i1"; break;
    case DType::I32: descr = "<i4"; break;
    case DType::I64: descr = "<i8"; break;
    case DType::Bool: descr = "|b1"; break;
    default: throw Error(str(path, ": cannot write ", dtype_name(dtype), " to .npy"));
  }
  std::ostringstream h;
  h << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) h << shape[i] << (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  h << "), }";
  std::string header = h.str();
  // Version 1.0 holds a header of up to 65535 bytes; the whole preamble is padded to 64 bytes.
  const bool v2 = header.size() + 11 + 10 > 65535;
  const std::size_t pre = v2 ? 12 : 10;
  header.append(63 - (pre + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(str(path, ": cannot create the file"));
  f.write("\x93NUMPY", 6);
  const char ver[2] = {static_cast<char>(v2 ? 2 : 1), 0};
  f.write(ver, 2);
  const uint32_t len = static_cast<uint32_t>(header.size());
  const unsigned char lb[4] = {static_cast<unsigned char>(len & 0xFF), static_cast<unsigned char>((len >> 8) & 0xFF),
                               static_cast<unsigned char>((len >> 16) & 0xFF), static_cast<unsigned char>(len >> 24)};
  f.write(reinterpret_cast<const char*>(lb), v2 ? 4 : 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype)));
  f.flush();
  if (!f) throw Error(str(path, ": write failed"));
}

}  // namespace sluice
