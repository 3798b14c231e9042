// The job's outputs as one array: OUTDIR/outputs.h5 holds one HDF5 virtual dataset per output
// [N, ...] (and /sample_index [N]) in global sample order, each committed chunk of each rank file
// mapped as one contiguous block of rows; the per-row data (keys, status, sizes) likewise, and the
// bad-sample list copied.  Source files are named relative to OUTDIR, which HDF5
// resolves against the folder of outputs.h5, so the folder can be moved or copied as a whole.
// Coverage (every index in [0, N) exactly once) comes from the ledgers alone.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/rank_file_format.h"
#include "sluice/version.h"

namespace sluice {

namespace {

constexpr std::size_t kMaxListedDuplicates = 32;

struct Block {
  int64_t first, count;
  std::size_t file;
  int64_t first_row;
};

std::vector<Block> all_blocks(const std::vector<RankFileInfo>& files) {
  std::vector<Block> blocks;
  for (std::size_t f = 0; f < files.size(); ++f)
    for (const ChunkRecord& c : files[f].chunks) blocks.push_back({c.first_index, c.count, f, c.first_row});
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    return a.first != b.first ? a.first < b.first : a.file < b.file;
  });
  return blocks;
}

std::string coverage_text(const Coverage& c) {
  std::string s = str(c.present, " of ", c.total, " samples present");
  if (!c.gaps.empty()) s += str(", first gap [", c.gaps.front().first, ", ", c.gaps.front().second, "]");
  if (c.duplicate_count > 0) s += str(", ", c.duplicate_count, " duplicate rows (first: ", c.duplicates.front(), ")");
  if (c.out_of_range > 0) s += str(", ", c.out_of_range, " rows outside [0, ", c.total, ")");
  return s;
}

bool same_layout(const DatasetSpec& a, const DatasetSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.row_shape == b.row_shape;
}

