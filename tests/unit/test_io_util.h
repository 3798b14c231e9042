#pragma once
// Shared by the test_io_*.cpp files: a temporary folder, deterministic row values, and a small
// writer that appends chunks batch by batch the way the pipeline's writer thread does.
#include <hdf5.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/rank_file.h"

namespace sluice::testing {

// The message of the InputError `fn` throws ("no error" when it throws none).
template <typename Fn>
std::string input_error_of(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an InputError: ") + e.what();
  }
  return "no error";
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-io-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void set(std::string p) { path_ = std::move(p); }  // after the folder was moved

 private:
  std::string path_;
};

// Every output's bytes depend only on (sample, element), so any row can be checked wherever it is.
inline float f32_value(int64_t sample, int64_t j) { return static_cast<float>(sample * 64 + j) * 0.5f; }
inline uint8_t u8_value(int64_t sample, int64_t j) { return static_cast<uint8_t>((sample * 7 + j * 3) & 0xff); }

// Fills `rows` rows of `spec` for samples first..first+rows-1.
inline std::vector<unsigned char> make_rows(const DatasetSpec& spec, int64_t first, int64_t rows) {
  const int64_t n = shape_numel(spec.row_shape);
  std::vector<unsigned char> buf(static_cast<std::size_t>(rows) * spec.row_bytes());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const std::size_t k = static_cast<std::size_t>(r * n + j);
      switch (spec.dtype) {
        case DType::F32: reinterpret_cast<float*>(buf.data())[k] = f32_value(first + r, j); break;
        case DType::U8: buf[k] = u8_value(first + r, j); break;
        case DType::F16: reinterpret_cast<uint16_t*>(buf.data())[k] = f32_to_f16(f32_value(first + r, j)); break;
        case DType::I32: reinterpret_cast<int32_t*>(buf.data())[k] = static_cast<int32_t>(first + r + j); break;
        default: ADD_FAILURE() << "make_rows: no values for " << dtype_name(spec.dtype);
      }
    }
  return buf;
}

// Appends samples [first, first + count) in batches of `batch` rows (each with `meta`, when given:
// per-row data of `batch` rows), then commits them as `chunk_id`.
inline void write_chunk(RankFile& f, const std::vector<DatasetSpec>& specs, int64_t chunk_id, int64_t first,
                        int64_t count, int64_t batch, bool commit = true, const RowMeta* meta = nullptr) {
  for (int64_t b = first; b < first + count; b += batch) {
    const int64_t rows = std::min(batch, first + count - b);
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<const void*> ptrs;
    for (const DatasetSpec& s : specs) bufs.push_back(make_rows(s, b, rows));
    for (const auto& b2 : bufs) ptrs.push_back(b2.data());
    std::vector<int64_t> idx(static_cast<std::size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) idx[static_cast<std::size_t>(i)] = b + i;
    RowBatch rb;
    rb.rows = rows;
    rb.sample_index = idx.data();
    rb.data = ptrs;
    if (meta) rb.meta = *meta;
    f.append(rb);
  }
  if (commit) f.commit(ChunkRecord{chunk_id, first, count, -1});
}

// Reads rows [first_row, first_row + rows) of `dataset` in `path` with the HDF5 C API (SWMR reader
// when the file is not closed), as raw bytes of the stored type.
inline std::vector<unsigned char> read_raw_rows(const std::string& path, const std::string& dataset, int64_t first_row,
                                                int64_t rows) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (f < 0) f = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
  H5Pclose(fapl);
  std::vector<unsigned char> out;
  if (f < 0) {
    ADD_FAILURE() << "cannot open " << path;
    return out;
  }
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << dataset;
  hid_t type = H5Dget_type(d);
  hid_t space = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(first_row);
  count[0] = static_cast<hsize_t>(rows);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  hid_t mspace = H5Screate_simple(rank, count.data(), nullptr);
  std::size_t bytes = H5Tget_size(type);
  for (hsize_t c : count) bytes *= c;
  out.resize(bytes);
  EXPECT_GE(H5Dread(d, type, mspace, space, H5P_DEFAULT, out.data()), 0) << "reading " << dataset << " of " << path;
  H5Sclose(mspace);
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

