// Per-row data in the rank files (RowMeta): /sample_key, /sample_status, /sample_size and
// /bad_samples go through append, commit, a kill, recovery and resume exactly like the outputs,
// padding rows of compressed files read as blanks, and outputs.h5 maps them in sample order.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "io/rank_file.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

constexpr std::size_t kKeyBytes = 12;

std::string key_of(int64_t sample) { return str("img/", sample, ".jpg"); }
uint8_t status_of(int64_t sample) { return sample % 5 == 3 ? 1 : 0; }
bool is_bad(int64_t sample) { return status_of(sample) == 1; }
std::string reason_of(int64_t sample) { return str("sample ", sample, ": truncated JPEG"); }

const std::vector<DatasetSpec>& specs(bool compressed = false) {
  static const std::vector<DatasetSpec> raw{{"logits", DType::F32, {3}}};
  static const std::vector<DatasetSpec> deflated{{"logits", DType::F32, {3}, 4}};
  return compressed ? deflated : raw;
}

RankFileMeta meta_with_rows(int rank = 0, int world = 1) {
  RankFileMeta m = test_meta(rank, world);
  m.key_bytes = kKeyBytes;
  m.orig_sizes = true;
  m.input_fingerprint = "folder /data samples=1000 list=0123 bytes=4567";
  return m;
}

// write_chunk with RowMeta for every batch, as the pipeline's writer sets it.
void write_chunk_rows(RankFile& f, int64_t chunk_id, int64_t first, int64_t count, int64_t batch, bool commit = true) {
  for (int64_t b = first; b < first + count; b += batch) {
    const int64_t rows = std::min(batch, first + count - b);
    std::vector<char> keys(static_cast<std::size_t>(rows) * kKeyBytes, 0);
    std::vector<uint8_t> status;
    std::vector<int32_t> hw;
    std::vector<std::pair<int64_t, std::string>> bad;
    for (int64_t r = 0; r < rows; ++r) {
      const std::string k = key_of(b + r);
      std::memcpy(keys.data() + r * kKeyBytes, k.data(), k.size());
      status.push_back(status_of(b + r));
      hw.push_back(static_cast<int32_t>(100 + b + r));
      hw.push_back(static_cast<int32_t>(200 + b + r));
      if (is_bad(b + r)) bad.emplace_back(b + r, reason_of(b + r));
    }
    RowMeta m;
    m.keys = keys.data();
    m.status = status.data();
    m.orig_hw = hw.data();
    m.bad = &bad;
    write_chunk(f, specs(), chunk_id, b, rows, rows, false, &m);
  }
  if (commit) f.commit(ChunkRecord{chunk_id, first, count, -1});
}

// Checks every committed row's key, status and size against the sample its ledger entry names.
void expect_rows_match(const std::string& path) {
  const RankFileInfo info = read_rank_file(path);
  for (const ChunkRecord& c : info.chunks) {
    const std::vector<std::string> keys = read_sample_keys(path, c.first_row, c.count);
    const std::vector<unsigned char> status = read_raw_rows(path, "/sample_status", c.first_row, c.count);
    const std::vector<unsigned char> hw = read_raw_rows(path, "/sample_size", c.first_row, c.count);
    ASSERT_EQ(keys.size(), static_cast<std::size_t>(c.count));
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t sample = c.first_index + i;
      EXPECT_EQ(keys[static_cast<std::size_t>(i)], key_of(sample));
      EXPECT_EQ(status[static_cast<std::size_t>(i)], status_of(sample));
      const auto* p = reinterpret_cast<const int32_t*>(hw.data());
      EXPECT_EQ(p[2 * i], 100 + sample);
      EXPECT_EQ(p[2 * i + 1], 200 + sample);
    }
  }
}

std::vector<std::pair<int64_t, std::string>> expected_bad(std::initializer_list<std::pair<int64_t, int64_t>> ranges) {
  std::vector<std::pair<int64_t, std::string>> v;
  for (auto [first, count] : ranges)
    for (int64_t s = first; s < first + count; ++s)
      if (is_bad(s)) v.emplace_back(s, reason_of(s));
  return v;
}

}  // namespace

