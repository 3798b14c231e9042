// The rank file: round trip, recovery after a killed writer, resume by appending, and the cost of
// a commit.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "io/hdf5_util.h"
#include "io/rank_file.h"
#include "sluice/version.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

std::vector<DatasetSpec> three_outputs() {
  return {DatasetSpec{"logits", DType::F32, {3, 4}}, DatasetSpec{"argmax", DType::U8, {4}},
          DatasetSpec{"half", DType::F16, {2}}};
}

std::string attr_string(const std::string& path, const char* name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  auto v = h5::read_attr_string(f, name);
  H5Fclose(f);
  return v.value_or("<missing>");
}

// Runs `body` in a forked child; the body ends with die() while its RankFile is still open, so the
// file is left exactly as a crash leaves it (no destructor, no close).
[[noreturn]] void die() {
  raise(SIGKILL);
  _exit(4);
}

template <typename Body>
void in_killed_child(Body body) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(3);
    }
    _exit(5);  // the body did not die()
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
}

}  // namespace

TEST(RankFile, RoundTripKeepsRowsIndicesLedgerAndAttributes) {
  TempDir dir;
  const std::string path = dir.file("rank-00002.h5");
  const auto specs = three_outputs();
  auto f = open_rank_file(path, specs, 4, test_meta(2, 4), false);
  // Chunks arrive out of order, as under dynamic sharding; 10 samples each in batches of 4, 4, 2.
  const int64_t order[] = {3, 0, 7, 5};
  for (int64_t id : order) write_chunk(*f, specs, id, id * 10, 10, 4);
  EXPECT_EQ(f->committed_rows(), 40);
  f->close();

  const RankFileInfo info = read_rank_file(path);
  EXPECT_TRUE(info.closed_cleanly);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.total_samples, 1000);
  EXPECT_EQ(info.chunk_samples, 10);
  EXPECT_EQ(info.chunk_rows, 4);
  EXPECT_EQ(info.attempt, 0);
  EXPECT_EQ(info.job_text, test_meta().job_text);
  EXPECT_EQ(info.model_path, "jobs/models/quickstart.onnx");
  EXPECT_EQ(info.model_sha256, std::string(64, 'a'));
  EXPECT_EQ(info.host, "testhost");
  EXPECT_EQ(info.device, "cpu");
  EXPECT_EQ(info.sluice_version, SLUICE_VERSION);
  EXPECT_EQ(info.git_commit, SLUICE_GIT_COMMIT);
  EXPECT_EQ(info.start_time, "2023-11-14T22:13:20.250Z");
  EXPECT_DOUBLE_EQ(info.start_unix, 1700000000.25);
  EXPECT_FALSE(info.end_time.empty());
  EXPECT_GT(info.end_unix, info.start_unix);
  ASSERT_EQ(info.datasets.size(), 3u);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(info.datasets[i].name, specs[i].name);
    EXPECT_EQ(info.datasets[i].dtype, specs[i].dtype);
    EXPECT_EQ(info.datasets[i].row_shape, specs[i].row_shape);
  }
  ASSERT_EQ(info.chunks.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(info.chunks[k].seq, static_cast<int64_t>(k));  // the commit's number in the file
    EXPECT_EQ(info.chunks[k].first_index, order[k] * 10);
    EXPECT_EQ(info.chunks[k].count, 10);
    EXPECT_EQ(info.chunks[k].first_row, static_cast<int64_t>(k) * 10);
    EXPECT_EQ(check_chunk_rows(path, specs, info.chunks[k]), 0) << "chunk " << k;
  }
  EXPECT_EQ(info.committed_rows, 40);
  EXPECT_EQ(info.file_rows, 40);
  // Spot-check actual values through the C API: row 13 is sample 3 of chunk 0 (sample 3).
  const auto logits = read_raw_rows(path, "/outputs/logits", 13, 1);
  ASSERT_EQ(logits.size(), 12 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<const float*>(logits.data())[5], f32_value(3, 5));
  EXPECT_EQ(attr_string(path, "job"), test_meta().job_text);
}

TEST(RankFile, Float16IsStoredAsAnIeeeHalfType) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const std::vector<DatasetSpec> specs{{"half", DType::F16, {2}}};
  auto f = open_rank_file(path, specs, 4, test_meta(), false);
  write_chunk(*f, specs, 0, 0, 4, 4);
  f->close();
  // Read through HDF5's conversion to native float: the stored type is a real float16.
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(file, "/outputs/half", H5P_DEFAULT);
  float v[8] = {0};
  ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
  EXPECT_EQ(v[3], f32_value(1, 1));  // sample 1, element 1: 32.5, exact in float16
  H5Dclose(d);
  H5Fclose(file);
}

