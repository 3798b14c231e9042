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
inline constexpr char kBadSamples[] = "/bad_samples";  // a list {index, reason}, not one row per sample
inline constexpr int64_t kLedgerChunk = 64;  // ledger records per HDF5 chunk

// Attributes of the root group.  The ones marked mutable are rewritten while the file is in SWMR
// mode, where attributes cannot be created, so they exist from the start with fixed-size types.
namespace attr {
inline constexpr char kFormat[] = "sluice_format";
inline constexpr char kVersion[] = "sluice_version";
inline constexpr char kGitCommit[] = "sluice_git_commit";
inline constexpr char kJob[] = "job";
inline constexpr char kModelPath[] = "model_path";
inline constexpr char kModelSha256[] = "model_sha256";
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
// The ledger's fill value: a record whose slot exists but was never written reads as this, and
// readers stop there.
ChunkRecord ledger_fill();

// "2025-03-01T12:34:56.789Z" (UTC); "" for 0.
std::string iso8601(double unix_seconds);
double unix_now();

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

// The row chunking of one dataset: the largest divisor of `chunk_rows` whose chunk stays within
// kMaxChunkBytes (at least one row), so a batch fills whole chunks and readers of one sample do
// not pull in hundreds of megabytes.
inline constexpr std::size_t kMaxChunkBytes = 32u << 20;
int64_t dataset_chunk_rows(int64_t chunk_rows, std::size_t row_bytes);

}  // namespace sluice::rankfile
