// The job's outputs as one array: OUTDIR/outputs.h5 holds one HDF5 virtual dataset [N, ...] per
// row dataset of the rank files (every output, /sample_index, and whatever other per-row dataset
// the files hold) in global sample order.  Each run of a rank file (consecutive commits that
// continue each other in samples and rows, merged_runs) is one mapping, so a job whose ranks each
// worked through a few long ranges has a few mappings per rank, however many commits it made: a
// reader's open time and memory grow with the mappings (about 25 KB each in HDF5), not with N.
// A list dataset (/bad_samples) is copied, its committed entries in sample order.  Source files are
// named relative to OUTDIR, which HDF5 resolves against the folder of outputs.h5, so the folder can
// be moved or copied as a whole.  Coverage (every index in [0, N) exactly once) comes from the
// ledgers alone.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/ranges.h"
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
    for (const ChunkRecord& c : merged_runs(files[f].chunks))
      blocks.push_back({c.first_index, c.count, f, c.first_row});
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

// What a virtual dataset copies from its source dataset in the first rank file.
struct Layout {
  h5::Type type;
  Shape row_shape;
  std::vector<unsigned char> fill;  // empty: no fill value of its own
};

Layout layout_of(hid_t file, const std::string& name) {
  h5::Dataset d(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  Layout L;
  L.type = h5::Type(H5_CHECK(H5Dget_type(d)));
  const std::vector<hsize_t> dims = h5::dims_of(d);
  for (std::size_t i = 1; i < dims.size(); ++i) L.row_shape.push_back(static_cast<int64_t>(dims[i]));
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(d)));
  H5D_fill_value_t defined = H5D_FILL_VALUE_UNDEFINED;
  H5_CHECK(H5Pfill_value_defined(dcpl, &defined));
  if (defined == H5D_FILL_VALUE_USER_DEFINED) {
    L.fill.resize(H5Tget_size(L.type));
    H5_CHECK(H5Pget_fill_value(dcpl, L.type, L.fill.data()));
  }
  return L;
}

// Adds one virtual dataset `name` [N, row...] mapping every block onto `name` in its rank file.
void add_virtual(hid_t out, const std::string& name, const Layout& L, const std::vector<Block>& blocks,
                 const std::vector<RankFileInfo>& files, const std::vector<std::string>& rel_names, int64_t total) {
  std::vector<hsize_t> dims{static_cast<hsize_t>(total)};
  for (int64_t d : L.row_shape) dims.push_back(static_cast<hsize_t>(d));
  h5::Space vspace(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
  h5::Plist dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  if (!L.fill.empty()) H5_CHECK(H5Pset_fill_value(dcpl, L.type, L.fill.data()));

  std::vector<hsize_t> start(dims.size(), 0), count = dims, src_dims = dims;
  for (const Block& b : blocks) {
    start[0] = static_cast<hsize_t>(b.first);
    count[0] = static_cast<hsize_t>(b.count);
    H5_CHECK(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    src_dims[0] = static_cast<hsize_t>(std::max(files[b.file].file_rows, b.first_row + b.count));
    h5::Space sspace(H5_CHECK(H5Screate_simple(static_cast<int>(src_dims.size()), src_dims.data(), nullptr)));
    start[0] = static_cast<hsize_t>(b.first_row);
    H5_CHECK(H5Sselect_hyperslab(sspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    H5_CHECK(H5Pset_virtual(dcpl, vspace, rel_names[b.file].c_str(), name.c_str(), sspace));
  }
  H5_CHECK(H5Sselect_all(vspace));
  h5::Dataset d(H5_CHECK(H5Dcreate2(out, name.c_str(), L.type, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  d.close();
}

// The committed entries of every file's list dataset `name` (compound with an int64 "index"), in
// sample order, copied into `out`.  Only files that have one are opened.
void copy_list(hid_t out, const std::string& name, const std::vector<RankFileInfo>& files) {
  h5::Type type;
  std::size_t size = 0, offset = 0;
  std::vector<std::pair<int64_t, std::vector<unsigned char>>> entries;
  for (const RankFileInfo& f : files) {
    rankfile::ReadHandle h = rankfile::open_for_reading(f.path);
    if (!h5::exists(h.file, name)) continue;
    h5::Dataset d(H5_CHECK(H5Dopen2(h.file, name.c_str(), H5P_DEFAULT)));
    if (!type.valid()) {
      type = h5::Type(H5_CHECK(H5Dget_type(d)));
      size = H5Tget_size(type);
      const int member = H5Tget_member_index(type, "index");
      if (member < 0) SLUICE_THROW(f.path, ": ", name, " has no 'index' member");
      offset = H5Tget_member_offset(type, static_cast<unsigned>(member));
    }
    const int64_t n = static_cast<int64_t>(h5::dims_of(d).at(0));
    std::vector<unsigned char> all(static_cast<std::size_t>(n) * size);
    if (n > 0) H5_CHECK(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()));
    std::vector<Range> held;
    for (const ChunkRecord& c : merged_runs(f.chunks)) held.push_back({c.first_index, c.first_index + c.count});
    held = merge_ranges(std::move(held));
    for (int64_t k = 0; k < n; ++k) {
      const unsigned char* e = all.data() + static_cast<std::size_t>(k) * size;
      int64_t index = 0;
      std::memcpy(&index, e + offset, sizeof index);
      const auto it =
          std::upper_bound(held.begin(), held.end(), index, [](int64_t v, const Range& r) { return v < r.end; });
      if (it != held.end() && it->first <= index) entries.emplace_back(index, std::vector<unsigned char>(e, e + size));
    }
  }
  if (!type.valid()) return;
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<unsigned char> buf;
  for (const auto& e : entries) buf.insert(buf.end(), e.second.begin(), e.second.end());
  const hsize_t n = entries.size();
  h5::Space space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  h5::Dataset d(H5_CHECK(H5Dcreate2(out, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0) H5_CHECK(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()));
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
    c.present += std::max<int64_t>(0, hi - std::max(lo, next));  // a block inside one seen adds none
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
    bool same = f.datasets.size() == specs.size() && f.row_datasets == files.front().row_datasets;
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
    if (!out.valid()) {
      const std::string error = h5::error_stack_text();
      throw InputError(str("outputs.h5 in ", outdir, ": cannot create ", tmp, ": ", error), h5::lock_refusal_hint(error));
    }
    h5::write_attr(out, "total_samples", total_samples);
    h5::write_attr(out, "rank_files", static_cast<int64_t>(files.size()));
    h5::write_attr(out, rankfile::attr::kVersion, std::string(SLUICE_VERSION));
    h5::write_attr(out, rankfile::attr::kGitCommit, std::string(SLUICE_GIT_COMMIT));
    h5::Group g(H5_CHECK(H5Gcreate2(out, rankfile::kOutputsGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    g.close();
    rankfile::ReadHandle first = rankfile::open_for_reading(files.front().path);
    for (const std::string& name : files.front().row_datasets) {
      add_virtual(out, name, layout_of(first.file, name), blocks, files, rel_names, total_samples);
      h5::Dataset src(H5_CHECK(H5Dopen2(first.file, name.c_str(), H5P_DEFAULT)));
      h5::Dataset d(H5_CHECK(H5Dopen2(out, name.c_str(), H5P_DEFAULT)));
      h5::copy_attrs(src, d);  // e.g. sluice_dtype on the outputs
    }
    first.file.close();
    copy_list(out, rankfile::kBadSamples, files);
    h5::write_attr(out, "mappings", static_cast<int64_t>(blocks.size()));
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
