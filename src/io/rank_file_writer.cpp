// Writing a rank file so that a process killed at ANY moment (kill -9, OOM killer, a node's Slurm
// step torn down) leaves every committed record readable and recoverable.
//
// The scheme:
//  1. Build, then publish.  The whole file is built under "<path>.creating": every dataset (extent
//     0, unlimited, chunked) and every attribute, then H5Fstart_swmr_write(), then a hard link to
//     `path` (which fails rather than replace an existing file) and an unlink of the temp name.
//     `path` therefore never names a half-built file.
//  2. SWMR write mode (HDF5 1.10, latest file format).  In this mode HDF5 writes metadata entries
//     in flush-dependency order (a chunk's index entry before the object header whose extent
//     reaches it, children before parents) and every entry carries a checksum, so the bytes on disk
//     are at each moment a file that a SWMR reader can open.  A killed process stops between two
//     write() calls, which is such a moment; kill -9 loses nothing already handed to the kernel.
//     A resumed file is opened with H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE directly, so a file at
//     `path` is never in non-SWMR write mode.
//  3. Commit order.  append() writes rows into the datasets (raw chunks may wait in the chunk
//     cache).  commit() then (a) H5Fflush: raw chunks, their index entries and the new extents go
//     to the kernel; [fsync]; (b) grows /ledger by one record and writes it; (c) H5Fflush again;
//     [fsync].  A ledger record on disk therefore only ever names rows already on disk.  A kill
//     between the ledger's new extent and its record's bytes leaves a slot that reads as the fill
//     value {-1, -1, 0, -1}; readers stop at the first such record.
//  4. Committed bytes are never rewritten with other content.  Raw chunks are updated in place, so
//     a later commit that shares a chunk with an earlier one rewrites the earlier rows with their
//     own bytes.  Compressed chunks move instead (their size changes), and the space they free may
//     be reused before the index on disk points elsewhere, so with deflate every commit starts on
//     a fresh chunk boundary (the skipped rows are padding: sample index -1, never in the ledger).
//     Chunks encoded by writer threads (BatchEncoder, then append) are whole, fresh chunks:
//     H5Dwrite_chunk stores each one once, at a chunk boundary past every committed row, and it
//     joins the index like a chunk HDF5 compressed itself, so steps 3 and 4 hold unchanged.
//  5. Attributes that change later (attempt, start and end time, host, device, world size) are
//     created up front with fixed-size types, so changing them in SWMR mode rewrites existing bytes.
//  6. Per-row data (keys, status, original sizes, the bad-sample list; rank_file_rows.cpp) is
//     written in the same append as the outputs and follows steps 1 to 4 the same way.
//  Rows past the last ledger record are not output: readers ignore them, recovery drops them.
//  fsync (RankFileMeta::fsync_commits) adds power-loss safety; a killed process does not need it.
//
// Cost of a commit (tests/unit/test_io_rank_file.cpp, CommitCost: outputs of 1000 float32 and 1
// uint8 per row, 32-row commits, ext4 on the build VM's virtual disk): 0.1 ms per commit without
// fsync (the two H5Fflush calls; the rows' own write() calls, 0.1 ms per 128 KB batch, are in
// append), 0.6 to 9 ms with fsync_commits (the VM's disk is shared with other jobs).  Against batches that take tens of milliseconds to compute,
// neither shows; fsync on a network file system can cost far more, which is why it is opt-in.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "io/rank_file_format.h"
#include "sluice/version.h"

namespace sluice {

namespace {

using namespace rankfile;

constexpr std::size_t kNameWidth = 256;  // fixed width of host and device, rewritable on resume

std::string host_name(const std::string& given) {
  if (!given.empty()) return given;
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string clip(const std::string& s, std::size_t width) { return s.size() <= width ? s : s.substr(0, width); }

// Chunk cache big enough for two chunks, so rows of a batch that straddle a chunk boundary do not
// force a read-modify-write; w0 = 1 evicts fully written chunks first.
h5::Plist dataset_access(std::size_t chunk_bytes) {
  h5::Plist dapl(H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)));
  H5_CHECK(H5Pset_chunk_cache(dapl, 521, std::max<std::size_t>(1u << 20, 2 * chunk_bytes), 1.0));
  return dapl;
}

void sync_file(hid_t file, const std::string& path) {
  void* handle = nullptr;
  H5_CHECK(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle));
  const int fd = *static_cast<int*>(handle);
  if (::fsync(fd) != 0) SLUICE_THROW("rank file ", path, ": fsync failed: ", std::strerror(errno));
}

