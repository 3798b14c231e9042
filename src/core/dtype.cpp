#include "core/dtype.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace sluice {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::U8: case DType::I8: case DType::Bool: return 1;
    case DType::I64: case DType::F64: return 8;
    default: return 0;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::U8: return "uint8";
    case DType::I8: return "int8";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::Bool: return "bool";
    case DType::F64: return "float64";
    default: return "undefined";
  }
}

DType dtype_from_name(const std::string& n) {
  if (n == "float32" || n == "fp32" || n == "float") return DType::F32;
  if (n == "float16" || n == "fp16" || n == "half") return DType::F16;
  if (n == "bfloat16" || n == "bf16") return DType::BF16;
  if (n == "uint8") return DType::U8;
  if (n == "int8") return DType::I8;
  if (n == "int32") return DType::I32;
  if (n == "int64") return DType::I64;
  if (n == "float64" || n == "double") return DType::F64;
  throw UsageError(str("unknown data type '", n, "' (expected float32, float16, bfloat16, uint8, int32, int64)"));
}

// Values of onnx::TensorProto_DataType, kept here so this file does not need the protobuf headers.
DType dtype_from_onnx(int e) {
  switch (e) {
    case 1: return DType::F32;
    case 2: return DType::U8;
    case 3: return DType::I8;
    case 6: return DType::I32;
    case 7: return DType::I64;
    case 9: return DType::Bool;
    case 10: return DType::F16;
    case 11: return DType::F64;
    case 16: return DType::BF16;
    default: return DType::Undefined;
  }
}

int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::F32: return 1;
    case DType::U8: return 2;
    case DType::I8: return 3;
    case DType::I32: return 6;
    case DType::I64: return 7;
    case DType::Bool: return 9;
    case DType::F16: return 10;
    case DType::F64: return 11;
    case DType::BF16: return 16;
    default: return 0;
  }
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw SizeError(str("the shape ", shape_str(s), " has more elements than a 64-bit count holds"));
  return n;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw SizeError(str(what, ": ", a, " + ", b, " overflows 64 bits"));
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw SizeError(str(what, ": ", a, " x ", b, " overflows 64 bits"));
  return r;
}

std::size_t checked_tensor_bytes(const Shape& s, DType t, const std::string& name) {
  // The product of the dimensions with zeros counted as ones bounds every partial product (strides,
  // offsets) that code computes from the shape, even for an empty tensor, so it is what is checked.
  int64_t span = 1;
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) throw InputError(str(name, " has a negative dimension: ", shape_str(s)));
    if (d == 0) empty = true;
    else if (span > kMaxTensorBytes / d) span = kMaxTensorBytes + 1;  // clamped: stays far from overflow
    else span *= d;
  }
  const int64_t es = std::max<int64_t>(1, static_cast<int64_t>(dtype_size(t)));
  if (span > kMaxTensorBytes / es)
    throw SizeError(str(name, " ", dtype_name(t), shape_str(s), " would take ",
                         span > kMaxTensorBytes ? std::string("more than 2^40") : std::to_string(span * es), " bytes",
                         empty ? " without its empty dimensions" : "",
                         "; Sluice refuses tensors over 1 TiB (a corrupt or crafted shape?)"));
  return empty ? 0 : static_cast<std::size_t>(span * static_cast<int64_t>(dtype_size(t)));
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return static_cast<uint16_t>(sign | (absx > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (absx < 0x38800000u) {                                               // subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
    const int shift = 113 - static_cast<int>(absx >> 23) + 13;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);
  const uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      exp = 1;
      while (!(mant & 0x400u)) { mant <<= 1; --exp; }
      mant &= 0x3FFu;
      x = sign | ((exp + 112) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7F800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_f32(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

int64_t saturate_to_int64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;   // 2^63: the first double above int64
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

uint64_t scalar_bits(DType t, double v) {
  uint64_t bits = 0;
  switch (t) {
    case DType::F32: { const float f = static_cast<float>(v); std::memcpy(&bits, &f, 4); break; }
    case DType::F64: std::memcpy(&bits, &v, 8); break;
    case DType::F16: bits = f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: bits = f32_to_bf16(static_cast<float>(v)); break;
    case DType::U8: bits = static_cast<uint8_t>(saturate_to_int64(v)); break;
    case DType::I8: bits = static_cast<uint8_t>(static_cast<int8_t>(saturate_to_int64(v))); break;
    case DType::I32: bits = static_cast<uint32_t>(static_cast<int32_t>(saturate_to_int64(v))); break;
    case DType::I64: bits = static_cast<uint64_t>(saturate_to_int64(v)); break;
    case DType::Bool: bits = v != 0.0 ? 1 : 0; break;
    default: SLUICE_THROW("element type ", dtype_name(t), " has no scalar conversion");
  }
  return bits;
}

}  // namespace sluice
