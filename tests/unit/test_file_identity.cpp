// What --resume calls a changed input (io/file_identity.h, fingerprint_difference): a fingerprint
// field that differs, named in words; fields only one fingerprint carries (an older Sluice wrote
// none of `mtime`) are not compared.  And the sources' fingerprints carry what tells a rewrite in
// place: a .npy row rewritten (same size) changes only the file's modification time; an image of a
// folder rewritten changes only its own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/file_identity.h"
#include "io/npy.h"
#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using sluice::testing::TempDir;

namespace {

// Sets the file's modification time to `seconds` after the epoch: a rewrite that the clock's
// granularity cannot hide.
void set_mtime(const std::string& path, time_t seconds) {
  const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

}  // namespace

TEST(FingerprintDifference, NamesWhatChangedAndIgnoresFieldsOnlyOneSideHas) {
  const std::string a = "npy /d/in.npy samples=10 shape=[10,3] dtype=float32 bytes=248 rows=00ff mtime=100";
  EXPECT_EQ(fingerprint_difference(a, a), "");
  EXPECT_EQ(fingerprint_difference(a, "npy /d/in.npy samples=10 shape=[10,3] dtype=float32 bytes=248 rows=00ff mtime=200"),
            "it was modified (its modification time differs)");
  // An older fingerprint without mtime matches an unchanged input.
  EXPECT_EQ(fingerprint_difference("npy /d/in.npy samples=10 shape=[10,3] dtype=float32 bytes=248 rows=00ff", a), "");
  EXPECT_EQ(fingerprint_difference(a, "npy /d/in.npy samples=10 shape=[10,3] dtype=float32 bytes=252 rows=0e0f mtime=100"),
            "its size went from 248 to 252 bytes; its sampled rows hold other values");
  EXPECT_NE(fingerprint_difference(a, "npy /d/other.npy samples=10 shape=[10,3] dtype=float32 bytes=248 rows=00ff")
                .find("another input"),
            std::string::npos);
  // "samples=N of M": the words without '=' belong to the field before them; a path may hold spaces.
  const std::string h = "hdf5 /my data/in.h5:/images samples=5 of 9 shape=[3] type=float32 keys= bytes=10 rows=ab";
  EXPECT_EQ(fingerprint_difference(h, h + " mtime=7"), "");
  EXPECT_EQ(fingerprint_difference(h, "hdf5 /my data/in.h5:/images samples=5 of 8 shape=[3] type=float32 keys= bytes=10 rows=ab"),
            "it holds 5 of 8 samples, not 5 of 9");
  // An image folder: its mtimes hash, and its `bytes` (a hash of the sampled files, not a size).
  const std::string f = "folder /imgs samples=3 list=01 bytes=02 mtimes=03";
  EXPECT_EQ(fingerprint_difference(f, "folder /imgs samples=3 list=01 bytes=02 mtimes=04"),
            "a file was modified (a modification time differs)");
  EXPECT_EQ(fingerprint_difference(f, "folder /imgs samples=3 list=01 bytes=05 mtimes=03"), "the sampled files hold other bytes");
  EXPECT_EQ(fingerprint_difference("folder /imgs samples=3 list=01 bytes=02", f), "");
}

TEST(FingerprintDifference, ANpyRowRewrittenInPlaceIsAChange) {
  TempDir dir;
  const std::string path = dir.file("x.npy");
  std::vector<float> data(9 * 4);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  write_npy(path, DType::F32, {9, 4}, data.data());
  set_mtime(path, 1000000);
  const std::string before = open_npy_source(path)->fingerprint();
  EXPECT_EQ(fingerprint_difference(before, open_npy_source(path)->fingerprint()), "");
  data[2 * 4] = -1;  // row 2: not the first, middle or last row, which the fingerprint reads
  write_npy(path, DType::F32, {9, 4}, data.data());
  set_mtime(path, 1000001);
  EXPECT_EQ(fingerprint_difference(before, open_npy_source(path)->fingerprint()),
            "it was modified (its modification time differs)");
}

TEST(FingerprintDifference, AnImageOfAFolderRewrittenWithItsSizeIsAChange) {
  TempDir dir;
  const std::string root = dir.file("imgs");
  std::filesystem::create_directories(root);
  for (int i = 0; i < 9; ++i) {
    put(root + "/" + std::to_string(i) + ".jpg", std::string(30, static_cast<char>('a' + i)));
    set_mtime(root + "/" + std::to_string(i) + ".jpg", 1000000);
  }
  const std::string before = open_folder_source(root)->fingerprint();
  EXPECT_EQ(open_folder_source(root)->fingerprint(), before);
  put(root + "/2.jpg", std::string(30, 'z'));  // not sampled, same size
  set_mtime(root + "/2.jpg", 1000001);
  EXPECT_EQ(fingerprint_difference(before, open_folder_source(root)->fingerprint()),
            "a file was modified (a modification time differs)");
}