void sync_folder(const std::string& path) {
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void validate_specs(const std::string& path, const std::vector<DatasetSpec>& specs, int64_t chunk_rows) {
  if (specs.empty()) throw InputError(str("rank file ", path, ": no output datasets to write"));
  if (chunk_rows < 1) throw InputError(str("rank file ", path, ": chunk rows must be at least 1, got ", chunk_rows));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const DatasetSpec& s = specs[i];
    if (s.name.empty() || s.name.find('/') != std::string::npos || s.name == "." || s.name == "..")
      throw InputError(str("rank file ", path, ": bad output name '", s.name, "'"));
    for (std::size_t j = 0; j < i; ++j)
      if (specs[j].name == s.name) throw InputError(str("rank file ", path, ": output '", s.name, "' given twice"));
    if (dtype_size(s.dtype) == 0) throw InputError(str("rank file ", path, ": output '", s.name, "' has no storable type"));
    for (int64_t d : s.row_shape)
      if (d < 1) throw InputError(str("rank file ", path, ": output '", s.name, "' has shape ", shape_str(s.row_shape)));
    if (s.deflate < 0 || s.deflate > 9)
      throw InputError(str("rank file ", path, ": output '", s.name, "' deflate level ", s.deflate, " is not 0..9"));
  }
}

