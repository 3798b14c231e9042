// Coverage from the ledgers, and outputs.h5: the virtual datasets that stitch the rank files into
// one array in global sample order.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>

#include "io/rank_file.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

RankFileInfo info_with(std::vector<std::pair<int64_t, int64_t>> chunks) {  // {first_index, count}
  RankFileInfo f;
  int64_t row = 0, id = 0;
  for (auto [first, count] : chunks) {
    f.chunks.push_back(ChunkRecord{id++, first, count, row});
    row += count;
  }
  f.committed_rows = f.file_rows = row;
  return f;
}

const std::vector<DatasetSpec>& vds_specs() {
  static const std::vector<DatasetSpec> specs{{"logits", DType::F32, {2, 3}}, {"argmax", DType::U8, {}}};
  return specs;
}

// Writes the first `written` samples of a job of `total` in commits of 10 over three rank files:
// commit k to rank (k * 5 + k / 3) % 3, each rank's in the order it got them (consecutive commits
// of one rank then make one run).
std::vector<RankFileInfo> write_three_ranks(const std::string& folder, int64_t total, bool compressed,
                                            int64_t written = -1) {
  if (written < 0) written = total;
  std::vector<DatasetSpec> specs = vds_specs();
  if (compressed) specs[0].deflate = 3;
  std::vector<std::unique_ptr<RankFile>> files;
  for (int r = 0; r < 3; ++r) {
    RankFileMeta meta = test_meta(r, 3);
    meta.total_samples = total;
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.h5", r);
    files.push_back(open_rank_file(folder + "/" + name, specs, 4, meta, false));
  }
  for (int64_t k = 0; k * 10 < written; ++k)
    write_chunk(*files[static_cast<std::size_t>((k * 5 + k / 3) % 3)], specs, k, k * 10,
                std::min<int64_t>(10, written - k * 10), 4);
  std::vector<RankFileInfo> infos;
  for (int r = 0; r < 3; ++r) {
    files[static_cast<std::size_t>(r)]->close();
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.h5", r);
    infos.push_back(read_rank_file(folder + "/" + name));
  }
  return infos;
}

// Reads a whole dataset of outputs.h5 through the HDF5 C API into bytes of `mem_type`.
std::vector<unsigned char> read_all(const std::string& path, const char* dataset, hid_t mem_type, std::size_t elems) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  EXPECT_GE(d, 0) << dataset;
  hid_t space = H5Dget_space(d);
  EXPECT_EQ(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)), elems) << dataset;
  std::vector<unsigned char> buf(elems * H5Tget_size(mem_type));
  EXPECT_GE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), 0) << dataset;
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return buf;
}