TEST(RowMeta, KeysStatusSizesAndBadSamplesAreStoredBesideTheOutputs) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  auto f = open_rank_file(path, specs(), 4, meta_with_rows(), false);
  write_chunk_rows(*f, 0, 40, 10, 4);
  write_chunk_rows(*f, 1, 0, 10, 4);
  f->close();
  const RankFileInfo info = read_rank_file(path);
  EXPECT_EQ(info.key_bytes, kKeyBytes);
  EXPECT_TRUE(info.has_status);
  EXPECT_TRUE(info.has_sizes);
  EXPECT_EQ(info.input_fingerprint, "folder /data samples=1000 list=0123 bytes=4567");
  EXPECT_EQ(read_bad_samples(info), expected_bad({{40, 10}, {0, 10}}));
  expect_rows_match(path);
  EXPECT_EQ(read_sample_keys(path, 8, 100).size(), 12u);  // clipped to the rows there are
}

TEST(RowMeta, RowsWithoutRowMetaGetBlankKeysAndStatusOk) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  RankFileMeta m = test_meta();
  m.key_bytes = 5;
  auto f = open_rank_file(path, specs(), 4, m, false);
  write_chunk(*f, specs(), 0, 0, 6, 3);
  f->close();
  const RankFileInfo info = read_rank_file(path);
  EXPECT_EQ(info.key_bytes, 5u);
  EXPECT_FALSE(info.has_sizes);
  EXPECT_TRUE(read_bad_samples(info).empty());
  EXPECT_EQ(read_sample_keys(path, 0, 6), std::vector<std::string>(6, ""));
  EXPECT_EQ(read_raw_rows(path, "/sample_status", 0, 6), std::vector<unsigned char>(6, 0));
}

TEST(RowMeta, AKilledWriterLosesOnlyUncommittedRowsAndBadSamplesAndResumesCleanly) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      auto f = open_rank_file(path, specs(), 4, meta_with_rows(), false);
      write_chunk_rows(*f, 0, 0, 10, 4);
      write_chunk_rows(*f, 1, 20, 10, 4, /*commit=*/false);  // bad samples 23 and 28 written, never committed
      // As if the chunk cache had been evicted: the uncommitted rows and records reach the file.
      hid_t ids[4];
      const ssize_t n = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_FILE, 4, ids);
      for (ssize_t i = 0; i < n; ++i) H5Fflush(ids[i], H5F_SCOPE_LOCAL);
      ::kill(::getpid(), SIGKILL);  // no close
    } catch (...) {
    }
    _exit(3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  RankFileInfo info = read_rank_file(path);  // as a SWMR reader
  EXPECT_FALSE(info.closed_cleanly);
  EXPECT_EQ(info.file_rows, 20);  // the uncommitted rows are on disk, and so are their bad records
  EXPECT_EQ(read_raw_rows(path, "/bad_samples", 0, 4).size(), 4u * 208);
  EXPECT_EQ(read_bad_samples(info), expected_bad({{0, 10}}));

  recover_rank_file(path);
  info = read_rank_file(path);
  EXPECT_TRUE(info.closed_cleanly);
  EXPECT_EQ(info.committed_rows, 10);
  EXPECT_EQ(info.file_rows, 10);
  EXPECT_EQ(read_bad_samples(info), expected_bad({{0, 10}}));
  EXPECT_EQ(read_raw_rows(path, "/bad_samples", 0, 2).size(), 2u * 208);  // exactly the committed records
  EXPECT_EQ(info.input_fingerprint, meta_with_rows().input_fingerprint);

  auto f = open_rank_file(path, specs(), 4, meta_with_rows(), true);
  write_chunk_rows(*f, 1, 20, 10, 4);
  f->close();
  info = read_rank_file(path);
  EXPECT_EQ(read_bad_samples(info), expected_bad({{0, 10}, {20, 10}}));
  expect_rows_match(path);
}

TEST(RowMeta, StaleBadSamplesOfAnUncommittedAppendAreBlankedOnResume) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  {
    auto f = open_rank_file(path, specs(), 4, meta_with_rows(), false);
    write_chunk_rows(*f, 0, 0, 5, 5);
    write_chunk_rows(*f, 1, 10, 10, 5, /*commit=*/false);  // 13 and 18, then a clean close
    f->close();
  }
  EXPECT_EQ(read_bad_samples(read_rank_file(path)), expected_bad({{0, 5}}));
  // The next attempt redoes samples 10..19 and finds them fine this time: no bad records.
  auto f = open_rank_file(path, specs(), 4, meta_with_rows(), true);
  write_chunk(*f, specs(), 1, 10, 10, 5);
  f->close();
  EXPECT_EQ(read_bad_samples(read_rank_file(path)), expected_bad({{0, 5}}));
  // The stale record of sample 13 is gone from the file: blanked (index -1) or cut by the recovery
  // of the uncommitted rows.
  const RankFileInfo info = read_rank_file(path);
  hid_t h = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(h, "/bad_samples", H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  const hssize_t slots_in_file = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(h);
  if (slots_in_file >= 2) {
    const std::vector<unsigned char> slots = read_raw_rows(path, "/bad_samples", 0, 2);
    int64_t index = 0;
    std::memcpy(&index, slots.data() + 208, 8);
    EXPECT_EQ(index, -1);  // was 13
  }
}