// Creates dataset `name` [0, row...] extendible along rows, chunked by `rows_per_chunk` rows.
void create_rows_dataset(hid_t loc, const char* name, hid_t type, const Shape& row_shape, int64_t rows_per_chunk,
                         int deflate, const void* fill, hid_t fill_type) {
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{static_cast<hsize_t>(rows_per_chunk)};
  for (int64_t d : row_shape) {
    dims.push_back(static_cast<hsize_t>(d));
    maxdims.push_back(static_cast<hsize_t>(d));
    chunk.push_back(static_cast<hsize_t>(d));
  }
  h5::Space space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data())));
  h5::Plist dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
  if (deflate > 0) {
    H5_CHECK(H5Pset_shuffle(dcpl));  // byte-shuffling first helps deflate on floats a lot
    H5_CHECK(H5Pset_deflate(dcpl, static_cast<unsigned>(deflate)));
  }
  if (fill) H5_CHECK(H5Pset_fill_value(dcpl, fill_type, fill));
  h5::Dataset d(H5_CHECK(H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  d.close();
}

class Hdf5RankFile final : public RankFile {
 public:
  Hdf5RankFile(std::string path, h5::File file, std::vector<DatasetSpec> specs, bool fsync, std::size_t key_stride)
      : path_(std::move(path)), specs_(std::move(specs)), file_(std::move(file)), fsync_(fsync),
        key_stride_(key_stride) {}

  ~Hdf5RankFile() override {
    // Without close() (an error path) the handles still close, leaving a consistent file whose
    // end_time stays empty: it did not finish.
    datasets_.clear();
    index_.reset();
    ledger_.reset();
    row_data_ = RowDatasets();
  }

  // Opens the datasets and reads where the file stands (a new file: all zero).
  void attach(const RankFileInfo& info, int64_t chunk_rows) {
    align_ = 1;
    for (const DatasetSpec& s : specs_) {
      if (s.deflate > 0) align_ = std::max<int64_t>(chunk_rows, 1);
      const std::string full = str(kOutputsGroup, "/", s.name);
      const int64_t rows = dataset_chunk_rows(chunk_rows, s.row_bytes());
      h5::Plist dapl = dataset_access(static_cast<std::size_t>(rows) * s.row_bytes());
      datasets_.emplace_back(H5_CHECK(H5Dopen2(file_, full.c_str(), dapl)));
      mem_types_.push_back(h5::memory_type(s.dtype));
      row_dims_.emplace_back(s.row_shape.begin(), s.row_shape.end());
      layouts_.push_back(encodable_layout(datasets_.back(), mem_types_.back(), s, rows));
    }
    std::size_t max_rank = 1;
    for (const auto& dims : row_dims_) max_rank = std::max(max_rank, 1 + dims.size());
    chunk_offset_.assign(max_rank, 0);
    h5::Plist dapl = dataset_access(static_cast<std::size_t>(dataset_chunk_rows(chunk_rows, 8)) * 8);
    index_ = h5::Dataset(H5_CHECK(H5Dopen2(file_, kSampleIndex, dapl)));
    ledger_ = h5::Dataset(H5_CHECK(H5Dopen2(file_, kLedger, H5P_DEFAULT)));
    ledger_mem_ = ledger_memory_type();
    row_data_.attach(file_, info, key_stride_);

    committed_ = info.committed_rows;
    ledger_len_ = static_cast<int64_t>(info.chunks.size());
    extent_ = static_cast<int64_t>(h5::dims_of(index_).at(0));
    for (const h5::Dataset& d : datasets_) extent_ = std::max<int64_t>(extent_, static_cast<int64_t>(h5::dims_of(d).at(0)));
    grow_to(extent_, /*force=*/true);
    // A killed attempt may have left ledger slots past the valid records; blank them so that the
    // records written from now on are never followed by a stale one.
    const int64_t slots = static_cast<int64_t>(h5::dims_of(ledger_).at(0));
    for (int64_t k = ledger_len_; k < slots; ++k) write_ledger_slot(k, ledger_fill());
  }

  int64_t append(const RowBatch& batch) override { return write_rows(batch); }

  std::size_t outputs() const override { return layouts_.size(); }

  ChunkLayout chunk_layout(std::size_t output) const override {
    SLUICE_CHECK(output < layouts_.size(), "rank file ", path_, ": no output ", output);
    return layouts_[output];
  }

  void commit(ChunkRecord record) override {
    h5::quiet_errors();
    SLUICE_CHECK(!closed_, "rank file ", path_, ": commit after close");
    SLUICE_CHECK(pending_rows_ > 0, "rank file ", path_, ": commit with no rows appended");
    SLUICE_CHECK(record.count == pending_rows_, "rank file ", path_, ": a commit of ", record.count, " samples but ",
                 pending_rows_, " rows were appended");
    SLUICE_CHECK(record.first_index >= 0, "rank file ", path_, ": a commit starting at sample ", record.first_index);
    record.seq = ledger_len_;
    record.first_row = pending_first_;
    record.time = unix_now();
    // (a) the rows, their chunk index entries and extents reach the kernel first ...
    H5_CHECK(H5Fflush(file_, H5F_SCOPE_LOCAL));
    if (fsync_) sync_file(file_, path_);
    // (b) ... then the record that names them ...
    H5_CHECK(H5Dset_extent(ledger_, std::vector<hsize_t>{static_cast<hsize_t>(ledger_len_ + 1)}.data()));
    write_ledger_slot(ledger_len_, record);
    // (c) ... and that record.
    H5_CHECK(H5Fflush(file_, H5F_SCOPE_LOCAL));
    if (fsync_) sync_file(file_, path_);
    ++ledger_len_;
    committed_ = record.first_row + record.count;
    pending_rows_ = 0;
  }

  int64_t committed_rows() const override { return committed_; }

  void close() override {
    if (closed_) return;
    h5::quiet_errors();
    if (pending_rows_ > 0)
      log_warn("rank file ", path_, ": closing with ", pending_rows_, " uncommitted rows; they are not part of the output");
    const double end = unix_now();
    h5::write_attr(file_, attr::kEndTime, iso8601(end), kTimeWidth);
    h5::write_attr(file_, attr::kEndUnix, end);
    datasets_.clear();
    index_.close();
    ledger_.close();
    row_data_.close();
    file_.close();
    closed_ = true;
  }

 private:
  void grow_to(int64_t rows, bool force) {
    if (rows <= extent_ && !force) return;
    const hsize_t n = static_cast<hsize_t>(rows);
    for (std::size_t i = 0; i < datasets_.size(); ++i) {
      std::vector<hsize_t> dims{n};
      dims.insert(dims.end(), row_dims_[i].begin(), row_dims_[i].end());
      H5_CHECK(H5Dset_extent(datasets_[i], dims.data()));
    }
    H5_CHECK(H5Dset_extent(index_, &n));
    row_data_.grow_to(rows);
    extent_ = rows;
  }

  // Writes rows to every dataset after the pending ones; an output with whole encoded chunks that
  // start on a chunk boundary goes in as those bytes, any other from its raw rows.
  int64_t write_rows(const RowBatch& batch) {
    h5::quiet_errors();  // the writer thread may not be the one that opened the file
    const int64_t rows = batch.rows;
    const std::vector<const void*>& data = batch.data;
    SLUICE_CHECK(!closed_, "rank file ", path_, ": append after close");
    SLUICE_CHECK(rows > 0 && batch.sample_index, "rank file ", path_, ": append of ", rows, " rows");
    SLUICE_CHECK(data.size() == datasets_.size(), "rank file ", path_, ": append got ", data.size(),
                 " buffers for ", datasets_.size(), " outputs");
    SLUICE_CHECK(!batch.encoded || batch.encoded->size() == datasets_.size(), "rank file ", path_, ": append got ",
                 batch.encoded ? batch.encoded->size() : 0, " encoded outputs for ", datasets_.size());
    if (pending_rows_ == 0) pending_first_ = (committed_ + align_ - 1) / align_ * align_;
    const int64_t row = pending_first_ + pending_rows_;
    grow_to(row + rows, false);
    int64_t stored = 0;
    for (std::size_t i = 0; i < datasets_.size(); ++i) {
      const ChunkLayout& L = layouts_[i];
      const EncodedRows* e = batch.encoded ? &(*batch.encoded)[i] : nullptr;
      if (e && e->chunks > 0 && L.deflate > 0 && row % L.rows == 0 && e->chunks * L.rows == rows) {
        SLUICE_CHECK(e->data && e->sizes, "rank file ", path_, ": no encoded bytes for output ", specs_[i].name);
        // Filter mask 0: every filter of the dataset (shuffle, deflate) was applied.
        for (int64_t k = 0; k < e->chunks; ++k) {
          chunk_offset_[0] = static_cast<hsize_t>(row + k * L.rows);
          H5_CHECK(H5Dwrite_chunk(datasets_[i], H5P_DEFAULT, 0, chunk_offset_.data(), e->sizes[k],
                                  e->data + static_cast<std::size_t>(k) * e->stride));
        }
        stored += e->chunks;
        continue;
      }
      SLUICE_CHECK(data[i] != nullptr, "rank file ", path_, ": no data for output ", specs_[i].name);
      h5::Space fspace = h5::select_rows(datasets_[i], row, rows);
      h5::Space mspace = h5::row_block_space(rows, row_dims_[i]);
      H5_CHECK(H5Dwrite(datasets_[i], mem_types_[i], mspace, fspace, H5P_DEFAULT, data[i]));
    }
    h5::Space fspace = h5::select_rows(index_, row, rows);
    h5::Space mspace = h5::row_block_space(rows, {});
    H5_CHECK(H5Dwrite(index_, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, batch.sample_index));
    // The per-row data of these rows, committed with them.
    row_data_.write(row, rows, batch.meta);
    pending_rows_ += rows;
    return stored;
  }

  // Callers may encode a dataset's chunks only when the bytes they hold are the stored bytes (no
  // type conversion) and its filters are the ones ChunkEncoder reproduces: shuffle, then deflate.
  static ChunkLayout encodable_layout(hid_t dataset, hid_t mem_type, const DatasetSpec& spec, int64_t rows) {
    ChunkLayout L;
    L.rows = rows;
    L.row_bytes = spec.row_bytes();
    L.element_bytes = dtype_size(spec.dtype);
    if (spec.deflate <= 0) return L;
    h5::Type stored(H5_CHECK(H5Dget_type(dataset)));
    if (H5_CHECK(H5Tequal(stored, mem_type)) <= 0) return L;
    h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(dataset)));
    if (H5_CHECK(H5Pget_nfilters(dcpl)) != 2) return L;
    unsigned flags = 0, cd[4] = {0, 0, 0, 0}, config = 0;
    std::size_t ncd = 4;
    if (H5_CHECK(H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, nullptr, &config)) != H5Z_FILTER_SHUFFLE) return L;
    if (ncd >= 1 && cd[0] != L.element_bytes) return L;
    ncd = 4;
    if (H5_CHECK(H5Pget_filter2(dcpl, 1, &flags, &ncd, cd, 0, nullptr, &config)) != H5Z_FILTER_DEFLATE) return L;
    L.deflate = ncd >= 1 ? static_cast<int>(cd[0]) : spec.deflate;
    return L;
  }

  void write_ledger_slot(int64_t k, const ChunkRecord& r) {
    h5::Space fspace = h5::select_rows(ledger_, k, 1);
    h5::Space mspace = h5::row_block_space(1, {});
    H5_CHECK(H5Dwrite(ledger_, ledger_mem_, mspace, fspace, H5P_DEFAULT, &r));
  }

  std::string path_;
  std::vector<DatasetSpec> specs_;
  h5::File file_;
  std::vector<h5::Dataset> datasets_;  // declared after file_: closed before it
  std::vector<h5::Type> mem_types_;
  std::vector<std::vector<hsize_t>> row_dims_;
  std::vector<ChunkLayout> layouts_;   // per dataset
  std::vector<hsize_t> chunk_offset_;  // H5Dwrite_chunk's offset, sized once
  h5::Dataset index_, ledger_;
  h5::Type ledger_mem_;
  RowDatasets row_data_;       // keys, status, sizes, bad samples
  bool fsync_ = false;
  std::size_t key_stride_ = 0; // bytes per key in RowMeta::keys
  int64_t align_ = 1;          // a commit's first row is a multiple of this (chunk rows when compressed)
  int64_t extent_ = 0;         // rows the datasets hold now
  int64_t committed_ = 0;      // rows through the last committed record
  int64_t pending_first_ = 0;  // first row of the record being appended
  int64_t pending_rows_ = 0;
  int64_t ledger_len_ = 0;     // valid ledger records
  bool closed_ = false;
};

