// The per-row datasets of a rank file (RowMeta: /sample_key, /sample_status, /sample_size and the
// /bad_samples list).  They follow the crash-safety scheme at the top of rank_file_writer.cpp
// unchanged: created with the file before SWMR mode starts; each append writes their rows beside
// the outputs' and /sample_index's, so commit()'s first flush puts them on disk before the ledger
// record that names them; they are stored raw (no filter), so a commit sharing an HDF5 chunk with
// an earlier one rewrites the earlier rows with their own bytes; padding rows (compressed files)
// read as the fill values.  /bad_samples grows like the ledger; its committed records are those
// whose sample index lies in a committed chunk, and since records are written in row order they
// are a prefix: a resumed writer blanks the slots after that prefix and appends from there.
#include <algorithm>
#include <cstring>

#include "io/rank_file_format.h"

namespace sluice {
namespace rankfile {

namespace {

void create_dataset(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& row, int64_t chunk,
                    const void* fill, hid_t fill_type) {
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunks{static_cast<hsize_t>(chunk)};
  for (hsize_t d : row) {
    dims.push_back(d);
    maxdims.push_back(d);
    chunks.push_back(d);
  }
  h5::Space space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data())));
  h5::Plist dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunks.size()), chunks.data()));
  if (fill) H5_CHECK(H5Pset_fill_value(dcpl, fill_type, fill));
  h5::Dataset d(H5_CHECK(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  d.close();
}

h5::Dataset open_if(hid_t file, const char* name) {
  if (!h5::exists(file, name)) return h5::Dataset();
  return h5::Dataset(H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
}

BadRecord to_record(int64_t index, const std::string& reason) {
  BadRecord r;
  r.index = index;
  std::memcpy(r.reason, reason.data(), std::min(reason.size(), kReasonWidth));
  return r;
}

}  // namespace

void create_row_datasets(hid_t file, int64_t chunk_rows, const RankFileMeta& meta) {
  if (meta.key_bytes > 0) {
    h5::Type t = key_type(meta.key_bytes);
    create_dataset(file, kSampleKey, t, {}, dataset_chunk_rows(chunk_rows, meta.key_bytes), nullptr, H5I_INVALID_HID);
  }
  create_dataset(file, kSampleStatus, H5T_STD_U8LE, {}, dataset_chunk_rows(chunk_rows, 1), nullptr, H5I_INVALID_HID);
  if (meta.orig_sizes)
    create_dataset(file, kSampleSize, H5T_STD_I32LE, {2}, dataset_chunk_rows(chunk_rows, 8), nullptr, H5I_INVALID_HID);
  h5::Type bad = bad_file_type();
  h5::Type bad_mem = bad_memory_type();
  const BadRecord blank;
  create_dataset(file, kBadSamples, bad, {}, kBadChunk, &blank, bad_mem);
}

void RowDatasets::attach(hid_t file, const RankFileInfo& info, std::size_t key_stride) {
  keys_ = open_if(file, kSampleKey);
  status_ = open_if(file, kSampleStatus);
  sizes_ = open_if(file, kSampleSize);
  bad_ = open_if(file, kBadSamples);
  if (keys_.valid()) {
    h5::Type stored(H5_CHECK(H5Dget_type(keys_)));
    // Keys come key_stride bytes apart in RowMeta::keys (the file's width when none are given).
    key_stride_ = key_stride > 0 ? key_stride : H5Tget_size(stored);
    key_mem_ = key_type(key_stride_);
  }
  if (bad_.valid()) {
    bad_mem_ = bad_memory_type();
    const BadScan scan = scan_bad_samples(file, info.chunks);
    bad_len_ = scan.leading;
    bad_extent_ = scan.extent;
    // Records after the committed prefix belong to rows that were never committed: blank them, so
    // that a chunk this attempt commits never lends them its range.
    const BadRecord blank;
    for (int64_t k = bad_len_; k < bad_extent_; ++k) write_bad(k, &blank, 1);
  }
}

void RowDatasets::grow_to(int64_t rows) {
  const hsize_t n = static_cast<hsize_t>(rows);
  const hsize_t pair[2] = {n, 2};
  if (keys_.valid()) H5_CHECK(H5Dset_extent(keys_, &n));
  if (status_.valid()) H5_CHECK(H5Dset_extent(status_, &n));
  if (sizes_.valid()) H5_CHECK(H5Dset_extent(sizes_, pair));
}

void RowDatasets::write(int64_t row, int64_t rows, const RowMeta& meta) {
  const std::size_t n = static_cast<std::size_t>(rows);
  const std::size_t zero_bytes = std::max({keys_.valid() ? n * key_stride_ : 0, n * 8});
  if (zeros_.size() < zero_bytes) zeros_.assign(zero_bytes, 0);  // grows to one batch's worth, once
  if (keys_.valid()) write_rows(keys_, key_mem_, row, rows, {}, meta.keys ? meta.keys : zeros_.data());
  if (status_.valid())
    write_rows(status_, H5T_NATIVE_UINT8, row, rows, {}, meta.status ? static_cast<const void*>(meta.status) : zeros_.data());
  if (sizes_.valid())
    write_rows(sizes_, H5T_NATIVE_INT32, row, rows, {2}, meta.orig_hw ? static_cast<const void*>(meta.orig_hw) : zeros_.data());
  if (bad_.valid() && meta.bad && !meta.bad->empty()) {
    std::vector<BadRecord> records;
    records.reserve(meta.bad->size());
    for (const auto& [index, reason] : *meta.bad) records.push_back(to_record(index, reason));
    const int64_t count = static_cast<int64_t>(records.size());
    if (bad_len_ + count > bad_extent_) {
      const hsize_t grown = static_cast<hsize_t>(bad_len_ + count);
      H5_CHECK(H5Dset_extent(bad_, &grown));
      bad_extent_ = bad_len_ + count;
    }
    write_bad(bad_len_, records.data(), count);
    bad_len_ += count;
  }
}

void RowDatasets::close() {
  keys_.close();
  status_.close();
  sizes_.close();
  bad_.close();
}

void RowDatasets::write_rows(hid_t d, hid_t mem, int64_t row, int64_t rows, const std::vector<hsize_t>& row_dims,
                             const void* data) {
  h5::Space fspace = h5::select_rows(d, row, rows);
  h5::Space mspace = h5::row_block_space(rows, row_dims);
  H5_CHECK(H5Dwrite(d, mem, mspace, fspace, H5P_DEFAULT, data));
}

void RowDatasets::write_bad(int64_t at, const BadRecord* records, int64_t count) {
  h5::Space fspace = h5::select_rows(bad_, at, count);
  h5::Space mspace = h5::row_block_space(count, {});
  H5_CHECK(H5Dwrite(bad_, bad_mem_, mspace, fspace, H5P_DEFAULT, records));
}

}  // namespace rankfile
}  // namespace sluice