TEST(RowMeta, PaddingRowsOfCompressedFilesReadAsBlanks) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  RankFileMeta m = meta_with_rows();
  auto f = open_rank_file(path, specs(true), 4, m, false);
  for (int64_t k = 0; k < 3; ++k) {  // commits of 3 rows on 4-row chunks: one padding row each
    for (int64_t s = k * 3; s < k * 3 + 3; ++s) {
      std::vector<char> keys(kKeyBytes, 0);
      std::memcpy(keys.data(), key_of(s).data(), key_of(s).size());
      uint8_t st = status_of(s);
      int32_t hw[2] = {static_cast<int32_t>(100 + s), static_cast<int32_t>(200 + s)};
      RowMeta rm;
      rm.keys = keys.data();
      rm.status = &st;
      rm.orig_hw = hw;
      write_chunk(*f, specs(true), k, s, 1, 1, false, &rm);
    }
    f->commit(ChunkRecord{k, k * 3, 3, -1});
  }
  f->close();
  const RankFileInfo info = read_rank_file(path);
  ASSERT_EQ(info.chunks.size(), 3u);
  EXPECT_EQ(info.chunks[1].first_row, 4);
  expect_rows_match(path);
  EXPECT_EQ(read_sample_keys(path, 3, 1), std::vector<std::string>{""});
}

TEST(RowMeta, OutputsH5MapsKeysStatusAndSizesInSampleOrderAndCopiesBadSamples) {
  TempDir dir;
  std::vector<std::unique_ptr<RankFile>> files;
  for (int r = 0; r < 2; ++r) {
    RankFileMeta m = meta_with_rows(r, 2);
    m.total_samples = 40;
    files.push_back(open_rank_file(dir.file(str("rank-0000", r, ".h5")), specs(), 4, m, false));
  }
  for (int64_t k = 0; k < 4; ++k) write_chunk_rows(*files[static_cast<std::size_t>(k % 2 ? 0 : 1)], k, 30 - k * 10, 10, 4);
  std::vector<RankFileInfo> infos;
  for (int r = 0; r < 2; ++r) {
    files[static_cast<std::size_t>(r)]->close();
    infos.push_back(read_rank_file(dir.file(str("rank-0000", r, ".h5"))));
  }
  write_virtual_outputs(dir.path(), infos, 40);
  const std::string out = dir.file("outputs.h5");
  const std::vector<std::string> keys = read_sample_keys(out, 0, 40);
  ASSERT_EQ(keys.size(), 40u);
  for (int64_t s = 0; s < 40; ++s) EXPECT_EQ(keys[static_cast<std::size_t>(s)], key_of(s));
  const std::vector<unsigned char> status = read_raw_rows(out, "/sample_status", 0, 40);
  const std::vector<unsigned char> hw = read_raw_rows(out, "/sample_size", 0, 40);
  for (int64_t s = 0; s < 40; ++s) {
    EXPECT_EQ(status[static_cast<std::size_t>(s)], status_of(s));
    EXPECT_EQ(reinterpret_cast<const int32_t*>(hw.data())[2 * s + 1], 200 + s);
  }
  // /bad_samples: every rank file's committed records, by sample index.
  const std::vector<unsigned char> bad = read_raw_rows(out, "/bad_samples", 0, 8);
  const auto want = expected_bad({{0, 40}});
  ASSERT_EQ(bad.size(), want.size() * 208);
  for (std::size_t i = 0; i < want.size(); ++i) {
    int64_t index = 0;
    std::memcpy(&index, bad.data() + i * 208, 8);
    EXPECT_EQ(index, want[i].first);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(bad.data() + i * 208 + 8)), want[i].second);
  }
}

TEST(RowMeta, ResumingWithLongerKeysThanTheFileHoldsIsRefused) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  auto f = open_rank_file(path, specs(), 4, meta_with_rows(), false);
  write_chunk_rows(*f, 0, 0, 4, 4);
  f->close();
  RankFileMeta longer = meta_with_rows();
  longer.key_bytes = kKeyBytes + 1;
  try {
    open_rank_file(path, specs(), 4, longer, true);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stores keys of up to 12 bytes"), std::string::npos) << e.what();
  }
}