void write_header(hid_t file, const std::vector<DatasetSpec>& specs, int64_t chunk_rows, const RankFileMeta& meta) {
  const double start = meta.start_time > 0 ? meta.start_time : unix_now();
  h5::write_attr(file, attr::kFormat, kFormatVersion);
  h5::write_attr(file, attr::kVersion, std::string(SLUICE_VERSION));
  h5::write_attr(file, attr::kGitCommit, std::string(SLUICE_GIT_COMMIT));
  h5::write_attr(file, attr::kJob, meta.job_text);
  h5::write_attr(file, attr::kModelPath, meta.model_path);
  h5::write_attr(file, attr::kModelSha256, meta.model_sha256);
  h5::write_attr(file, attr::kInputFingerprint, meta.input_fingerprint);
  h5::write_attr(file, attr::kRank, static_cast<int64_t>(meta.rank));
  h5::write_attr(file, attr::kWorldSize, static_cast<int64_t>(meta.world_size));
  h5::write_attr(file, attr::kHost, clip(host_name(meta.host), kNameWidth), kNameWidth);
  h5::write_attr(file, attr::kDevice, clip(meta.device, kNameWidth), kNameWidth);
  h5::write_attr(file, attr::kTotalSamples, meta.total_samples);
  h5::write_attr(file, attr::kChunkSamples, meta.chunk_samples);
  h5::write_attr(file, attr::kChunkRows, chunk_rows);
  h5::write_attr(file, attr::kCreated, iso8601(start), kTimeWidth);
  h5::write_attr(file, attr::kCreatedUnix, start);
  h5::write_attr(file, attr::kAttempt, static_cast<int64_t>(meta.attempt));
  h5::write_attr(file, attr::kStartTime, iso8601(start), kTimeWidth);
  h5::write_attr(file, attr::kStartUnix, start);
  h5::write_attr(file, attr::kEndTime, std::string(), kTimeWidth);
  h5::write_attr(file, attr::kEndUnix, 0.0);

  h5::Plist gcpl(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)));
  H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  h5::Group outputs(H5_CHECK(H5Gcreate2(file, kOutputsGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT)));
  for (const DatasetSpec& s : specs) {
    h5::Type type = h5::file_type(s.dtype);
    create_rows_dataset(outputs, s.name.c_str(), type, s.row_shape, dataset_chunk_rows(chunk_rows, s.row_bytes()),
                        s.deflate, nullptr, H5I_INVALID_HID);
    h5::Dataset d(H5_CHECK(H5Dopen2(outputs, s.name.c_str(), H5P_DEFAULT)));
    h5::write_attr(d, attr::kDtype, std::string(dtype_name(s.dtype)));
  }
  const int64_t no_sample = -1;
  create_rows_dataset(file, kSampleIndex, H5T_STD_I64LE, {}, dataset_chunk_rows(chunk_rows, 8), 0, &no_sample,
                      H5T_NATIVE_INT64);
  h5::Type ledger_type = ledger_file_type();
  h5::Type ledger_mem = ledger_memory_type();
  const ChunkRecord fill = ledger_fill();
  create_rows_dataset(file, kLedger, ledger_type, {}, kLedgerChunk, 0, &fill, ledger_mem);
  create_row_datasets(file, chunk_rows, meta);
}

