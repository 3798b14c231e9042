// Recovery of a rank file whose writer was killed: copy what the ledger says was committed into a
// fresh file next to it, then rename that over the original.  The copy is built under
// "<path>.recovering" and fsync'ed before the rename, so at every moment `path` names either the
// crashed file (still readable as a SWMR reader) or the complete recovered one; a recovery that is
// itself killed just runs again.  The writer must be dead: a live one would go on writing to the
// replaced file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "io/rank_file_format.h"

namespace sluice {
namespace rankfile {

namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Creates dataset `name` in `dst` like `src` (type, chunking, filters, fill value, attributes) but
// with `rows` rows, and copies rows [0, rows) in blocks of whole chunks.
void copy_rows(hid_t src_file, hid_t dst_file, const std::string& name, int64_t rows) {
  h5::Dataset src(H5_CHECK(H5Dopen2(src_file, name.c_str(), H5P_DEFAULT)));
  h5::Type type(H5_CHECK(H5Dget_type(src)));
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(src)));
  std::vector<hsize_t> dims = h5::dims_of(src);
  SLUICE_CHECK(!dims.empty() && static_cast<int64_t>(dims[0]) >= rows, "rank file dataset ", name, " has fewer than ",
               rows, " rows");
  std::vector<hsize_t> maxdims = dims;
  maxdims[0] = H5S_UNLIMITED;
  dims[0] = static_cast<hsize_t>(rows);
  h5::Space space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data())));
  h5::Dataset dst(H5_CHECK(H5Dcreate2(dst_file, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  h5::copy_attrs(src, dst);

  const std::vector<hsize_t> row_dims(dims.begin() + 1, dims.end());
  std::size_t row_bytes = H5Tget_size(type);
  for (hsize_t d : row_dims) row_bytes *= d;
  std::vector<hsize_t> chunk(dims.size());
  H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(chunk[0]));
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((64u << 20) / std::max<std::size_t>(row_bytes, 1)) /
                                                 chunk_rows) * chunk_rows;
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(block, std::max<int64_t>(rows, 1))) * row_bytes);
  for (int64_t first = 0; first < rows; first += block) {
    const int64_t n = std::min(block, rows - first);
    h5::Space mspace = h5::row_block_space(n, row_dims);
    h5::Space sspace = h5::select_rows(src, first, n);
    h5::Space dspace = h5::select_rows(dst, first, n);
    H5_CHECK(H5Dread(src, type, mspace, sspace, H5P_DEFAULT, buf.data()));
    H5_CHECK(H5Dwrite(dst, type, mspace, dspace, H5P_DEFAULT, buf.data()));
  }
  dst.close();
}

void write_recovered(hid_t src, const RankFileInfo& info, const std::string& tmp) {
  h5::Plist fapl = h5::file_access();
  h5::File dst(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl));
  if (!dst.valid()) SLUICE_THROW("rank file ", info.path, ": cannot create ", tmp, " to recover it: ", h5::error_stack_text());
  h5::copy_attrs(src, dst);

  h5::Plist gcpl(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)));
  H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  h5::Group outputs(H5_CHECK(H5Gcreate2(dst, kOutputsGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT)));
  outputs.close();
  for (const DatasetSpec& s : info.datasets) copy_rows(src, dst, str(kOutputsGroup, "/", s.name), info.committed_rows);
  copy_rows(src, dst, kSampleIndex, info.committed_rows);
  for (const char* name : {kSampleKey, kSampleStatus, kSampleSize})
    if (h5::exists(src, name)) copy_rows(src, dst, name, info.committed_rows);
  copy_bad_samples(src, dst, scan_bad_samples(src, info.chunks).committed);

  // The ledger: exactly the valid records (the source may hold a blank or torn slot after them).
  h5::Dataset ledger(H5_CHECK(H5Dopen2(src, kLedger, H5P_DEFAULT)));
  h5::Type type(H5_CHECK(H5Dget_type(ledger)));
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(ledger)));
  hsize_t n = info.chunks.size(), unlimited = H5S_UNLIMITED;
  h5::Space space(H5_CHECK(H5Screate_simple(1, &n, &unlimited)));
  h5::Dataset out(H5_CHECK(H5Dcreate2(dst, kLedger, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (n > 0) {
    h5::Type mem = ledger_memory_type();
    H5_CHECK(H5Dwrite(out, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, info.chunks.data()));
  }
  out.close();
  dst.close();
}

}  // namespace

// Returns whether it had anything to do.
bool recover_if_needed(const std::string& path) {
  ReadHandle h = open_for_reading(path);
  if (h.clean) return false;
  const RankFileInfo info = read_info(h.file, path, /*verify_index=*/true);
  const std::string tmp = path + ".recovering";
  std::error_code ec;
  std::filesystem::remove(tmp, ec);  // left by a recovery that was itself killed
  try {
    write_recovered(h.file, info, tmp);
    h.file.close();
    fsync_path(tmp, false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      SLUICE_THROW("rank file ", path, ": cannot replace it with its recovered copy: ", std::strerror(errno));
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  fsync_path(std::filesystem::absolute(path).parent_path().string(), true);
  log_info("rank file ", path, ": recovered ", info.chunks.size(), " committed chunks (", info.committed_rows,
           " rows); dropped ", info.file_rows - info.committed_rows, " uncommitted rows");
  return true;
}

}  // namespace rankfile

void recover_rank_file(const std::string& path) {
  h5::quiet_errors();
  rankfile::recover_if_needed(path);
}

}  // namespace sluice
