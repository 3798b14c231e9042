#pragma once
// The on-disk layout of a rank file, shared by its writer, reader and recovery (internal to io/).
// rank_file.h documents the layout; this header names its parts once.
#include <string>
#include <vector>

#include "io/hdf5_util.h"
#include "io/rank_file.h"

namespace sluice::rankfile {

// Format 2: ledger records {seq, first_index, count, first_row} of any length (whole batches).
// Format 1 had {chunk_id, ...} with one record per fixed-size chunk; it reads the same way (by the
// three fields both have), so a run begun by an older sluice still resumes.
inline constexpr int64_t kFormatVersion = 2;
inline constexpr int64_t kOldestFormat = 1;
inline constexpr char kOutputsGroup[] = "/outputs";
inline constexpr char kSampleIndex[] = "/sample_index";
inline constexpr char kLedger[] = "/ledger";
inline constexpr int64_t kLedgerChunk = 64;  // ledger records per HDF5 chunk
// Per-row data beside the outputs (RowMeta; docs/file-formats.md).  Rows of the first three follow
// /sample_index exactly (same extent, written in the same append, committed by the same ledger
// record); /bad_samples is a list of {index, reason} whose committed records are those whose index
// lies in a committed chunk of the file.
inline constexpr char kSampleKey[] = "/sample_key";        // [rows] fixed-length string, NUL-padded
inline constexpr char kSampleStatus[] = "/sample_status";  // [rows] uint8 RowStatus
inline constexpr char kSampleSize[] = "/sample_size";      // [rows, 2] int32 original height, width
inline constexpr char kBadSamples[] = "/bad_samples";      // [n] {index int64, reason string}
inline constexpr std::size_t kReasonWidth = 200;           // bytes of a bad sample's reason
inline constexpr int64_t kBadChunk = 64;                   // /bad_samples records per HDF5 chunk

// Attributes of the root group.  The ones marked mutable are rewritten while the file is in SWMR
// mode, where attributes cannot be created, so they exist from the start with fixed-size types.
namespace attr {
inline constexpr char kFormat[] = "sluice_format";
inline constexpr char kVersion[] = "sluice_version";
inline constexpr char kGitCommit[] = "sluice_git_commit";
inline constexpr char kJob[] = "job";
inline constexpr char kModelPath[] = "model_path";
inline constexpr char kModelSha256[] = "model_sha256";
inline constexpr char kInputFingerprint[] = "input_fingerprint";  // Source::fingerprint(), for --resume
inline constexpr char kRank[] = "rank";
inline constexpr char kWorldSize[] = "world_size";
inline constexpr char kHost[] = "host";
inline constexpr char kDevice[] = "device";
inline constexpr char kTotalSamples[] = "total_samples";
inline constexpr char kChunkSamples[] = "chunk_samples";
inline constexpr char kChunkRows[] = "chunk_rows";
inline constexpr char kCreated[] = "created";            // the first attempt's start, ISO-8601
inline constexpr char kCreatedUnix[] = "created_unix";
inline constexpr char kAttempt[] = "attempt";            // mutable
inline constexpr char kStartTime[] = "start_time";       // mutable: this attempt's start
inline constexpr char kStartUnix[] = "start_unix";       // mutable
inline constexpr char kEndTime[] = "end_time";           // mutable: "" until close()
inline constexpr char kEndUnix[] = "end_unix";           // mutable: 0 until close()
inline constexpr char kDtype[] = "sluice_dtype";         // on each output: float32, bfloat16, ...
}  // namespace attr
inline constexpr std::size_t kTimeWidth = 32;            // bytes of the mutable time strings

// The ledger's record type: a compound {seq, first_index, count, first_row} of int64, the same in
// the file (little-endian) and in memory (ChunkRecord).  Reading uses ledger_read_type(), which
// names only first_index, count and first_row (HDF5 converts compounds by member name), so format
// 1's ledgers read too.
h5::Type ledger_file_type();
h5::Type ledger_memory_type();
h5::Type ledger_read_type();
// Only the commit time: read when the ledger's type has the member (files since commit times).
h5::Type ledger_time_type();
// The ledger's fill value: a record whose slot exists but was never written reads as this, and
// readers stop there.
ChunkRecord ledger_fill();

// /sample_key's type: fixed-length strings of `width` bytes, NUL-padded (h5py reads bytes).
h5::Type key_type(std::size_t width);
// A /bad_samples record in memory, and its file and memory types (the file's is packed:
// index at 0, reason at 8).  Unwritten slots read as the fill value {-1, ""}.
struct BadRecord {
  int64_t index = -1;
  char reason[kReasonWidth] = {};
};
h5::Type bad_file_type();
h5::Type bad_memory_type();

// What /bad_samples holds: its records, those that are committed (their index is in one of
// `chunks`, in file order) and how many leading records are (the writer appends after those).
struct BadScan {
  std::vector<std::pair<int64_t, std::string>> committed;
  int64_t leading = 0;  // records [0, leading) are all committed
  int64_t extent = 0;   // slots the dataset has
};
BadScan scan_bad_samples(hid_t file, const std::vector<ChunkRecord>& chunks);

// The per-row datasets (rank_file_rows.cpp).  Created with the file: /sample_key when
// meta.key_bytes > 0, /sample_status, /sample_size when meta.orig_sizes, /bad_samples.
void create_row_datasets(hid_t file, int64_t chunk_rows, const RankFileMeta& meta);

// A writer's handles on the per-row datasets a file has, grown and written with every append.
class RowDatasets {
 public:
  // `key_stride`: bytes per key in RowMeta::keys (0: the file's width).  Blanks /bad_samples
  // records after the committed ones.
  void attach(hid_t file, const RankFileInfo& info, std::size_t key_stride);
  void grow_to(int64_t rows);
  // Rows [row, row + rows) from `meta` (empty keys, status 0, size 0 where it gives none), and its
  // bad samples appended to /bad_samples.
  void write(int64_t row, int64_t rows, const RowMeta& meta);
  void close();

