// The padded-key format (io/sample_keys.h): a batch's keys written and read back, a key as long as
// the width, a longer one cut; /sample_key read by SampleKeyReader as Sluice writes it (fixed
// length, NUL-padded), as h5py writes str (variable length) and space-padded, by ranges cut to the
// rows there are; a file without keys and one whose /sample_key is not strings.
#include <hdf5.h>
#include <gtest/gtest.h>

#include <vector>

#include "io/sample_keys.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

// A file holding `keys` as /sample_key of fixed-length strings of `width` bytes, padded by `pad`,
// or variable-length ones (width 0).
void write_keys(const std::string& path, const std::vector<std::string>& keys, std::size_t width, H5T_str_t pad) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = keys.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t type = H5Tcopy(H5T_C_S1);
  if (width == 0) {
    H5Tset_size(type, H5T_VARIABLE);
    std::vector<const char*> v;
    for (const auto& k : keys) v.push_back(k.c_str());
    const hid_t d = H5Dcreate2(f, "/sample_key", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
  } else {
    H5Tset_size(type, width);
    H5Tset_strpad(type, pad);
    std::vector<char> buf(n * width, pad == H5T_STR_SPACEPAD ? ' ' : '\0');
    for (std::size_t i = 0; i < keys.size(); ++i) std::copy(keys[i].begin(), keys[i].end(), buf.begin() + i * width);
    const hid_t d = H5Dcreate2(f, "/sample_key", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(d);
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Fclose(f);
}

std::vector<std::string> read_keys(const std::string& path, int64_t first, int64_t count) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::vector<std::string> keys;
  {
    SampleKeyReader r(f, path);
    keys = r.read(first, count);
  }
  H5Fclose(f);
  return keys;
}

}  // namespace

TEST(SampleKeys, ABatchsKeysAreNulPaddedToTheWidthAndReadBackUpToTheFirstNul) {
  std::vector<char> keys(3 * 6, 'x');
  put_padded_key(keys.data(), 6, 0, "a.jpg");
  put_padded_key(keys.data(), 6, 1, "abcdef");     // exactly the width: no NUL
  put_padded_key(keys.data(), 6, 2, "abcdefghi");  // longer: cut
  EXPECT_EQ(std::string(keys.data(), 6), std::string("a.jpg\0", 6));
  EXPECT_EQ(padded_key(keys.data(), 6, 0), "a.jpg");
  EXPECT_EQ(padded_key(keys.data(), 6, 1), "abcdef");
  EXPECT_EQ(padded_key(keys.data(), 6, 2), "abcdef");
  put_padded_key(keys.data(), 6, 1, "");
  EXPECT_EQ(padded_key(keys.data(), 6, 1), "");
  EXPECT_EQ(padded_key(keys.data(), 6, 2), "abcdef");  // its neighbour untouched
}

TEST(SampleKeys, TheReaderReadsFixedVariableAndSpacePaddedKeysByRanges) {
  TempDir dir;
  const std::vector<std::string> keys{"a/b.jpg", "c.png", "sevenxx", ""};
  write_keys(dir.file("nul.h5"), keys, 7, H5T_STR_NULLPAD);
  write_keys(dir.file("var.h5"), keys, 0, H5T_STR_NULLTERM);
  write_keys(dir.file("space.h5"), keys, 9, H5T_STR_SPACEPAD);
  for (const char* name : {"nul.h5", "var.h5", "space.h5"}) {
    EXPECT_EQ(read_keys(dir.file(name), 0, 4), keys) << name;
    EXPECT_EQ(read_keys(dir.file(name), 1, 2), (std::vector<std::string>{"c.png", "sevenxx"})) << name;
    EXPECT_EQ(read_keys(dir.file(name), 3, 10), (std::vector<std::string>{""})) << name;  // cut to the rows there are
    EXPECT_TRUE(read_keys(dir.file(name), 9, 2).empty()) << name;
  }
  const hid_t f = H5Fopen(dir.file("nul.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  {
    SampleKeyReader r(f, "nul.h5");
    EXPECT_TRUE(r.has());
    EXPECT_EQ(r.rows(), 4);
    EXPECT_EQ(r.width(), 7u);
  }
  H5Fclose(f);
}

TEST(SampleKeys, AFileWithoutKeysHasNoneAndKeysThatAreNotStringsAreRefused) {
  TempDir dir;
  hid_t f = H5Fcreate(dir.file("none.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  {
    SampleKeyReader r(f, "none.h5");
    EXPECT_FALSE(r.has());
    EXPECT_EQ(r.rows(), 0);
    EXPECT_TRUE(r.read(0, 5).empty());
  }
  const hsize_t n = 2;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(f, "/sample_key", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(d);
  H5Sclose(space);
  const std::string e = input_error_of([&] { SampleKeyReader r(f, "ints.h5"); });
  EXPECT_NE(e.find("ints.h5: /sample_key holds"), std::string::npos) << e;
  EXPECT_NE(e.find("not strings"), std::string::npos) << e;
  H5Fclose(f);
}