// Adds one virtual dataset `name` [N, row...] mapping every block onto `source` in its rank file.
void add_virtual(hid_t out, const std::string& name, const std::string& source, hid_t type, const Shape& row_shape,
                 const void* fill, hid_t fill_type, const std::vector<Block>& blocks,
                 const std::vector<RankFileInfo>& files, const std::vector<std::string>& rel_names, int64_t total) {
  std::vector<hsize_t> dims{static_cast<hsize_t>(total)};
  for (int64_t d : row_shape) dims.push_back(static_cast<hsize_t>(d));
  h5::Space vspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
  h5::Plist dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  if (fill) H5_CHECK(H5Pset_fill_value(dcpl, fill_type, fill));

  std::vector<hsize_t> start(dims.size(), 0), count = dims, src_dims = dims;
  for (const Block& b : blocks) {
    start[0] = static_cast<hsize_t>(b.first);
    count[0] = static_cast<hsize_t>(b.count);
    H5_CHECK(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    src_dims[0] = static_cast<hsize_t>(std::max(files[b.file].file_rows, b.first_row + b.count));
    h5::Space sspace(H5_CHECK(H5Screate_simple(static_cast<int>(src_dims.size()), src_dims.data(), nullptr)));
    start[0] = static_cast<hsize_t>(b.first_row);
    H5_CHECK(H5Sselect_hyperslab(sspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    H5_CHECK(H5Pset_virtual(dcpl, vspace, rel_names[b.file].c_str(), source.c_str(), sspace));
  }
  H5_CHECK(H5Sselect_all(vspace));
  h5::Dataset d(H5_CHECK(H5Dcreate2(out, name.c_str(), type, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  d.close();
}

// The per-row data (RowMeta): /sample_key, /sample_status, /sample_size mapped like /sample_index
// where every rank file has them, and the committed bad samples of all files copied into
// /bad_samples, by sample index (a short list: it is read whole).
void add_row_data(hid_t out, const std::vector<RankFileInfo>& files, const std::vector<Block>& blocks,
                  const std::vector<std::string>& rel_names, int64_t total) {
  auto every = [&](auto has) { return std::all_of(files.begin(), files.end(), has); };
  if (every([](const RankFileInfo& f) { return f.key_bytes > 0; })) {
    std::size_t width = 0;
    for (const RankFileInfo& f : files) width = std::max(width, f.key_bytes);
    h5::Type t = rankfile::key_type(width);
    add_virtual(out, rankfile::kSampleKey, rankfile::kSampleKey, t, {}, nullptr, H5I_INVALID_HID, blocks, files,
                rel_names, total);
  }
  if (every([](const RankFileInfo& f) { return f.has_status; }))
    add_virtual(out, rankfile::kSampleStatus, rankfile::kSampleStatus, H5T_STD_U8LE, {}, nullptr, H5I_INVALID_HID, blocks,
                files, rel_names, total);
  if (every([](const RankFileInfo& f) { return f.has_sizes; }))
    add_virtual(out, rankfile::kSampleSize, rankfile::kSampleSize, H5T_STD_I32LE, {2}, nullptr, H5I_INVALID_HID, blocks,
                files, rel_names, total);

  std::vector<rankfile::BadRecord> bad;
  for (const RankFileInfo& f : files)
    for (const auto& [index, reason] : read_bad_samples(f)) {
      rankfile::BadRecord r;
      r.index = index;
      std::memcpy(r.reason, reason.data(), std::min(reason.size(), rankfile::kReasonWidth));
      bad.push_back(r);
    }
  std::sort(bad.begin(), bad.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  hsize_t n = bad.size();
  h5::Space space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::Type type = rankfile::bad_file_type();
  h5::Dataset d(H5_CHECK(H5Dcreate2(out, rankfile::kBadSamples, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0) {
    h5::Type mem = rankfile::bad_memory_type();
    H5_CHECK(H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad.data()));
  }
  d.close();
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

Coverage check_coverage(const std::vector<RankFileInfo>& files, int64_t total_samples) {
  Coverage c;
  c.total = total_samples;
  int64_t next = 0;  // every index below `next` has been seen
  std::vector<std::pair<int64_t, int64_t>> dup_ranges;  // [first, end) seen again
  for (const Block& b : all_blocks(files)) {
    int64_t lo = b.first, hi = b.first + b.count;  // [lo, hi)
    if (lo < 0) { c.out_of_range += std::min(hi, int64_t{0}) - lo; lo = 0; }
    if (hi > total_samples) { c.out_of_range += hi - std::max(lo, total_samples); hi = total_samples; }
    if (lo >= hi) continue;
    if (lo > next) c.gaps.emplace_back(next, lo - 1);
    const int64_t dup_end = std::min(hi, next);
    if (dup_end > lo) {
      c.duplicate_count += dup_end - lo;
      dup_ranges.emplace_back(lo, dup_end);
    }
    c.present += hi - std::max(lo, next);
    next = std::max(next, hi);
  }
  if (next < total_samples) c.gaps.emplace_back(next, total_samples - 1);
  // The first few duplicated indices, each once, in order.
  std::sort(dup_ranges.begin(), dup_ranges.end());
  int64_t listed_to = std::numeric_limits<int64_t>::min();
  for (const auto& [lo, hi] : dup_ranges)
    for (int64_t i = std::max(lo, listed_to); i < hi && c.duplicates.size() < kMaxListedDuplicates; ++i) {
      c.duplicates.push_back(i);
      listed_to = i + 1;
    }
  return c;
}

void write_virtual_outputs(const std::string& outdir, const std::vector<RankFileInfo>& files, int64_t total_samples) {
  h5::quiet_errors();
  if (files.empty()) throw InputError(str("outputs.h5 in ", outdir, ": no rank files to map"));
  const Coverage cov = check_coverage(files, total_samples);
  if (!cov.complete()) SLUICE_THROW("outputs.h5 in ", outdir, ": the rank files do not cover the job: ", coverage_text(cov));
  const std::vector<DatasetSpec>& specs = files.front().datasets;
  for (const RankFileInfo& f : files) {
    bool same = f.datasets.size() == specs.size();
    for (std::size_t i = 0; same && i < specs.size(); ++i) same = same_layout(f.datasets[i], specs[i]);
    if (!same)
      throw InputError(str("outputs.h5 in ", outdir, ": ", f.path, " holds other outputs than ", files.front().path));
  }

  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(outdir).lexically_normal();
  std::vector<std::string> rel_names;
  for (const RankFileInfo& f : files) {
    const fs::path rel = fs::absolute(f.path).lexically_normal().lexically_relative(dir);
    SLUICE_CHECK(!rel.empty(), "cannot name ", f.path, " relative to ", outdir);
    rel_names.push_back(rel.string());
  }
  const std::vector<Block> blocks = all_blocks(files);
  const std::string final_path = (dir / "outputs.h5").string();
  const std::string tmp = (dir / str(".outputs.h5.", ::getpid(), ".tmp")).string();
  std::error_code ec;
  fs::remove(tmp, ec);
  try {
    h5::Plist fapl = h5::file_access();
    h5::File out(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl));
    if (!out.valid()) throw InputError(str("outputs.h5 in ", outdir, ": cannot create ", tmp, ": ", h5::error_stack_text()));
    h5::write_attr(out, "total_samples", total_samples);
    h5::write_attr(out, "rank_files", static_cast<int64_t>(files.size()));
    h5::write_attr(out, rankfile::attr::kVersion, std::string(SLUICE_VERSION));
    h5::write_attr(out, rankfile::attr::kGitCommit, std::string(SLUICE_GIT_COMMIT));
    h5::Group g(H5_CHECK(H5Gcreate2(out, rankfile::kOutputsGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    g.close();
    for (const DatasetSpec& s : specs) {
      const std::string name = str(rankfile::kOutputsGroup, "/", s.name);
      h5::Type type = h5::file_type(s.dtype);
      add_virtual(out, name, name, type, s.row_shape, nullptr, H5I_INVALID_HID, blocks, files, rel_names, total_samples);
      h5::Dataset d(H5_CHECK(H5Dopen2(out, name.c_str(), H5P_DEFAULT)));
      h5::write_attr(d, rankfile::attr::kDtype, std::string(dtype_name(s.dtype)));
    }
    const int64_t no_sample = -1;
    add_virtual(out, rankfile::kSampleIndex, rankfile::kSampleIndex, H5T_STD_I64LE, {}, &no_sample, H5T_NATIVE_INT64,
                blocks, files, rel_names, total_samples);
    add_row_data(out, files, blocks, rel_names, total_samples);
    out.close();
    fsync_path(tmp, false);
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
      SLUICE_THROW("outputs.h5 in ", outdir, ": cannot rename ", tmp, ": ", std::strerror(errno));
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(dir.string(), true);
}

}  // namespace sluice