TEST(RankFile, RefusesToCreateOverAnExistingFileOrWithBadSpecs) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const auto specs = three_outputs();
  open_rank_file(path, specs, 4, test_meta(), false)->close();
  EXPECT_THROW(open_rank_file(path, specs, 4, test_meta(), false), InputError);
  EXPECT_THROW(open_rank_file(dir.file("b.h5"), {}, 4, test_meta(), false), InputError);
  EXPECT_THROW(open_rank_file(dir.file("c.h5"), {{"a/b", DType::F32, {2}}}, 4, test_meta(), false), InputError);
  EXPECT_THROW(open_rank_file(dir.file("d.h5"), {{"a", DType::F32, {2}}, {"a", DType::U8, {2}}}, 4, test_meta(), false),
               InputError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.h5")));
  EXPECT_THROW(open_rank_file(dir.file("nodir/x.h5"), specs, 4, test_meta(), false), InputError);
}

TEST(RankFile, CommitMustNameExactlyTheAppendedRows) {
  TempDir dir;
  const auto specs = three_outputs();
  auto f = open_rank_file(dir.file("r.h5"), specs, 4, test_meta(), false);
  EXPECT_THROW(f->commit(ChunkRecord{0, 0, 4, -1}), Error);  // nothing appended
  write_chunk(*f, specs, 0, 0, 6, 4, /*commit=*/false);
  EXPECT_THROW(f->commit(ChunkRecord{0, 0, 5, -1}), Error);
  f->commit(ChunkRecord{0, 0, 6, -1});
  EXPECT_EQ(f->committed_rows(), 6);
}

TEST(RankFile, KilledWriterLeavesCommittedChunksReadableAndRecoveryDropsTheRest) {
  TempDir dir;
  const std::string path = dir.file("rank-00001.h5");
  const auto specs = three_outputs();
  in_killed_child([&] {
    auto f = open_rank_file(path, specs, 4, test_meta(1, 2), false);
    write_chunk(*f, specs, 0, 0, 10, 4);
    write_chunk(*f, specs, 2, 20, 10, 4);
    write_chunk(*f, specs, 1, 10, 7, 4);
    write_chunk(*f, specs, 3, 30, 10, 4, /*commit=*/false);  // appended, never committed
    die();
  });
  RankFileInfo crashed = read_rank_file(path);
  EXPECT_FALSE(crashed.closed_cleanly);
  ASSERT_EQ(crashed.chunks.size(), 3u);
  EXPECT_EQ(crashed.committed_rows, 27);
  EXPECT_TRUE(crashed.end_time.empty());
  for (const ChunkRecord& c : crashed.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);

  struct stat st_before {};
  ASSERT_EQ(::stat(path.c_str(), &st_before), 0);
  EXPECT_NE(recover_rank_file(path).find("in place"), std::string::npos);
  struct stat st_after {};
  ASSERT_EQ(::stat(path.c_str(), &st_after), 0);
  EXPECT_EQ(st_after.st_ino, st_before.st_ino) << "recovered in place, not copied into a new file";
  const RankFileInfo rec = read_rank_file(path);
  EXPECT_TRUE(rec.closed_cleanly);  // plain HDF5 readers open it: the writer's flag is cleared
  EXPECT_EQ(rec.file_rows, 27);  // the 10 uncommitted rows are gone
  EXPECT_EQ(rec.committed_rows, 27);
  ASSERT_EQ(rec.chunks.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(rec.chunks[k].seq, crashed.chunks[k].seq);
    EXPECT_EQ(rec.chunks[k].first_row, crashed.chunks[k].first_row);
    EXPECT_EQ(check_chunk_rows(path, specs, rec.chunks[k]), 0);
  }
  EXPECT_EQ(rec.rank, 1);
  EXPECT_EQ(rec.host, "testhost");
  EXPECT_EQ(rec.job_text, test_meta().job_text);
  EXPECT_FALSE(std::filesystem::exists(path + ".recovering"));

  // An already clean file is left alone: same inode, same bytes.
  const auto before = std::filesystem::last_write_time(path);
  recover_rank_file(path);
  EXPECT_EQ(std::filesystem::last_write_time(path), before);
}

