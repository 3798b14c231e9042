#pragma once
// NumPy .npy files (format versions 1.0 to 3.0): what `sluice forward` reads and writes, so model
// outputs can be compared with numpy, onnxruntime and torch in a few lines of Python.
#include <istream>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace sluice {

struct NpyArray {
  DType dtype = DType::Undefined;
  Shape shape;
  std::vector<uint8_t> data;  // row-major (C order), little-endian
};

// What a .npy file's header says; the data starts at data_offset.
struct NpyHeader {
  DType dtype = DType::Undefined;
  Shape shape;
  bool big_endian = false;    // multi-byte elements stored big-endian
  bool fortran_order = false;
  std::size_t data_offset = 0;
};
// Reads the header from the start of `f` (InputError naming `path` for anything it cannot read).
NpyHeader read_npy_header(std::istream& f, const std::string& path);

// Reads float32, float16, float64, uint8, int8, int32, int64 and bool arrays; Fortran-order and
// big-endian files are converted.  InputError naming the file for anything else or a broken file.
NpyArray read_npy(const std::string& path);

// Writes a C-order little-endian array (format 1.0; 2.0 when the header needs it).  bfloat16, which
// .npy cannot name, is written as float32 (exact).  Error naming the file when it cannot be written.
void write_npy(const std::string& path, DType dtype, const Shape& shape, const void* data);

}  // namespace sluice
