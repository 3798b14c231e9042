// How long opening a big image input takes (every rank does it at start), printed for the README
// (no timed assertion): 50,000 small files in 500 folders, opened as a folder, a glob and a list,
// and the same samples as 100 tar shards.  Page cache warm (the files were just written).
// Skipped unless SLUICE_BENCH=1 (making the files takes a while):
//   SLUICE_BENCH=1 build/tests/sluice_bench --gtest_filter='InputBenchmark.*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/source.h"
#include "unit/test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

constexpr int kFolders = 500, kPerFolder = 100;

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A ustar header block for a member `name` of `size` bytes.
void tar_header(std::ofstream& out, const std::string& name, std::size_t size) {
  char h[512] = {0};
  std::snprintf(h, 100, "%s", name.c_str());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011zo", size);
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  out.write(h, 512);
}

}  // namespace

TEST(InputBenchmark, OpenFiftyThousandFiles) {
  const char* on = std::getenv("SLUICE_BENCH");
  if (!on || std::strcmp(on, "1") != 0) GTEST_SKIP() << "set SLUICE_BENCH=1 to run";
  TempDir dir;
  const std::string root = dir.file("imgs");
  const std::string body(2000, 'x');
  std::ofstream list(dir.file("list.txt"));
  std::ofstream shard;
  for (int f = 0; f < kFolders; ++f) {
    char folder[32];
    std::snprintf(folder, sizeof folder, "d%04d", f);
    std::filesystem::create_directories(root + "/" + folder);
    if (f % 5 == 0) {
      if (shard.is_open()) shard.write(std::string(1024, '\0').data(), 1024);
      shard.close();
      char name[64];
      std::snprintf(name, sizeof name, "/shard-%03d.tar", f / 5);
      shard.open(dir.path() + name, std::ios::binary);
    }
    for (int i = 0; i < kPerFolder; ++i) {
      const std::string rel = str(folder, "/img_", i, ".jpg");
      std::ofstream(root + "/" + rel, std::ios::binary) << body;
      list << "imgs/" << rel << "\n";
      tar_header(shard, rel, body.size());
      shard << body << std::string(512 - body.size() % 512, '\0');
    }
  }
  shard.write(std::string(1024, '\0').data(), 1024);
  shard.close();
  list.close();

  std::unique_ptr<Source> s;
  const double folder_s = seconds([&] { s = open_folder_source(root); });
  ASSERT_EQ(s->size(), kFolders * kPerFolder);
  const double glob_s = seconds([&] { s = open_glob_source(root + "/*/img_*.jpg"); });
  ASSERT_EQ(s->size(), kFolders * kPerFolder);
  const double list_s = seconds([&] { s = open_list_source(dir.file("list.txt")); });
  ASSERT_EQ(s->size(), kFolders * kPerFolder);
  const double tar_s = seconds([&] { s = open_tar_source(dir.path() + "/shard-{000..099}.tar"); });
  ASSERT_EQ(s->size(), kFolders * kPerFolder);
  std::string fp;
  const double fp_s = seconds([&] { fp = s->fingerprint(); });
  std::printf("opening 50,000 files: folder %.3f s, glob %.3f s, list %.3f s, 100 tar shards %.3f s; "
              "fingerprint %.3f s\n", folder_s, glob_s, list_s, tar_s, fp_s);
}