TEST(RankFile, ResumeAppendsAfterTheCommittedRowsOfARecoveredFile) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const auto specs = three_outputs();
  in_killed_child([&] {
    auto f = open_rank_file(path, specs, 4, test_meta(), false);
    write_chunk(*f, specs, 0, 0, 10, 4);
    write_chunk(*f, specs, 1, 10, 10, 4, /*commit=*/false);
    die();
  });
  EXPECT_FALSE(read_rank_file(path).closed_cleanly);
  // open_rank_file(append) recovers on its own when the file needs it.
  RankFileMeta meta = test_meta();
  meta.attempt = 1;
  meta.host = "otherhost";
  meta.start_time = 1700000100.0;
  auto f = open_rank_file(path, specs, 4, meta, true);
  EXPECT_EQ(f->committed_rows(), 10);
  write_chunk(*f, specs, 1, 10, 10, 4);
  write_chunk(*f, specs, 2, 20, 5, 4);
  f->close();

  const RankFileInfo info = read_rank_file(path);
  EXPECT_TRUE(info.closed_cleanly);
  EXPECT_EQ(info.attempt, 1);
  EXPECT_EQ(info.host, "otherhost");
  EXPECT_EQ(info.start_unix, 1700000100.0);
  ASSERT_EQ(info.chunks.size(), 3u);
  EXPECT_EQ(info.chunks[1].first_row, 10);
  EXPECT_EQ(info.chunks[2].first_row, 20);
  EXPECT_EQ(info.committed_rows, 25);
  for (const ChunkRecord& c : info.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);

  // A second resume of the clean file: the attempt counts up even when the caller passes 0.
  auto g = open_rank_file(path, specs, 4, test_meta(), true);
  write_chunk(*g, specs, 3, 30, 3, 4);
  g->close();
  const RankFileInfo again = read_rank_file(path);
  EXPECT_EQ(again.attempt, 2);
  ASSERT_EQ(again.chunks.size(), 4u);
  EXPECT_EQ(again.chunks[3].first_row, 25);
  EXPECT_EQ(check_chunk_rows(path, specs, again.chunks[3]), 0);
}

TEST(RankFile, ResumeRefusesAFileWithOtherOutputs) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const auto specs = three_outputs();
  open_rank_file(path, specs, 4, test_meta(), false)->close();
  const std::vector<DatasetSpec> other{{"logits", DType::F32, {3, 5}}};
  try {
    open_rank_file(path, other, 4, test_meta(), true);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be resumed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_rank_file(dir.file("missing.h5"), specs, 4, test_meta(), true), InputError);
}

TEST(RankFile, CompressedCommitsStartOnFreshChunks) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  std::vector<DatasetSpec> specs{{"logits", DType::F32, {8}, 4}, {"argmax", DType::U8, {1}}};
  auto f = open_rank_file(path, specs, 4, test_meta(), false);
  write_chunk(*f, specs, 0, 0, 10, 4);   // rows 0..9, chunk 2 of the file half full
  write_chunk(*f, specs, 1, 50, 6, 4);   // starts at row 12, not 10
  f->close();
  const RankFileInfo info = read_rank_file(path);
  ASSERT_EQ(info.chunks.size(), 2u);
  EXPECT_EQ(info.chunks[1].first_row, 12);
  EXPECT_EQ(info.committed_rows, 18);
  EXPECT_EQ(info.datasets[0].deflate, 4);
  for (const ChunkRecord& c : info.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
  // The padding rows belong to no sample.
  const auto pad = read_raw_rows(path, "/sample_index", 10, 2);
  EXPECT_EQ(reinterpret_cast<const int64_t*>(pad.data())[0], -1);
  EXPECT_EQ(reinterpret_cast<const int64_t*>(pad.data())[1], -1);
}

