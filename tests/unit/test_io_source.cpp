// The HDF5 input source: hyperslab reads straight into the caller's buffer, and one clear
// InputError for every dataset it cannot read.
#include <thread>

#include "core/error.h"
#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

// Writes dataset `name` of `type` with dims `dims` and the given bytes into `path` (created anew
// unless `append`).
void write_dataset(const std::string& path, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                   const void* data, bool append = false) {
  hid_t f = append ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                   : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(f, name, type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (data) ASSERT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
  H5Dclose(d);
  H5Pclose(lcpl);
  H5Sclose(space);
  H5Fclose(f);
}

float image_value(int64_t i, int64_t j) { return static_cast<float>(i) * 100.0f + static_cast<float>(j); }


}  // namespace

TEST(Hdf5Source, ReadsTheRequestedRowsOfAFloatDataset) {
  TempDir dir;
  const std::string path = dir.file("in.h5");
  std::vector<float> data(10 * 3 * 4 * 5);
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 60; ++j) data[static_cast<std::size_t>(i * 60 + j)] = image_value(i, j);
  write_dataset(path, "/data/images", H5T_IEEE_F32LE, {10, 3, 4, 5}, data.data());

  auto src = open_hdf5_source(path, "/data/images");
  EXPECT_EQ(src->size(), 10);
  EXPECT_EQ(src->sample_shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(src->dtype(), DType::F32);
  EXPECT_EQ(src->sample_bytes(), 240u);
  EXPECT_NE(src->describe().find("in.h5"), std::string::npos);
  std::vector<float> got(4 * 60 + 1, -7.0f);
  src->read(3, 4, got.data());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 60; ++j) ASSERT_EQ(got[static_cast<std::size_t>(i * 60 + j)], image_value(3 + i, j));
  EXPECT_EQ(got.back(), -7.0f);  // nothing written past count rows
  EXPECT_THROW(src->read(8, 3, got.data()), Error);
}

TEST(Hdf5Source, ReadsUint8AsIsAndOtherFloatsAsFloat32) {
  TempDir dir;
  const std::string path = dir.file("in.h5");
  std::vector<uint8_t> bytes(6 * 8);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 5);
  write_dataset(path, "/u8", H5T_STD_U8LE, {6, 8}, bytes.data());
  std::vector<double> doubles(4 * 2);
  for (std::size_t i = 0; i < doubles.size(); ++i) doubles[i] = 0.25 * static_cast<double>(i);
  write_dataset(path, "/f64", H5T_IEEE_F64LE, {4, 2}, doubles.data(), true);

  auto u8 = open_hdf5_source(path, "/u8");
  EXPECT_EQ(u8->dtype(), DType::U8);
  std::vector<uint8_t> b(16);
  u8->read(4, 2, b.data());
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(b[i], static_cast<uint8_t>((32 + i) * 5));

  auto f64 = open_hdf5_source(path, "f64");
  EXPECT_EQ(f64->dtype(), DType::F32);
  std::vector<float> f(2);
  f64->read(3, 1, f.data());
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], 1.75f);
}

TEST(Hdf5Source, ConcurrentReadersGetTheirOwnRows) {
  TempDir dir;
  const std::string path = dir.file("in.h5");
  std::vector<float> data(64 * 16);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 16; ++j) data[static_cast<std::size_t>(i * 16 + j)] = image_value(i, j);
  write_dataset(path, "/x", H5T_IEEE_F32LE, {64, 16}, data.data());
  auto src = open_hdf5_source(path, "/x");
  std::vector<std::thread> threads;
  std::vector<int64_t> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> buf(8 * 16);
      for (int rep = 0; rep < 50; ++rep) {
        const int64_t first = (t * 16 + rep * 3) % 56;
        src->read(first, 8, buf.data());
        for (int64_t i = 0; i < 8; ++i)
          for (int64_t j = 0; j < 16; ++j) bad[static_cast<std::size_t>(t)] += buf[static_cast<std::size_t>(i * 16 + j)] != image_value(first + i, j);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[static_cast<std::size_t>(t)], 0) << "thread " << t;
}

TEST(Hdf5Source, RejectsWhatItCannotReadWithOneInputErrorNamingFileAndDataset) {
  TempDir dir;
  const std::string path = dir.file("in.h5");
  std::vector<float> row(5, 1.0f);
  write_dataset(path, "/flat", H5T_IEEE_F32LE, {5}, row.data());
  std::vector<int16_t> ints(6, 3);
  write_dataset(path, "/ints", H5T_STD_I16LE, {3, 2}, ints.data(), true);
  write_dataset(path, "/empty", H5T_IEEE_F32LE, {0, 4}, nullptr, true);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "/group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Fclose(f);
  }
  {
    FILE* fp = std::fopen(dir.file("text.h5").c_str(), "w");
    std::fputs("plain text", fp);
    std::fclose(fp);
  }
  std::string e = input_error_of([&] { open_hdf5_source(dir.file("missing.h5"), "/x"); });
  EXPECT_NE(e.find("missing.h5: no such file"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(dir.file("text.h5"), "/x"); });
  EXPECT_NE(e.find("not an HDF5 file"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/images"); });
  EXPECT_NE(e.find("in.h5: no dataset '/images'"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/flat"); });
  EXPECT_NE(e.find("'/flat' has 1 dimension"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/ints"); });
  EXPECT_NE(e.find("'/ints' holds int16"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/empty"); });
  EXPECT_NE(e.find("holds no samples"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/group"); });
  EXPECT_NE(e.find("'/group' is not a dataset"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/flat/deeper"); });
  EXPECT_NE(e.find("no dataset"), std::string::npos) << e;
}