// Checks that rows [first_row, +count) of every output hold samples first_index.. and that
// /sample_index says so.  Returns the number of mismatching values.
inline int64_t check_chunk_rows(const std::string& path, const std::vector<DatasetSpec>& specs, const ChunkRecord& c) {
  int64_t bad = 0;
  for (const DatasetSpec& s : specs) {
    const std::vector<unsigned char> got = read_raw_rows(path, "/outputs/" + s.name, c.first_row, c.count);
    const std::vector<unsigned char> want = make_rows(s, c.first_index, c.count);
    if (got.size() != want.size()) return c.count;
    for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  }
  const std::vector<unsigned char> idx = read_raw_rows(path, "/sample_index", c.first_row, c.count);
  for (int64_t i = 0; i < c.count && idx.size() == static_cast<std::size_t>(c.count) * 8; ++i)
    bad += reinterpret_cast<const int64_t*>(idx.data())[i] != c.first_index + i;
  return bad;
}

inline RankFileMeta test_meta(int rank = 0, int world = 1) {
  RankFileMeta m;
  m.job_text = "name = \"io-test\"\nbatch-size = 4\n";
  m.model_path = "jobs/models/quickstart.onnx";
  m.model_sha256 = std::string(64, 'a');
  m.rank = rank;
  m.world_size = world;
  m.host = "testhost";
  m.device = "cpu";
  m.total_samples = 1000;
  m.chunk_samples = 10;
  m.start_time = 1700000000.25;
  return m;
}

// Reads every dataset of a closed rank file whole (the per-row ones too, which the row checks
// above do not look at); "" when all read, else the first that does not.
inline std::string every_row_reads(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return "cannot open " + path;
  std::string failed;
  for (const char* name : {"/outputs/logits", "/outputs/argmax", "/outputs/half", "/sample_index", "/sample_status",
                           "/sample_key", "/sample_size", "/ledger", "/bad_samples"}) {
    if (!failed.empty() || H5Lexists(f, "/outputs", H5P_DEFAULT) <= 0) break;
    const std::string n = name;
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) continue;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t type = H5Dget_type(d);
    hid_t space = H5Dget_space(d);
    std::vector<unsigned char> buf(H5Tget_size(type) * static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)) + 1);
    if (H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) failed = n + " does not read";
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
  }
  H5Fclose(f);
  return failed;
}

// SLUICE_CRASH_TRIALS raises a kill trial's count (soak runs under load); the default keeps the
// suite quick.
inline int trial_count(int fallback) {
  const char* v = std::getenv("SLUICE_CRASH_TRIALS");
  const int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : fallback;
}

// With SLUICE_CRASH_KEEP=<folder>, a failed trial's file as the kill left it (before recovery) is
// copied there, to replay the recovery and the resume by hand.
inline void keep_killed_file(const std::string& killed, const std::string& name) {
  const char* keep = std::getenv("SLUICE_CRASH_KEEP");
  if (!keep || !*keep || !std::filesystem::exists(killed)) return;
  std::error_code ec;
  std::filesystem::create_directories(keep, ec);
  const std::string to = std::string(keep) + "/" + name;
  std::filesystem::copy_file(killed, to, std::filesystem::copy_options::overwrite_existing, ec);
  std::fprintf(stderr, "[ crash trials ] kept the killed file as %s%s\n", to.c_str(), ec ? " (copy failed)" : "");
}

// A copy of a killed trial's file as the kill left it, made before recovery changes the file; kept
// (keep_killed_file) when the trial adds a failure, removed otherwise.
class KilledCopy {
 public:
  KilledCopy(const std::string& path, std::string name) : copy_(path + ".killed"), name_(std::move(name)) {
    std::error_code ec;
    std::filesystem::copy_file(path, copy_, std::filesystem::copy_options::overwrite_existing, ec);
  }
  ~KilledCopy() {
    if (::testing::Test::HasFailure() && !failed_before_) keep_killed_file(copy_, name_);
    std::error_code ec;
    std::filesystem::remove(copy_, ec);
  }
  KilledCopy(const KilledCopy&) = delete;
  KilledCopy& operator=(const KilledCopy&) = delete;

 private:
  std::string copy_, name_;
  bool failed_before_ = ::testing::Test::HasFailure();
};

}  // namespace sluice::testing