TEST(RankFile, ReadingSomethingElseIsAnInputError) {
  TempDir dir;
  EXPECT_THROW(read_rank_file(dir.file("none.h5")), InputError);
  {
    FILE* fp = std::fopen(dir.file("text.h5").c_str(), "w");
    std::fputs("not hdf5", fp);
    std::fclose(fp);
  }
  EXPECT_THROW(read_rank_file(dir.file("text.h5")), InputError);
  hid_t f = H5Fcreate(dir.file("plain.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  EXPECT_THROW(read_rank_file(dir.file("plain.h5")), InputError);
}

// The cost of a commit: two H5Fflush calls (rows first, then the ledger record), measured apart
// from the rows' own write.  Printed for the record (BENCHMARKS.md); no time is asserted, since
// timings on shared machines are noise.
TEST(RankFile, CommitCost) {
  TempDir dir;
  const std::vector<DatasetSpec> specs{{"logits", DType::F32, {1000}}, {"argmax", DType::U8, {1}}};
  for (bool fsync : {false, true}) {
    RankFileMeta meta = test_meta();
    meta.fsync_commits = fsync;
    meta.total_samples = 200 * 32;
    const std::string path = dir.file(fsync ? "fsync.h5" : "plain.h5");
    auto f = open_rank_file(path, specs, 32, meta, false);
    const int commits = fsync ? 50 : 200;
    double commit_s = 0, append_s = 0;
    for (int k = 0; k < commits; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      write_chunk(*f, specs, k, k * 32, 32, 32, /*commit=*/false);
      auto t1 = std::chrono::steady_clock::now();
      f->commit(ChunkRecord{k, k * 32, 32, -1});
      auto t2 = std::chrono::steady_clock::now();
      append_s += std::chrono::duration<double>(t1 - t0).count();
      commit_s += std::chrono::duration<double>(t2 - t1).count();
    }
    f->close();
    const double per_commit_ms = commit_s / commits * 1e3;
    std::printf("[ commit cost ] fsync=%d: %.3f ms per commit, %.3f ms per 32-row append (128 KB)\n", fsync,
                per_commit_ms, append_s / commits * 1e3);
    RecordProperty(fsync ? "commit_ms_fsync" : "commit_ms", std::to_string(per_commit_ms));
    EXPECT_EQ(read_rank_file(path).chunks.size(), static_cast<std::size_t>(commits));
  }
}

// The one moment a reader can see a ledger slot without its record: the writer grew /ledger and
// died before the record's bytes reached the file.  Forge both that and a torn record (fields
// written up to `count`, first_row still the fill value) with the raw API, then read, recover
// and resume.
TEST(RankFile, LedgerSlotsWithoutAWholeRecordAreNotCommitted) {
  for (bool torn : {false, true}) {
    TempDir dir;
    const std::string path = dir.file("rank-00000.h5");
    const auto specs = three_outputs();
    auto f = open_rank_file(path, specs, 4, test_meta(), false);
    write_chunk(*f, specs, 0, 0, 10, 4);
    write_chunk(*f, specs, 1, 10, 10, 4);
    f->close();
    in_killed_child([&] {
      hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
      H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
      hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
      hid_t ledger = H5Dopen2(file, "/ledger", H5P_DEFAULT);
      hsize_t n = 3;
      if (file < 0 || ledger < 0 || H5Dset_extent(ledger, &n) < 0) _exit(7);
      if (torn) {
        // seq, first_index and count of a third record, but not its first_row.
        hid_t t = H5Tcreate(H5T_COMPOUND, 24);
        H5Tinsert(t, "seq", 0, H5T_NATIVE_INT64);
        H5Tinsert(t, "first_index", 8, H5T_NATIVE_INT64);
        H5Tinsert(t, "count", 16, H5T_NATIVE_INT64);
        const int64_t rec[3] = {2, 20, 10};
        hid_t fs = H5Dget_space(ledger);
        hsize_t start = 2, one = 1;
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &one, nullptr);
        hid_t ms = H5Screate_simple(1, &one, nullptr);
        if (H5Dwrite(ledger, t, ms, fs, H5P_DEFAULT, rec) < 0) _exit(8);
      }
      H5Fflush(file, H5F_SCOPE_GLOBAL);
      die();
    });
    const RankFileInfo crashed = read_rank_file(path);
    EXPECT_FALSE(crashed.closed_cleanly);
    ASSERT_EQ(crashed.chunks.size(), 2u) << "torn=" << torn;
    EXPECT_EQ(crashed.committed_rows, 20);

    // Resuming recovers (the ledger shrinks back to its two records) and appends the third.
    auto g = open_rank_file(path, specs, 4, test_meta(), true);
    write_chunk(*g, specs, 2, 20, 10, 4);
    g->close();
    const RankFileInfo info = read_rank_file(path);
    ASSERT_EQ(info.chunks.size(), 3u);
    EXPECT_EQ(info.chunks[2].first_row, 20);
    for (const ChunkRecord& c : info.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
    const auto ledger = read_raw_rows(path, "/ledger", 0, 3);
    EXPECT_EQ(ledger.size(), 3u * 40) << "no blank slot left between the records (records of 40 bytes: 4 int64 and the commit time)";
  }
}

namespace {

// A cleanly closed file of four commits of 10 samples: [0,10), [20,30), [10,20), [40,50).
std::string four_commits(const TempDir& dir, const std::vector<DatasetSpec>& specs) {
  const std::string path = dir.file("rank-00000.h5");
  auto f = open_rank_file(path, specs, 4, test_meta(), false);
  for (int64_t first : {0, 20, 10, 40}) write_chunk(*f, specs, 0, first, 10, 4);
  f->close();
  return path;
}

void set_ledger_count(const std::string& path, hsize_t k, int64_t count) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ledger = H5Dopen2(file, "/ledger", H5P_DEFAULT);
  hid_t t = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(t, "count", 0, H5T_NATIVE_INT64);
  hid_t fs = H5Dget_space(ledger);
  const hsize_t one = 1;
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &k, nullptr, &one, nullptr);
  hid_t ms = H5Screate_simple(1, &one, nullptr);
  EXPECT_GE(H5Dwrite(ledger, t, ms, fs, H5P_DEFAULT, &count), 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Tclose(t);
  H5Dclose(ledger);
  H5Fclose(file);
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

}  // namespace

// An impossible record in the middle of the ledger: the commits before it are kept (copied into a
// fresh file), the rest will be redone; the damaged file stays beside as *.damaged.
TEST(RankFile, AnImpossibleLedgerRecordIsSalvagedUpToTheCommitsBeforeIt) {
  TempDir dir;
  const auto specs = three_outputs();
  const std::string path = four_commits(dir, specs);
  set_ledger_count(path, 2, int64_t{1} << 40);
  const RankFileInfo damaged = read_rank_file(path);
  EXPECT_EQ(damaged.chunks.size(), 2u);
  EXPECT_NE(damaged.damage.find("ledger record 2 of 4"), std::string::npos) << damaged.damage;

  const ino_t before = inode_of(path);
  const std::string note = recover_rank_file(path);
  EXPECT_NE(note.find("salvaged 2 commit(s) holding 20 samples"), std::string::npos) << note;
  EXPECT_NE(inode_of(path), before);
  EXPECT_EQ(inode_of(path + ".damaged"), before);
  const RankFileInfo rec = read_rank_file(path);
  EXPECT_TRUE(rec.closed_cleanly);
  EXPECT_TRUE(rec.damage.empty());
  ASSERT_EQ(rec.chunks.size(), 2u);
  EXPECT_EQ(rec.file_rows, 20);
  for (const ChunkRecord& c : rec.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
  // It takes a resume like any other file.
  auto f = open_rank_file(path, specs, 4, test_meta(), true);
  write_chunk(*f, specs, 0, 10, 10, 4);
  f->close();
  EXPECT_EQ(read_rank_file(path).chunks.size(), 3u);
}

// Rows that do not hold what the ledger names (a record pointing at the wrong rows) end the kept
// prefix too: recovery checks /sample_index at both ends of every run.
TEST(RankFile, ACommitWhoseRowsHoldOtherSamplesIsNotKept) {
  TempDir dir;
  const auto specs = three_outputs();
  const std::string path = four_commits(dir, specs);
  {
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t index = H5Dopen2(file, "/sample_index", H5P_DEFAULT);
    hid_t fs = H5Dget_space(index);
    const hsize_t row = 39, one = 1;  // the last row of the fourth commit
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &row, nullptr, &one, nullptr);
    hid_t ms = H5Screate_simple(1, &one, nullptr);
    const int64_t wrong = 777;
    EXPECT_GE(H5Dwrite(index, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, &wrong), 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(index);
    H5Fclose(file);
  }
  EXPECT_NE(recover_rank_file(path).find("salvaged 3 commit(s)"), std::string::npos);
  EXPECT_EQ(read_rank_file(path).chunks.size(), 3u);
}

// A file cut short: HDF5 refuses to open it at all; salvage opens it anyway (read-only) and keeps
// the commits whose every chunk lies inside what is left, and whose rows check out.
TEST(RankFile, AFileCutShortKeepsTheCommitsStillInside) {
  TempDir dir;
  const auto specs = three_outputs();
  const std::string path = four_commits(dir, specs);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size * 7 / 10);
  EXPECT_THROW(read_rank_file(path), Error);
  const std::string note = recover_rank_file(path);
  if (std::filesystem::exists(path)) {
    // Whatever part survived, what is kept reads back right; a file whose header is gone is moved
    // aside instead (everything redone).
    const RankFileInfo rec = read_rank_file(path);
    EXPECT_TRUE(rec.closed_cleanly);
    EXPECT_LE(rec.chunks.size(), 4u);
    for (const ChunkRecord& c : rec.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
    EXPECT_NE(note.find("cut short"), std::string::npos) << note;
  } else {
    EXPECT_NE(note.find("moved aside"), std::string::npos) << note;
  }
  EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
}

// A chunk index block that fails its checksum, as a kill -9 leaves one whose rewrite it cut short
// at a page boundary (half new, half old): the rows it indexes no longer read, and a resume that
// adds an entry to it failed at its first flush, at every resume.  Recovery finds it (it walks
// every chunk index), keeps the commits before its rows in a fresh file, and the resume writes on.
TEST(RankFile, AChunkIndexBlockThatFailsItsChecksumIsSalvagedAndTheResumeWritesOn) {
  TempDir dir;
  const auto specs = three_outputs();
  const std::string path = four_commits(dir, specs);  // 40 rows, 4-row chunks: each index has a data block
  {
    // One byte of the last extensible-array data block ("EADB": chunks 4 to 19 of one row dataset)
    // changed, as a torn write leaves it.
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::vector<char> bytes(std::filesystem::file_size(path));
    ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
    const std::string text(bytes.begin(), bytes.end());
    const std::size_t at = text.rfind("EADB");
    ASSERT_NE(at, std::string::npos);
    std::fseek(f, static_cast<long>(at + 20), SEEK_SET);
    std::fputc(bytes[at + 20] ^ 0x5a, f);
    std::fclose(f);
  }
  EXPECT_NE(every_row_reads(path), "");
  const std::string note = recover_rank_file(path);
  EXPECT_NE(note.find("fails its checksum"), std::string::npos) << note;
  EXPECT_NE(note.find("salvaged 1 commit(s) holding 10 samples"), std::string::npos) << note;
  EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
  const RankFileInfo rec = read_rank_file(path);
  ASSERT_EQ(rec.chunks.size(), 1u);
  EXPECT_EQ(rec.chunks[0].first_index, 0);
  EXPECT_EQ(every_row_reads(path), "");
  // The resume redoes what was lost and every row reads.
  auto f = open_rank_file(path, specs, 4, test_meta(), true);
  for (int64_t first : {20, 10, 40}) write_chunk(*f, specs, 0, first, 10, 4);
  f->close();
  const RankFileInfo resumed = read_rank_file(path);
  ASSERT_EQ(resumed.chunks.size(), 4u);
  for (const ChunkRecord& c : resumed.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
  EXPECT_EQ(every_row_reads(path), "");
}

TEST(RankFile, SomethingThatIsNoRankFileIsMovedAside) {
  TempDir dir;
  const std::string path = dir.file("rank-00004.h5");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("not hdf5\n", f);
    std::fclose(f);
  }
  const std::string note = recover_rank_file(path);
  EXPECT_NE(note.find("moved aside"), std::string::npos) << note;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
  EXPECT_THROW(recover_rank_file(path), InputError);  // nothing there any more
}

// Every ledger record carries its commit time (the report dates an attempt that ended without a
// word by its last commit), and merged runs keep their latest.
TEST(RankFile, LedgerRecordsCarryTheirCommitTime) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const auto specs = three_outputs();
  // A minute each way: the wall clock of a VM can be stepped by its time sync between two readings
  // (a CI run saw both commits land past `after` with a 1 s margin); the check is that the records
  // hold the time of their commit, not an exact one.
  const double before = static_cast<double>(std::time(nullptr)) - 60;
  auto f = open_rank_file(path, specs, 4, test_meta(), false);
  write_chunk(*f, specs, 0, 0, 10, 4);
  write_chunk(*f, specs, 1, 10, 10, 4);
  f->close();
  const double after = static_cast<double>(std::time(nullptr)) + 60;
  const RankFileInfo info = read_rank_file(path);
  ASSERT_EQ(info.chunks.size(), 2u);
  for (const ChunkRecord& c : info.chunks) {
    EXPECT_GE(c.time, before);
    EXPECT_LE(c.time, after);
  }
  EXPECT_LE(info.chunks[0].time, info.chunks[1].time);
  const auto runs = merged_runs(info.chunks);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].time, info.chunks[1].time);
}
