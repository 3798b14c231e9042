#pragma once
// A host tensor: model constants (weights, folded shape values) and CPU-backend values.  Dense,
// row-major, owned bytes.
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace sluice {

struct Tensor {
  DType dtype = DType::Undefined;
  Shape shape;
  std::vector<uint8_t> bytes;

  Tensor() = default;
  // Zero-filled.  InputError for a negative dimension or more than kMaxTensorBytes; Error naming the
  // size when the host cannot allocate it.
  Tensor(DType t, Shape s);

  int64_t numel() const { return shape_numel(shape); }
  std::size_t nbytes() const { return bytes.size(); }
  template <typename T> T* data() { return reinterpret_cast<T*>(bytes.data()); }
  template <typename T> const T* data() const { return reinterpret_cast<const T*>(bytes.data()); }

  template <typename T>
  static Tensor from(DType t, Shape s, const std::vector<T>& values) {
    Tensor x(t, std::move(s));
    if (values.size() * sizeof(T) != x.bytes.size()) throw_size_mismatch(x, values.size() * sizeof(T));
    if (!x.bytes.empty()) std::memcpy(x.bytes.data(), values.data(), x.bytes.size());  // empty: data() may be null
    return x;
  }
  // Integer view of any numeric tensor (floats truncate toward zero and saturate), for shape
  // arithmetic.  InputError for a type that holds no numbers.
  std::vector<int64_t> as_int64() const;
  // Float view of a floating tensor (float32/float16/bfloat16/float64) or an integer one.
  std::vector<float> as_float() const;

 private:
  [[noreturn]] static void throw_size_mismatch(const Tensor& t, std::size_t given);
};

}  // namespace sluice