std::unique_ptr<RankFile> create_new(const std::string& path, const std::vector<DatasetSpec>& specs,
                                     int64_t chunk_rows, const RankFileMeta& meta) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) throw InputError(str("rank file ", path, " already exists"));
  const std::string tmp = path + ".creating";
  std::filesystem::remove(tmp, ec);  // left by an attempt killed while creating

  h5::Plist fapl = h5::file_access();
  h5::File file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl));
  if (!file.valid()) {
    const std::string error = h5::error_stack_text();
    throw InputError(str("rank file ", path, ": cannot create ", tmp, ": ", error), h5::lock_refusal_hint(error));
  }
  try {
    write_header(file, specs, chunk_rows, meta);
    // Every object exists now; from here on HDF5 keeps the file readable at each moment.
    H5_CHECK(H5Fstart_swmr_write(file));
    if (meta.fsync_commits) sync_file(file, path);
    if (::link(tmp.c_str(), path.c_str()) != 0)
      throw InputError(str("rank file ", path, ": cannot create it: ", std::strerror(errno)));
    ::unlink(tmp.c_str());
    if (meta.fsync_commits) sync_folder(path);
  } catch (...) {
    file.reset();
    std::filesystem::remove(tmp, ec);
    throw;
  }
  auto rf = std::make_unique<Hdf5RankFile>(path, std::move(file), specs, meta.fsync_commits, meta.key_bytes);
  rf->attach(RankFileInfo{}, chunk_rows);
  return rf;
}