void expect_outputs_in_global_order(const std::string& outputs_h5, int64_t total) {
  const auto idx = read_all(outputs_h5, "/sample_index", H5T_NATIVE_INT64, static_cast<std::size_t>(total));
  const auto logits = read_all(outputs_h5, "/outputs/logits", H5T_NATIVE_FLOAT, static_cast<std::size_t>(total) * 6);
  const auto argmax = read_all(outputs_h5, "/outputs/argmax", H5T_NATIVE_UINT8, static_cast<std::size_t>(total));
  int64_t bad = 0;
  for (int64_t i = 0; i < total; ++i) {
    bad += reinterpret_cast<const int64_t*>(idx.data())[i] != i;
    for (int64_t j = 0; j < 6; ++j) bad += reinterpret_cast<const float*>(logits.data())[i * 6 + j] != f32_value(i, j);
    bad += argmax[static_cast<std::size_t>(i)] != u8_value(i, 0);
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace

TEST(Coverage, CompleteWhenEveryIndexAppearsOnce) {
  const Coverage c = check_coverage({info_with({{0, 10}, {20, 5}}), info_with({{10, 10}})}, 25);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.present, 25);
  EXPECT_TRUE(c.gaps.empty());
}

TEST(Coverage, ReportsGapsAsInclusiveRanges) {
  const Coverage c = check_coverage({info_with({{10, 10}, {30, 5}}), info_with({{20, 5}})}, 40);
  EXPECT_FALSE(c.complete());
  EXPECT_EQ(c.present, 20);
  ASSERT_EQ(c.gaps.size(), 3u);
  EXPECT_EQ(c.gaps[0], std::make_pair(int64_t{0}, int64_t{9}));
  EXPECT_EQ(c.gaps[1], std::make_pair(int64_t{25}, int64_t{29}));
  EXPECT_EQ(c.gaps[2], std::make_pair(int64_t{35}, int64_t{39}));
}

TEST(Coverage, ReportsDuplicatesAcrossAndWithinFiles) {
  // Chunk [10, 20) in two files (a chunk redone after a crash), and [18, 22) overlapping it.
  const Coverage c = check_coverage({info_with({{0, 10}, {10, 10}}), info_with({{10, 10}, {20, 5}}),
                                     info_with({{18, 4}})}, 25);
  EXPECT_FALSE(c.complete());
  EXPECT_EQ(c.present, 25);
  EXPECT_TRUE(c.gaps.empty());
  EXPECT_EQ(c.duplicate_count, 14);  // 10..19 once more, 18..21 once more
  ASSERT_EQ(c.duplicates.size(), 12u);  // each duplicated index once, in order: 10..21
  for (std::size_t i = 0; i < c.duplicates.size(); ++i) EXPECT_EQ(c.duplicates[i], 10 + static_cast<int64_t>(i));
}

TEST(Coverage, CountsRowsOutsideTheJob) {
  const Coverage c = check_coverage({info_with({{0, 10}, {8, 4}})}, 10);
  EXPECT_EQ(c.out_of_range, 2);
  EXPECT_EQ(c.duplicate_count, 2);
  EXPECT_FALSE(c.complete());
  EXPECT_EQ(check_coverage({}, 5).gaps.size(), 1u);
}

TEST(VirtualOutputs, MapsEveryIndexOntoItsRankFileRow) {
  TempDir dir;
  const int64_t total = 137;  // 14 chunks, the last one 7 samples
  const auto infos = write_three_ranks(dir.path(), total, false);
  ASSERT_TRUE(check_coverage(infos, total).complete());
  write_virtual_outputs(dir.path(), infos, total);
  expect_outputs_in_global_order(dir.file("outputs.h5"), total);

  // One mapping per run of each file (consecutive commits merged), not per commit or row.
  std::size_t runs = 0;
  for (const RankFileInfo& i : infos) runs += merged_runs(i.chunks).size();
  EXPECT_LT(runs, 14u);
  hid_t f = H5Fopen(dir.file("outputs.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/outputs/logits", H5P_DEFAULT);
  hid_t dcpl = H5Dget_create_plist(d);
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_VIRTUAL);
  std::size_t count = 0;
  ASSERT_GE(H5Pget_virtual_count(dcpl, &count), 0);
  EXPECT_EQ(count, runs);
  char name[64] = {0};
  ASSERT_GT(H5Pget_virtual_filename(dcpl, 0, name, sizeof name), 0);
  EXPECT_EQ(std::string(name).find('/'), std::string::npos) << "source names are relative: " << name;
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  // Only outputs.h5 and the rank files: no temp file left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 4);
}

TEST(VirtualOutputs, StillReadsAfterTheFolderMoves) {
  TempDir dir;
  const int64_t total = 60;
  std::filesystem::create_directory(dir.file("run"));
  const auto infos = write_three_ranks(dir.file("run"), total, true);  // compressed: padded rows in the files
  write_virtual_outputs(dir.file("run"), infos, total);
  std::filesystem::rename(dir.file("run"), dir.file("moved"));
  // From another working folder, so the names resolve against outputs.h5's folder, not the cwd.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");
  expect_outputs_in_global_order(dir.file("moved/outputs.h5"), total);
  std::filesystem::current_path(cwd);
}

TEST(VirtualOutputs, RefusesIncompleteCoverageAndLeavesNoFile) {
  TempDir dir;
  const int64_t total = 60;
  const auto infos = write_three_ranks(dir.path(), total, false);
  std::vector<RankFileInfo> two(infos.begin(), infos.begin() + 2);
  EXPECT_THROW(write_virtual_outputs(dir.path(), two, total), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("outputs.h5")));
  std::vector<RankFileInfo> twice = infos;
  twice.push_back(infos[0]);
  EXPECT_THROW(write_virtual_outputs(dir.path(), twice, total), Error);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 3);
}