 private:
  static void write_rows(hid_t d, hid_t mem, int64_t row, int64_t rows, const std::vector<hsize_t>& row_dims,
                         const void* data);
  void write_bad(int64_t at, const BadRecord* records, int64_t count);

  h5::Dataset keys_, status_, sizes_, bad_;
  h5::Type key_mem_, bad_mem_;
  std::size_t key_stride_ = 0;
  int64_t bad_len_ = 0;      // records written (committed or pending)
  int64_t bad_extent_ = 0;   // slots the dataset has
  std::vector<char> zeros_;  // stands in for data a RowMeta does not give
};

// "2025-03-01T12:34:56.789Z" (UTC); "" for 0.
std::string iso8601(double unix_seconds);
double unix_now();   // core/timer.h unix_time_now(): the job's clock

// Where a file stands: closed cleanly, or held open by a writer (alive or killed) in SWMR mode, or
// (only with `salvage`) shorter than its superblock says: truncated.
struct ReadHandle {
  h5::File file;
  bool clean = false;
  bool truncated = false;
};
// Opens `path` read-only: plainly when it was closed cleanly, else as a SWMR reader.  InputError
// when the file is missing or is no HDF5 file; Error when it cannot be opened either way.  With
// `salvage`, a file cut short opens too (HDF5's end-of-file check skipped; reads past the end then
// return zeros, so the caller must check where each chunk lies: chunk_within_file()).
ReadHandle open_for_reading(const std::string& path, bool salvage = false);

// Reads the header, datasets and valid ledger prefix of an open rank file (see read_rank_file).
// A record is valid when it is possible: samples inside [0, N), rows after the previous record's
// and inside the datasets, samples no earlier record of the file holds.
RankFileInfo read_info(hid_t file, const std::string& path);

// The row datasets of an open rank file (RankFileInfo::row_datasets).
std::vector<std::string> row_datasets(hid_t file);

// Checks /sample_index at the first and last row of every run of `info` (a few reads per run, not
// one per row); returns the number of leading records whose runs hold what the ledger says.
std::size_t sound_records(hid_t file, const RankFileInfo& info);

// recover_rank_file's work (recover.cpp); returns the account of what it did ("" for nothing).
std::string recover_if_needed(const std::string& path);

// Walks the chunk index of every row dataset, the ledger and /bad_samples whole (entries past the
// extents too, which no reader loads); "" when every block loads, else which dataset failed and why.
std::string chunk_index_failure(hid_t file, const RankFileInfo& info);

// A file that reads (and recovered) but failed when reopened for writing (`why`): its readable
// committed records are copied into a fresh file that replaces it, the old one kept as
// <path>.damaged, as recover_rank_file does with a damaged file (or moved aside when nothing of it
// reads).  Returns the account of what it did.
std::string salvage_for_writing(const std::string& path, const std::string& why);

// The row chunking of one dataset: the largest divisor of `chunk_rows` whose chunk stays within
// kMaxChunkBytes (at least one row), so a batch fills whole chunks and readers of one sample do
// not pull in hundreds of megabytes.
inline constexpr std::size_t kMaxChunkBytes = 32u << 20;
int64_t dataset_chunk_rows(int64_t chunk_rows, std::size_t row_bytes);

}  // namespace sluice::rankfile
