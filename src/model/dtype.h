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
int64_t shape_numel(const Shape& s);             // product; 1 for a scalar
std::string shape_str(const Shape& s);           // "[64,3,512,512]"

// Half-precision conversions (round to nearest even), used by the CPU backend and the writers.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// `v` converted to element type t, as that type's bit pattern in the low bytes (little-endian): the
// fill value of Pad and the scalar constants of the engines.  Integers truncate toward zero and wrap
// to the type's width; Bool is 1 for any non-zero v.  Error for Undefined.
uint64_t scalar_bits(DType t, double v);

}  // namespace sluice