TEST(VirtualOutputs, ReplacesAnEarlierOutputsFile) {
  TempDir dir;
  auto infos = write_three_ranks(dir.path(), 50, false, 40);
  // Written when 40 samples were committed (as if the job had 40); then a resume commits the rest
  // in rank 1's file, and outputs.h5 is rewritten over the old one.
  write_virtual_outputs(dir.path(), infos, 40);
  RankFileMeta meta = test_meta(1, 3);
  meta.total_samples = 50;
  auto f = open_rank_file(dir.file("rank-00001.h5"), vds_specs(), 4, meta, true);
  write_chunk(*f, vds_specs(), 4, 40, 10, 4);
  f->close();
  infos[1] = read_rank_file(dir.file("rank-00001.h5"));
  write_virtual_outputs(dir.path(), infos, 50);
  expect_outputs_in_global_order(dir.file("outputs.h5"), 50);
}

namespace {

// Adds what the image inputs store beside the outputs to a closed rank file: /sample_status, one
// uint8 row per sample (its index mod 7), and /bad_samples, a list {index, reason} naming the file's
// samples divisible by 13.
void add_row_and_list_datasets(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  // The writer already made (blank) ones: these replace them with known contents.
  for (const char* name : {"/sample_status", "/bad_samples"})
    if (H5Lexists(file, name, H5P_DEFAULT) > 0) H5Ldelete(file, name, H5P_DEFAULT);
  hid_t index = H5Dopen2(file, "/sample_index", H5P_DEFAULT);
  hid_t ispace = H5Dget_space(index);
  hsize_t rows = 0;
  H5Sget_simple_extent_dims(ispace, &rows, nullptr);
  std::vector<int64_t> idx(rows);
  H5Dread(index, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, idx.data());
  std::vector<uint8_t> status(rows);
  struct Bad {
    int64_t index;
    char reason[16];
  };
  std::vector<Bad> bad;
  for (hsize_t r = 0; r < rows; ++r) {
    status[r] = static_cast<uint8_t>(idx[r] < 0 ? 255 : idx[r] % 7);
    if (idx[r] >= 0 && idx[r] % 13 == 0) {
      Bad b{idx[r], {0}};
      std::snprintf(b.reason, sizeof b.reason, "bad %lld", static_cast<long long>(idx[r]));
      bad.push_back(b);
    }
  }
  const hsize_t unlimited = H5S_UNLIMITED, chunk = 4, nbad = bad.size();
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  hid_t space = H5Screate_simple(1, &rows, &unlimited);
  hid_t d = H5Dcreate2(file, "/sample_status", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, status.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, 16);
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(Bad));
  H5Tinsert(t, "index", offsetof(Bad, index), H5T_NATIVE_INT64);
  H5Tinsert(t, "reason", offsetof(Bad, reason), str);
  space = H5Screate_simple(1, &nbad, &unlimited);
  d = H5Dcreate2(file, "/bad_samples", t, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (nbad > 0) EXPECT_GE(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Tclose(t);
  H5Tclose(str);
  H5Pclose(dcpl);
  H5Sclose(ispace);
  H5Dclose(index);
  H5Fclose(file);
}

}  // namespace

// outputs.h5 maps every dataset with one row per sample, whatever its name (so the per-row data of
// image inputs needs no code here), and copies the bad-sample list in sample order.
TEST(VirtualOutputs, MapsEveryRowDatasetAndCopiesTheBadSampleList) {
  TempDir dir;
  const int64_t total = 137;
  auto infos = write_three_ranks(dir.path(), total, true);  // compressed: padding rows (index -1)
  for (RankFileInfo& info : infos) {
    add_row_and_list_datasets(info.path);
    info = read_rank_file(info.path);
    EXPECT_EQ(info.row_datasets, (std::vector<std::string>{"/outputs/logits", "/outputs/argmax", "/sample_index",
                                                            "/sample_status"}));
  }
  write_virtual_outputs(dir.path(), infos, total);
  expect_outputs_in_global_order(dir.file("outputs.h5"), total);
  const auto status = read_all(dir.file("outputs.h5"), "/sample_status", H5T_NATIVE_UINT8, total);
  for (int64_t i = 0; i < total; ++i) EXPECT_EQ(status[static_cast<std::size_t>(i)], i % 7) << "sample " << i;

  hid_t f = H5Fopen(dir.file("outputs.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/bad_samples", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t t = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(t, "index", 0, H5T_NATIVE_INT64);
  std::vector<int64_t> got((total + 12) / 13);
  hid_t space = H5Dget_space(d);
  EXPECT_EQ(H5Sget_simple_extent_npoints(space), static_cast<hssize_t>(got.size()));
  EXPECT_GE(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], static_cast<int64_t>(k) * 13);
  H5Sclose(space);
  H5Tclose(t);
  H5Dclose(d);
  H5Fclose(f);
}
