// `sluice run --export` on one rank file (export/live_export.h): the wrapper between the writer
// and the rank file exports only committed rows, keeps files already there, leaves no temporary,
// and a failing export thread ends the writer's next call with its message.  The mpi tests
// (tests/mpi/test_run_export.py) run it under mpirun with kills and resumes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "export/live_export.h"
#include "export/masks.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

namespace fs = std::filesystem;
constexpr std::size_t kKeyBytes = 12;

std::string key_of(int64_t i) { return str("a/", i, ".jpg"); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Appends samples [first, first + 4) of a 4x4 uint8 mask output, sample 2 of each batch bad.
void append_batch(RankFile& f, int64_t first, std::vector<unsigned char>& rows) {
  rows.resize(4 * 16);
  std::vector<char> keys(4 * kKeyBytes, 0);
  std::vector<uint8_t> status(4, 0);
  std::vector<int64_t> index;
  for (int64_t r = 0; r < 4; ++r) {
    for (int j = 0; j < 16; ++j) rows[static_cast<std::size_t>(r * 16 + j)] = static_cast<unsigned char>((first + r + j) % 5);
    const std::string k = key_of(first + r);
    std::memcpy(keys.data() + r * kKeyBytes, k.data(), k.size());
    index.push_back(first + r);
  }
  status[2] = 1;
  RowBatch b;
  b.rows = 4;
  b.sample_index = index.data();
  b.data = {rows.data()};
  b.meta.keys = keys.data();
  b.meta.status = status.data();
  f.append(b);
}

std::string expected_png(const std::vector<unsigned char>& rows, int64_t r) {
  Tensor t(DType::U8, {1, 4, 4});
  std::memcpy(t.bytes.data(), rows.data() + r * 16, 16);
  return encode_mask_png(mask_of_row(t, 0));
}

struct ExportSetup {
  TempDir dir;
  std::vector<DatasetSpec> specs{{"argmax", DType::U8, {4, 4}}};
  LiveExportOptions o;
  std::unique_ptr<RankFile> file;
  ExportSetup() {
    o.format = "masks";
    o.dir = dir.file("export");
    o.run_dir = dir.path();
    o.threads = 2;
    RankFileMeta meta = test_meta();
    meta.key_bytes = kKeyBytes;
    std::vector<std::string> keys;
    for (int64_t i = 0; i < 12; ++i) keys.push_back(key_of(i));
    open_live_export_dir(o, keys);
    file = make_live_export(open_rank_file(dir.file("rank-00000.h5"), specs, 4, meta, false), o, specs, "argmax",
                            kKeyBytes);
  }
};

}  // namespace

TEST(LiveExport, WritesOnlyCommittedGoodRowsAndKeepsFilesAlreadyThere) {
  ExportSetup s;
  fs::create_directories(fs::path(s.o.dir) / "a");
  { std::ofstream(fs::path(s.o.dir) / "a" / "1.png") << "kept"; }  // an earlier attempt's file
  std::vector<unsigned char> rows0, rows4, rows8;
  append_batch(*s.file, 0, rows0);
  s.file->commit(ChunkRecord{0, 0, 4, -1});
  append_batch(*s.file, 4, rows4);
  s.file->commit(ChunkRecord{1, 4, 4, -1});
  append_batch(*s.file, 8, rows8);  // never committed (a stop's batch, say): never exported
  s.file->close();

  const fs::path a = fs::path(s.o.dir) / "a";
  EXPECT_EQ(read_all(a / "0.png"), expected_png(rows0, 0));
  EXPECT_EQ(read_all(a / "1.png"), "kept");
  EXPECT_FALSE(fs::exists(a / "2.png"));  // a bad row has no result
  EXPECT_EQ(read_all(a / "3.png"), expected_png(rows0, 3));
  EXPECT_EQ(read_all(a / "5.png"), expected_png(rows4, 1));
  EXPECT_FALSE(fs::exists(a / "6.png"));
  for (int64_t i = 8; i < 12; ++i) EXPECT_FALSE(fs::exists(a / str(i, ".png"))) << i;
  int temporaries = 0;
  for (const auto& e : fs::recursive_directory_iterator(s.o.dir))
    temporaries += e.path().filename().string().find(".sluice-partial") != std::string::npos;
  EXPECT_EQ(temporaries, 0);
  EXPECT_EQ(read_rank_file(s.dir.file("rank-00000.h5")).chunks.size(), 2u);
}

TEST(LiveExport, AFailingExportThreadEndsTheWritersNextCallWithItsMessage) {
  ExportSetup s;
  { std::ofstream(fs::path(s.o.dir) / "a") << "a file where the folder of the masks goes"; }
  std::vector<unsigned char> rows;
  append_batch(*s.file, 0, rows);
  // The commit hands the rows to the threads; the failure comes out of it, or else out of close().
  const std::string e = input_error_of([&] {
    s.file->commit(ChunkRecord{0, 0, 4, -1});
    s.file->close();
  });
  EXPECT_NE(e.find("cannot create the folder"), std::string::npos) << e;
}

TEST(LiveExport, ANewRunRefusesAFolderHoldingFilesAndTwoKeysOnOneFile) {
  TempDir dir;
  LiveExportOptions o;
  o.format = "masks";
  o.dir = dir.file("export");
  o.run_dir = dir.path();
  EXPECT_NE(input_error_of([&] { open_live_export_dir(o, {"a.jpg", "b.jpg", "a.png"}); }).find("would both be written to a.png"),
            std::string::npos);
  { std::ofstream(fs::path(o.dir) / "x.png") << "someone's"; }
  EXPECT_NE(input_error_of([&] { open_live_export_dir(o, {"a.jpg"}); }).find("is not empty"), std::string::npos);
  o.resume = true;  // ... and a resume one without this run's marker
  EXPECT_NE(input_error_of([&] { open_live_export_dir(o, {"a.jpg"}); }).find("did not write"), std::string::npos);
}