std::string spec_text(const DatasetSpec& s) { return str(s.name, " ", dtype_name(s.dtype), shape_str(s.row_shape)); }

// Reopens a recovered file and makes every write and flush a resume does before its first row:
// this attempt's attributes, the extents, the ledger's stale slots blanked, a flush, and every
// chunk index walked.  A file whose metadata fails when written throws here (an Error; an
// InputError is about the job, not the file).
std::unique_ptr<RankFile> reopen(const std::string& path, const std::vector<DatasetSpec>& specs,
                                 const RankFileMeta& meta) {
  h5::Plist fapl = h5::file_access();
  std::string error;
  h5::File file(h5::open_file(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl, error));
  if (!file.valid()) throw InputError(str("rank file ", path, ": cannot reopen it to resume: ", error));
  const RankFileInfo info = read_info(file, path);
  bool same = info.datasets.size() == specs.size();
  for (std::size_t i = 0; same && i < specs.size(); ++i)
    same = info.datasets[i].name == specs[i].name && info.datasets[i].dtype == specs[i].dtype &&
           info.datasets[i].row_shape == specs[i].row_shape;
  if (!same) {
    std::string have, want;
    for (const DatasetSpec& s : info.datasets) have += (have.empty() ? "" : ", ") + spec_text(s);
    for (const DatasetSpec& s : specs) want += (want.empty() ? "" : ", ") + spec_text(s);
    throw InputError(str("rank file ", path, " holds outputs {", have, "} but this job writes {", want,
                         "}: it cannot be resumed"));
  }
  if (info.key_bytes > 0 && meta.key_bytes > info.key_bytes)
    throw InputError(str("rank file ", path, " stores keys of up to ", info.key_bytes, " bytes but this input's keys take ",
                         meta.key_bytes, ": the input changed since the file was written; --overwrite starts afresh"));
  // The deflate levels are the file's: keep them, whatever this attempt asked for.
  std::vector<DatasetSpec> kept = specs;
  for (std::size_t i = 0; i < kept.size(); ++i) kept[i].deflate = info.datasets[i].deflate;

  const double start = meta.start_time > 0 ? meta.start_time : unix_now();
  h5::write_attr(file, attr::kAttempt, static_cast<int64_t>(std::max(meta.attempt, info.attempt + 1)));
  h5::write_attr(file, attr::kStartTime, iso8601(start), kTimeWidth);
  h5::write_attr(file, attr::kStartUnix, start);
  h5::write_attr(file, attr::kEndTime, std::string(), kTimeWidth);
  h5::write_attr(file, attr::kEndUnix, 0.0);
  h5::write_attr(file, attr::kWorldSize, static_cast<int64_t>(meta.world_size));
  h5::write_attr(file, attr::kHost, clip(host_name(meta.host), kNameWidth), kNameWidth);
  h5::write_attr(file, attr::kDevice, clip(meta.device, kNameWidth), kNameWidth);
  // On disk now, so that an attempt killed before its first commit is still counted by the next.
  H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));

  const std::string torn = chunk_index_failure(file, info);
  if (!torn.empty()) SLUICE_THROW("rank file ", path, ": a chunk index block does not load: ", torn);

  const int64_t chunk_rows = info.chunk_rows > 0 ? info.chunk_rows : 1;
  const hid_t id = file;
  auto rf = std::make_unique<Hdf5RankFile>(path, std::move(file), kept, meta.fsync_commits, meta.key_bytes);
  rf->attach(info, chunk_rows);
  H5_CHECK(H5Fflush(id, H5F_SCOPE_GLOBAL));
  return rf;
}

