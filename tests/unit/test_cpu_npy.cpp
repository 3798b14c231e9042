// .npy files as `sluice forward` reads and writes them: round trips of every type, the layouts
// numpy writes (Fortran order, big-endian, version 2.0), broken files, and output file names.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

#include "app/cmd_forward.h"
#include "core/error.h"
#include "io/npy.h"

using namespace sluice;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/sluice-npy-test-" + std::to_string(getpid()) + "-" + name;
}

// A .npy file with the given header dict and raw data, as numpy would write it.
std::string write_raw(const std::string& name, const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const std::size_t pre = version == 1 ? 10 : 12;
  header.append(63 - (pre + header.size()) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
  const uint32_t n = static_cast<uint32_t>(header.size());
  bytes += static_cast<char>(n & 0xFF);
  bytes += static_cast<char>((n >> 8) & 0xFF);
  if (version != 1) {
    bytes += static_cast<char>((n >> 16) & 0xFF);
    bytes += static_cast<char>(n >> 24);
  }
  bytes += header + data;
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Npy, RoundTripsEveryType) {
  const Shape shape = {2, 3};
  std::vector<uint8_t> data(6 * 8);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 1);
  for (DType t : {DType::F32, DType::F16, DType::U8, DType::I32, DType::I64, DType::F64, DType::I8}) {
    const std::string path = temp_path(std::string("rt-") + dtype_name(t) + ".npy");
    write_npy(path, t, shape, data.data());
    const NpyArray a = read_npy(path);
    EXPECT_EQ(a.dtype, t);
    EXPECT_EQ(a.shape, shape);
    ASSERT_EQ(a.data.size(), 6 * dtype_size(t));
    EXPECT_EQ(0, std::memcmp(a.data.data(), data.data(), a.data.size())) << dtype_name(t);
    std::remove(path.c_str());
  }
}

TEST(Npy, ScalarAndOneDimensionalShapes) {
  const float v[3] = {1.f, 2.f, 3.f};
  const std::string p1 = temp_path("1d.npy"), p0 = temp_path("0d.npy");
  write_npy(p1, DType::F32, {3}, v);
  write_npy(p0, DType::F32, {}, v);
  EXPECT_EQ(read_npy(p1).shape, Shape{3});
  EXPECT_EQ(read_npy(p0).shape, Shape{});
  EXPECT_EQ(read_npy(p0).data.size(), 4u);
  std::remove(p1.c_str());
  std::remove(p0.c_str());
}

TEST(Npy, BFloat16IsWrittenAsExactFloat32) {
  const uint16_t h[2] = {f32_to_bf16(1.5f), f32_to_bf16(-3.25f)};
  const std::string path = temp_path("bf16.npy");
  write_npy(path, DType::BF16, {2}, h);
  const NpyArray a = read_npy(path);
  ASSERT_EQ(a.dtype, DType::F32);
  const float* f = reinterpret_cast<const float*>(a.data.data());
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -3.25f);
  std::remove(path.c_str());
}

TEST(Npy, HeaderIsPaddedToSixtyFourBytes) {
  const int32_t v[4] = {1, 2, 3, 4};
  const std::string path = temp_path("pad.npy");
  write_npy(path, DType::I32, {2, 2}, v);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_EQ((static_cast<std::size_t>(f.tellg()) - 16) % 64, 0u);
  std::remove(path.c_str());
}

TEST(Npy, FortranOrderIsConvertedToCOrder) {
  // The 2x3 matrix [[0,1,2],[3,4,5]] stored column by column.
  const int32_t col_major[6] = {0, 3, 1, 4, 2, 5};
  const std::string path = write_raw("fortran.npy", "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                                     std::string(reinterpret_cast<const char*>(col_major), 24));
  const NpyArray a = read_npy(path);
  const int32_t* v = reinterpret_cast<const int32_t*>(a.data.data());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], i);
  std::remove(path.c_str());
}

TEST(Npy, BigEndianAndVersionTwo) {
  const std::string be = std::string("\x3f\x80\x00\x00\xc0\x00\x00\x00", 8);  // 1.0f, -2.0f big-endian
  const std::string path = write_raw("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be, 2);
  const NpyArray a = read_npy(path);
  ASSERT_EQ(a.dtype, DType::F32);
  const float* f = reinterpret_cast<const float*>(a.data.data());
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -2.f);
  std::remove(path.c_str());
}

TEST(Npy, BrokenFilesAreInputErrorsNamingTheFile) {
  const std::string truncated = write_raw("trunc.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
                                          std::string(8, '\0'));
  const std::string objects = write_raw("obj.npy", "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
                                        std::string(8, '\0'));
  const std::string junk = temp_path("junk.npy");
  std::ofstream(junk) << "not a numpy file";
  for (const std::string& p : {truncated, objects, junk, temp_path("missing.npy")}) {
    try {
      read_npy(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    std::remove(p.c_str());
  }
}

TEST(ForwardCommand, OutputFileNamesKeepOnlySafeCharacters) {
  EXPECT_EQ(output_file_name("logits"), "logits.npy");
  EXPECT_EQ(output_file_name("out:0/x y"), "out_0_x_y.npy");
  EXPECT_EQ(output_file_name("a.b-c_d"), "a.b-c_d.npy");
  EXPECT_EQ(output_file_name(".."), "_...npy");
}

}  // namespace
