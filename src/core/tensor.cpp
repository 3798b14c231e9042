#include "core/tensor.h"

#include <new>

#include "core/error.h"

namespace sluice {

Tensor::Tensor(DType t, Shape s) : dtype(t), shape(std::move(s)) {
  const std::size_t n = checked_tensor_bytes(shape, t, "a tensor");
  try {
    bytes.resize(n);
  } catch (const std::bad_alloc&) {
    SLUICE_THROW("cannot allocate ", n, " bytes of host memory for a ", dtype_name(t), shape_str(shape), " tensor");
  }
}

void Tensor::throw_size_mismatch(const Tensor& t, std::size_t given) {
  SLUICE_THROW("a ", dtype_name(t.dtype), shape_str(t.shape), " tensor needs ", t.bytes.size(), " bytes, given ", given);
}

std::vector<int64_t> Tensor::as_int64() const {
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::I64: out[i] = data<int64_t>()[i]; break;
      case DType::I32: out[i] = data<int32_t>()[i]; break;
      case DType::U8: case DType::Bool: out[i] = data<uint8_t>()[i]; break;
      case DType::I8: out[i] = data<int8_t>()[i]; break;
      case DType::F32: out[i] = saturate_to_int64(data<float>()[i]); break;
      case DType::F64: out[i] = saturate_to_int64(data<double>()[i]); break;
      case DType::F16: out[i] = saturate_to_int64(f16_to_f32(data<uint16_t>()[i])); break;
      case DType::BF16: out[i] = saturate_to_int64(bf16_to_f32(data<uint16_t>()[i])); break;
      // A model's constant can be of a type Sluice holds but no op reads as numbers.
      default: throw InputError(str("a ", dtype_name(dtype), " tensor cannot be read as integers"));
    }
  }
  return out;
}

std::vector<float> Tensor::as_float() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32: out[i] = data<float>()[i]; break;
      case DType::F16: out[i] = f16_to_f32(data<uint16_t>()[i]); break;
      case DType::BF16: out[i] = bf16_to_f32(data<uint16_t>()[i]); break;
      case DType::F64: out[i] = static_cast<float>(data<double>()[i]); break;
      case DType::I64: out[i] = static_cast<float>(data<int64_t>()[i]); break;
      case DType::I32: out[i] = static_cast<float>(data<int32_t>()[i]); break;
      case DType::U8: case DType::Bool: out[i] = data<uint8_t>()[i]; break;
      case DType::I8: out[i] = data<int8_t>()[i]; break;
      default: throw InputError(str("a ", dtype_name(dtype), " tensor cannot be read as numbers"));
    }
  }
  return out;
}

}  // namespace sluice