// A resume appends to its recovered file.  One that fails when written although every committed
// record reads (its metadata damaged where only a writer looks) would fail the same way at every
// later resume: its committed records are copied into a fresh file instead (salvage_for_writing,
// the old file kept as *.damaged) and this attempt writes on into that.
std::unique_ptr<RankFile> append_to(const std::string& path, const std::vector<DatasetSpec>& specs,
                                    const RankFileMeta& meta) {
  recover_if_needed(path);
  try {
    return reopen(path, specs, meta);
  } catch (const InputError&) {
    throw;  // outputs that differ, keys too wide, a lock held: nothing wrong with the file
  } catch (const Error& e) {
    std::size_t had = 0;
    try {
      had = read_rank_file(path).chunks.size();
    } catch (const Error&) {
    }
    const std::string note = salvage_for_writing(path, str("it fails when written: ", e.what()));
    log_warn(note);
    std::error_code ec;
    const std::size_t kept = std::filesystem::exists(path, ec) ? read_rank_file(path).chunks.size() : 0;
    // The resume was planned from every record of the old file: with fewer, its samples would be
    // neither committed nor pending.  The next resume plans from the salvaged file.
    if (kept < had) throw Error(str(note, "; run the job again with --resume to redo them"));
    return reopen(path, specs, meta);
  }
}

}  // namespace

std::unique_ptr<BatchEncoder> RankFile::make_encoder(int64_t batch_rows, int slots, int threads,
                                                     const std::vector<std::size_t>& row_bytes) const {
  std::vector<ChunkLayout> layouts;
  for (std::size_t i = 0; i < outputs(); ++i) {
    layouts.push_back(chunk_layout(i));
    if (i < row_bytes.size() && row_bytes[i] != layouts.back().row_bytes) layouts.back().deflate = 0;
  }
  auto enc = std::make_unique<BatchEncoder>(std::move(layouts), batch_rows, slots, threads);
  if (!enc->active()) return nullptr;
  return enc;
}

std::unique_ptr<RankFile> open_rank_file(const std::string& path, const std::vector<DatasetSpec>& specs,
                                         int64_t chunk_rows, const RankFileMeta& meta, bool append_existing) {
  h5::quiet_errors();
  validate_specs(path, specs, chunk_rows);
  return append_existing ? append_to(path, specs, meta) : create_new(path, specs, chunk_rows, meta);
}

}  // namespace sluice
