#pragma once
// The per-rank HDF5 output file, OUTDIR/rank-NNNNN.h5 (docs/file-formats.md, "Rank files"):
//   /outputs/<name>  [rows, ...]  one dataset per OutputSpec, chunked by batch, extendible
//   /sample_index    [rows] int64 the global sample index of each row
//   /sample_key, /sample_status, /sample_size, /bad_samples: per-row data (RowMeta, below)
//   /ledger          [commits] one record per commit {seq, first_index, count, first_row}: rows
//                    [first_row, first_row + count) hold samples [first_index, first_index + count)
//   attributes: sluice version and commit, job (TOML text), model path and sha256, rank, world
//   size, host, GPU, start and end times, attempt.
//   (io/rank_file_format.h names them.  The ledger is a compound {seq, first_index, count,
//   first_row} of int64; seq numbers the file's commits 0, 1, ... (format 1 had a chunk id
//   there).  Strings are variable-length UTF-8, except those a resume rewrites in SWMR mode:
//   host, device, created, start_time, end_time are fixed-length, NUL-padded.)
// Crash safety: a writer killed at any moment leaves every committed record readable; see the top
// of io/rank_file_writer.cpp for the scheme (HDF5 SWMR mode, rows flushed before their ledger
// record).
// Rows are appended batch by batch; commit() makes every row appended since the previous commit
// durable as one ledger record (a contiguous run of samples) and flushes the file.  Rows past the
// last committed record are not part of the output: recovery drops them, readers ignore them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <utility>

#include "core/dtype.h"
#include "io/chunk_encoder.h"

