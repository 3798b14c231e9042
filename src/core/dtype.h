#pragma once
// Element types that flow through graphs, slots and files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

enum class DType : int { Undefined = 0, F32, F16, BF16, U8, I8, I32, I64, Bool, F64 };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);        // "float32", "float16", "bfloat16", "uint8", ...
DType dtype_from_name(const std::string& name);  // accepts the names above; throws UsageError
DType dtype_from_onnx(int onnx_elem_type);       // onnx::TensorProto_DataType; Undefined if unknown
int dtype_to_onnx(DType t);

using Shape = std::vector<int64_t>;
// Product of the dimensions (1 for a scalar).  Throws InputError when it does not fit in int64 (a
// crafted model's dimensions, a huge --sample-shape), so no caller ever sees a wrapped size.
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);           // "[64,3,512,512]"

// Checked size arithmetic: every sum or product of dimensions, element counts or byte counts that
// comes from input goes through these.  On overflow they throw InputError "<what>: ... overflows".
int64_t checked_add(int64_t a, int64_t b, const char* what);
int64_t checked_mul(int64_t a, int64_t b, const char* what);

// No single tensor Sluice makes may be larger than this (1 TiB): far above any real model's
// tensors, far below the sizes at which products of dimensions wrap.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;

// Bytes of a tensor of shape `s` and type `t` about to be allocated or described: InputError naming
// `name` when a dimension is negative or the size exceeds kMaxTensorBytes, counting zero dimensions
// as ones (so [0, 2^62, 2^62] is refused too: its strides would overflow).
std::size_t checked_tensor_bytes(const Shape& s, DType t, const std::string& name);

// Half-precision conversions (round to nearest even), used by the CPU backend and the writers.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// double -> int64 without undefined behaviour: NaN is 0 and values outside int64 saturate (ONNX
// leaves out-of-range float-to-integer casts undefined; a crafted constant must not make them UB).
int64_t saturate_to_int64(double v);

// `v` converted to element type t, as that type's bit pattern in the low bytes (little-endian): the
// fill value of Pad and the scalar constants of the engines.  Integers truncate toward zero and wrap
// to the type's width; Bool is 1 for any non-zero v.  Error for Undefined.
uint64_t scalar_bits(DType t, double v);

}  // namespace sluice