namespace sluice {

struct DatasetSpec {
  std::string name;   // under /outputs
  DType dtype = DType::F32;
  Shape row_shape;    // one row (one sample), no leading dimension
  int deflate = 0;    // 0: stored raw; 1..9: deflate level (each commit then starts on a fresh chunk)
  std::size_t row_bytes() const { return static_cast<std::size_t>(shape_numel(row_shape)) * dtype_size(dtype); }
};

// One ledger record: a commit of `count` consecutive samples stored in consecutive rows.
struct ChunkRecord {
  int64_t seq = 0;          // the commit's number in this file (the file fills it in)
  int64_t first_index = 0;  // global sample index of the first sample
  int64_t count = 0;        // samples
  int64_t first_row = 0;    // row of the first sample in this file (the file fills it in)
  double time = 0;          // unix seconds of the commit (the file fills it in; 0: not recorded,
                            // as in files written before commit times were)
};

struct RankFileMeta {
  std::string job_text;     // the resolved job as TOML
  std::string model_path, model_sha256;
  int rank = 0, world_size = 1;
  std::string host, device;
  int64_t total_samples = 0;
  int64_t chunk_samples = 0;
  int attempt = 0;          // 0 for the first run, +1 per resume
  double start_time = 0;    // unix seconds
  // Also survive power loss or a node crash, not only a killed process: fsync the file after the
  // rows and again after the ledger entry of every commit (costs two device flushes per commit).
  bool fsync_commits = false;
  // Per-row data beside the outputs (RowMeta): the width of /sample_key (0: no keys stored),
  // whether /sample_size (original height, width) is stored, and the input's fingerprint.
  std::size_t key_bytes = 0;
  bool orig_sizes = false;
  std::string input_fingerprint;
};

// What the rows of one append carry beside the outputs (docs/file-formats.md): their keys, status
// (pipeline/batch_input.h RowStatus) and original image size, and the reasons of bad rows.
struct RowMeta {
  const char* keys = nullptr;          // rows * key_bytes chars, each key NUL-padded; null: none
  const uint8_t* status = nullptr;     // rows; null: every row ok
  const int32_t* orig_hw = nullptr;    // rows * 2 (height, width); null: none
  const std::vector<std::pair<int64_t, std::string>>* bad = nullptr;  // (sample index, reason)
};

// One append: `rows` consecutive rows of every output and the per-row data that travels with them.
// The rows' keys, status and sizes are the batch's own (filled where the samples were read), so the
// file never calls back into the input.
struct RowBatch {
  int64_t rows = 0;
  const int64_t* sample_index = nullptr;       // rows: the global sample index of each row
  std::vector<const void*> data;               // one per output: the raw rows (row-major, spec dtype)
  RowMeta meta;                                // keys, status, original sizes, bad reasons
  // BatchEncoder::encoded() of this batch (null: nothing encoded).  An output whose encoded chunks
  // cover exactly these rows, starting on a chunk boundary, is stored as is; any other from `data`.
  const std::vector<EncodedRows>* encoded = nullptr;
};

// The chunked writer: rows go in batch by batch (append), become durable run by run (commit).  A
// compressing file also hands out its encode stage (make_encoder), whose output append() stores.
class RankFile {
 public:
  virtual ~RankFile() = default;
  // Appends one batch of rows after the pending ones; returns how many chunks were stored as
  // encoded (0 without an encoder).
  virtual int64_t append(const RowBatch& batch) = 0;
  // Commits every row appended since the last commit as one record: `record` gives first_index
  // and count (samples [first_index, first_index + count) in append order); seq and first_row are
  // filled in.
  virtual void commit(ChunkRecord record) = 0;
  virtual int64_t committed_rows() const = 0;
  // The outputs, and how output `output` is stored (see ChunkLayout); deflate 0 unless callers may
  // encode it.  A file that stores no chunks itself (a test's, a wrapper's) says 0 outputs.
  virtual std::size_t outputs() const { return 0; }
  virtual ChunkLayout chunk_layout(std::size_t output) const { return {}; }
  // The encode stage for batches of up to `batch_rows` rows in `slots` slots on `threads` threads,
  // from chunk_layout(); null when no output of such batches can be encoded.  `row_bytes` (one per
  // output, when given): the bytes of the caller's rows; an output whose rows differ from the
  // stored ones is left to the file.
  std::unique_ptr<BatchEncoder> make_encoder(int64_t batch_rows, int slots, int threads,
                                             const std::vector<std::size_t>& row_bytes = {}) const;
  // Writes the end time and closes the file cleanly.
  virtual void close() = 0;
};

// Creates a new rank file (fails if it exists) or, with `append_existing`, reopens a file that
// recover_rank_file() left consistent and appends after its committed rows.
std::unique_ptr<RankFile> open_rank_file(const std::string& path, const std::vector<DatasetSpec>& specs,
                                         int64_t chunk_rows, const RankFileMeta& meta, bool append_existing);

// What a reader needs to know about one rank file.
struct RankFileInfo {
  std::string path;
  int rank = -1, world_size = 0;
  int format = 0;                    // rank file format version
  std::vector<DatasetSpec> datasets;
  std::vector<std::string> row_datasets;  // every dataset with one row per sample: /outputs/*,
                                          // /sample_index, and any other of the root group
  std::vector<ChunkRecord> chunks;   // committed, in commit order (the ledger's valid prefix)
  int64_t committed_rows = 0;        // rows through the last committed record
  int64_t ledger_slots = 0;          // records the ledger dataset holds, valid or not
  std::string damage;                // why the ledger's valid prefix ends before its last record
                                     // (an impossible record); "" when it ends at a blank slot or
                                     // at the end (a killed writer leaves a blank slot)
  int64_t total_samples = 0, chunk_samples = 0;
  std::string model_sha256, job_text;
  std::string input_fingerprint;     // the input the file was written from ("" in files older than it)
  int attempt = 0;   // the attempt that last wrote the file (0: first run)
  bool closed_cleanly = false;       // false: a writer holds the file, or was killed holding it
  // Also read from the header:
  std::string model_path, host, device, sluice_version, git_commit;
  std::string start_time, end_time;  // ISO-8601 UTC; end_time is "" until close() ran
  double start_unix = 0, end_unix = 0;
  int64_t file_rows = 0;             // rows the datasets hold, committed or not
  int64_t chunk_rows = 0;            // rows per batch the file was created with
  // Per-row data (RowMeta), where the file stores it (files of older versions have none):
  std::size_t key_bytes = 0;         // width of /sample_key; 0: no keys
  bool has_status = false;           // /sample_status
  bool has_sizes = false;            // /sample_size
};

// The committed records of a rank file's /bad_samples, (sample index, reason) in file order: those
// whose sample lies in one of info.chunks (read_rank_file reads only the header and ledger).
std::vector<std::pair<int64_t, std::string>> read_bad_samples(const RankFileInfo& info);

// Keys of rows [first_row, first_row + count) of /sample_key in a rank file or outputs.h5 (fewer
// when the dataset ends first; none when it has no keys).
std::vector<std::string> read_sample_keys(const std::string& path, int64_t first_row, int64_t count);

// Reads the header and ledger of a rank file (read-only; works on a file whose writer was killed,
// and on one still being written).  No row is read: the ledger is the record of what is there.
RankFileInfo read_rank_file(const std::string& path);

// The committed records merged into maximal runs: consecutive records that continue each other in
// samples and in rows become one (seq -1).  A rank's file then holds a handful of runs.
std::vector<ChunkRecord> merged_runs(const std::vector<ChunkRecord>& records);

// Makes `path` a cleanly closed file holding exactly its committed records (io/recover.cpp):
//  - closed cleanly and sound: nothing to do;
//  - left open by a killed writer: shrunk in place to its last commit (no committed row is
//    copied), its SWMR flag cleared, so any HDF5 reader opens it plainly;
//  - damaged (truncated, an impossible ledger record, rows that do not hold what the ledger says):
//    the records that can still be read are copied into a fresh file that replaces it, and the
//    damaged file is kept beside it as <path>.damaged; what could not be saved is redone;
//  - not readable as a rank file at all: moved aside to <path>.damaged (everything is redone).
// The writer must be dead.  Returns a one-line account ("" when nothing was done).
std::string recover_rank_file(const std::string& path);

// OUTDIR/outputs.h5: one virtual dataset [N, ...] per row dataset of the rank files (every output,
// /sample_index and any other per-row dataset), in global sample order, with one mapping per run
// of rows (merged_runs) of each file.  `files` need only their header, row_datasets and records
// (merged or not).  Throws if an index in [0, N) is missing or appears twice (call check_coverage
// first to report it nicely).
void write_virtual_outputs(const std::string& outdir, const std::vector<RankFileInfo>& files, int64_t total_samples);

struct Coverage {
  int64_t total = 0, present = 0;
  std::vector<std::pair<int64_t, int64_t>> gaps;        // missing [first, last] ranges
  std::vector<int64_t> duplicates;                       // indices present more than once (first few)
  int64_t duplicate_count = 0;                           // all of them (rows beyond the first copy)
  int64_t out_of_range = 0;                              // rows whose index is outside [0, total)
  bool complete() const { return present == total && gaps.empty() && duplicates.empty() && out_of_range == 0; }
};
Coverage check_coverage(const std::vector<RankFileInfo>& files, int64_t total_samples);

}  // namespace sluice
