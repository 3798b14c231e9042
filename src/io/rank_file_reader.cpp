// Reading a rank file: its header, datasets and the valid prefix of its ledger.  Works on a file
// that was closed cleanly, on one a writer still holds, and on one whose writer was killed: the
// last two are opened as a SWMR reader, which is what the writer's SWMR mode keeps consistent at
// every moment (see rank_file_writer.cpp).  Only the ledger is read, never the rows: a job's end,
// --resume and `sluice inspect` cost O(commits), not O(samples).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "core/ranges.h"
#include "core/timer.h"

#include "io/rank_file_format.h"
#include "io/sample_keys.h"

namespace sluice {
namespace rankfile {

h5::Type ledger_file_type() {
  h5::Type t(H5_CHECK(H5Tcreate(H5T_COMPOUND, 4 * sizeof(int64_t) + sizeof(double))));
  H5_CHECK(H5Tinsert(t, "seq", 0, H5T_STD_I64LE));
  H5_CHECK(H5Tinsert(t, "first_index", 8, H5T_STD_I64LE));
  H5_CHECK(H5Tinsert(t, "count", 16, H5T_STD_I64LE));
  H5_CHECK(H5Tinsert(t, "first_row", 24, H5T_STD_I64LE));
  H5_CHECK(H5Tinsert(t, "time", 32, H5T_IEEE_F64LE));
  return t;
}

h5::Type ledger_memory_type() {
  h5::Type t(H5_CHECK(H5Tcreate(H5T_COMPOUND, sizeof(ChunkRecord))));
  H5_CHECK(H5Tinsert(t, "seq", offsetof(ChunkRecord, seq), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "first_index", offsetof(ChunkRecord, first_index), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "count", offsetof(ChunkRecord, count), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "first_row", offsetof(ChunkRecord, first_row), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "time", offsetof(ChunkRecord, time), H5T_NATIVE_DOUBLE));
  return t;
}

h5::Type ledger_time_type() {
  h5::Type t(H5_CHECK(H5Tcreate(H5T_COMPOUND, sizeof(double))));
  H5_CHECK(H5Tinsert(t, "time", 0, H5T_NATIVE_DOUBLE));
  return t;
}

h5::Type ledger_read_type() {
  h5::Type t(H5_CHECK(H5Tcreate(H5T_COMPOUND, sizeof(ChunkRecord))));
  H5_CHECK(H5Tinsert(t, "first_index", offsetof(ChunkRecord, first_index), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "count", offsetof(ChunkRecord, count), H5T_NATIVE_INT64));
  H5_CHECK(H5Tinsert(t, "first_row", offsetof(ChunkRecord, first_row), H5T_NATIVE_INT64));
  return t;
}

ChunkRecord ledger_fill() { return ChunkRecord{-1, -1, 0, -1}; }

h5::Type key_type(std::size_t width) {
  h5::Type t(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t, std::max<std::size_t>(width, 1)));
  H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
  return t;
}

namespace {

h5::Type bad_type(std::size_t size, std::size_t index_at, std::size_t reason_at, hid_t int_type) {
  h5::Type t(H5_CHECK(H5Tcreate(H5T_COMPOUND, size)));
  H5_CHECK(H5Tinsert(t, "index", index_at, int_type));
  h5::Type reason = key_type(kReasonWidth);
  H5_CHECK(H5Tinsert(t, "reason", reason_at, reason));
  return t;
}

}  // namespace

h5::Type bad_file_type() { return bad_type(8 + kReasonWidth, 0, 8, H5T_STD_I64LE); }
h5::Type bad_memory_type() {
  return bad_type(sizeof(BadRecord), offsetof(BadRecord, index), offsetof(BadRecord, reason), H5T_NATIVE_INT64);
}

BadScan scan_bad_samples(hid_t file, const std::vector<ChunkRecord>& chunks) {
  BadScan scan;
  if (!h5::exists(file, kBadSamples)) return scan;
  h5::Dataset d(H5_CHECK(H5Dopen2(file, kBadSamples, H5P_DEFAULT)));
  scan.extent = static_cast<int64_t>(h5::dims_of(d).at(0));
  if (scan.extent == 0) return scan;
  std::vector<BadRecord> records(static_cast<std::size_t>(scan.extent));
  h5::Type mem = bad_memory_type();
  H5_CHECK(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, records.data()));
  // Committed sample ranges, sorted, for a binary search per record.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const ChunkRecord& c : chunks) ranges.emplace_back(c.first_index, c.first_index + c.count);
  std::sort(ranges.begin(), ranges.end());
  auto committed = [&](int64_t index) {
    auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(index, std::numeric_limits<int64_t>::max()));
    return index >= 0 && it != ranges.begin() && index < std::prev(it)->second;
  };
  bool leading = true;
  for (const BadRecord& r : records) {
    const bool ok = committed(r.index);
    if (ok) scan.committed.emplace_back(r.index, std::string(r.reason, strnlen(r.reason, kReasonWidth)));
    leading = leading && ok;
    if (leading) ++scan.leading;
  }
  return scan;
}

std::string iso8601(double unix_seconds) {
  if (unix_seconds <= 0) return "";
  const auto whole = static_cast<std::time_t>(unix_seconds);
  const int millis = static_cast<int>((unix_seconds - static_cast<double>(whole)) * 1000.0);
  std::tm tm{};
  gmtime_r(&whole, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, std::clamp(millis, 0, 999));
  return out;
}

double unix_now() { return unix_time_now(); }

int64_t dataset_chunk_rows(int64_t chunk_rows, std::size_t row_bytes) {
  chunk_rows = std::max<int64_t>(chunk_rows, 1);
  for (int64_t d = chunk_rows; d > 1; --d)
    if (chunk_rows % d == 0 && static_cast<std::size_t>(d) * row_bytes <= kMaxChunkBytes) return d;
  return 1;
}

ReadHandle open_for_reading(const std::string& path, bool salvage) {
  h5::quiet_errors();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(str("rank file ", path, ": no such file"));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    h5::error_stack_text();  // clear the stack
    throw InputError(str("rank file ", path, ": not an HDF5 file"));
  }
  h5::Plist fapl = h5::file_access();
  ReadHandle h;
  // A plain open fails while the superblock says a writer holds the file (alive or killed).
  std::string plain_error, swmr_error;
  h.file = h5::File(h5::open_file(path, H5F_ACC_RDONLY, fapl, plain_error));
  if (h.file.valid()) {
    h.clean = true;
    return h;
  }
  const hid_t swmr = h5::open_file(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl, swmr_error);
  if (swmr >= 0) {
    h.file = h5::File(swmr);
    return h;
  }
  if (salvage) {
    // A file cut short: HDF5 refuses it at open (its end-of-file check); h5clear's private
    // properties skip that check and ignore the writer's flag.  Read-only: nothing is changed.
    hbool_t on = true;
    H5_CHECK(H5Pset(fapl, "skip_eof_check", &on));
    H5_CHECK(H5Pset(fapl, "clear_status_flags", &on));
    const hid_t cut = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
    if (cut >= 0) {
      h.file = h5::File(cut);
      h.truncated = true;
      return h;
    }
    h5::error_stack_text();
  }
  throw Error(str("rank file ", path, ": cannot be opened, even as a SWMR reader: ",
                  swmr_error.empty() ? plain_error : swmr_error));
}

namespace {

struct DatasetList {
  std::vector<std::string> names;
};

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<DatasetList*>(data)->names.emplace_back(name);
  return 0;
}

// The datasets under /outputs in creation order (the order of the writer's specs).
std::vector<std::string> output_names(hid_t file) {
  h5::Group g(H5_CHECK(H5Gopen2(file, kOutputsGroup, H5P_DEFAULT)));
  DatasetList list;
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_name, &list) < 0) {
    h5::error_stack_text();  // no creation-order index: fall back to names
    list.names.clear();
    idx = 0;
    H5_CHECK(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &list));
  }
  return list.names;
}

int deflate_level(hid_t dataset) {
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(dataset)));
  unsigned flags = 0, cd[4] = {0, 0, 0, 0};
  std::size_t ncd = 4;
  unsigned filter_config = 0;
  if (H5Pget_filter_by_id2(dcpl, H5Z_FILTER_DEFLATE, &flags, &ncd, cd, 0, nullptr, &filter_config) < 0) {
    h5::error_stack_text();
    return 0;
  }
  return ncd > 0 ? static_cast<int>(cd[0]) : 6;
}

std::string str_attr(hid_t obj, const char* name) { return h5::read_attr_string(obj, name).value_or(""); }
int64_t int_attr(hid_t obj, const char* name, int64_t fallback = 0) { return h5::read_attr_int(obj, name).value_or(fallback); }

}  // namespace

std::vector<std::string> row_datasets(hid_t file) {
  std::vector<std::string> out;
  for (const std::string& name : output_names(file)) out.push_back(str(kOutputsGroup, "/", name));
  DatasetList root;
  hsize_t idx = 0;
  H5_CHECK(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &root));
  for (const std::string& name : root.names) {
    const std::string full = "/" + name;
    if (full == kLedger || full == kBadSamples) continue;
    H5O_info_t oi;
    if (H5Oget_info_by_name(file, full.c_str(), &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET) {
      h5::error_stack_text();
      continue;
    }
    // One row per sample: extendible along the first dimension, grown with the outputs.
    h5::Dataset d(H5_CHECK(H5Dopen2(file, full.c_str(), H5P_DEFAULT)));
    h5::Space space(H5_CHECK(H5Dget_space(d)));
    const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
    if (rank < 1) continue;
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), maxdims(static_cast<std::size_t>(rank));
    H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), maxdims.data()));
    if (maxdims[0] == H5S_UNLIMITED) out.push_back(full);
  }
  return out;
}

RankFileInfo read_info(hid_t file, const std::string& path) {
  RankFileInfo info;
  info.path = path;
  if (!h5::has_attr(file, attr::kFormat) || !h5::exists(file, kLedger) || !h5::exists(file, kSampleIndex) ||
      !h5::exists(file, kOutputsGroup))
    throw InputError(str("rank file ", path, ": not a sluice rank file (no ", attr::kFormat, " attribute or ledger)"));
  const int64_t format = int_attr(file, attr::kFormat);
  if (format < kOldestFormat || format > kFormatVersion)
    throw InputError(str("rank file ", path, ": format version ", format, ", this sluice reads ", kOldestFormat, " to ",
                         kFormatVersion));
  info.format = static_cast<int>(format);

  info.rank = static_cast<int>(int_attr(file, attr::kRank, -1));
  info.world_size = static_cast<int>(int_attr(file, attr::kWorldSize));
  info.total_samples = int_attr(file, attr::kTotalSamples);
  info.chunk_samples = int_attr(file, attr::kChunkSamples);
  info.chunk_rows = int_attr(file, attr::kChunkRows);
  info.attempt = static_cast<int>(int_attr(file, attr::kAttempt));
  info.job_text = str_attr(file, attr::kJob);
  info.model_path = str_attr(file, attr::kModelPath);
  info.model_sha256 = str_attr(file, attr::kModelSha256);
  info.input_fingerprint = str_attr(file, attr::kInputFingerprint);
  info.host = str_attr(file, attr::kHost);
  info.device = str_attr(file, attr::kDevice);
  info.sluice_version = str_attr(file, attr::kVersion);
  info.git_commit = str_attr(file, attr::kGitCommit);
  info.start_time = str_attr(file, attr::kStartTime);
  info.end_time = str_attr(file, attr::kEndTime);
  info.start_unix = h5::read_attr_double(file, attr::kStartUnix).value_or(0);
  info.end_unix = h5::read_attr_double(file, attr::kEndUnix).value_or(0);

  for (const std::string& name : output_names(file)) {
    const std::string full = str(kOutputsGroup, "/", name);
    h5::Dataset d(H5_CHECK(H5Dopen2(file, full.c_str(), H5P_DEFAULT)));
    h5::Type type(H5_CHECK(H5Dget_type(d)));
    DatasetSpec spec;
    spec.name = name;
    spec.dtype = h5::dtype_of(type);
    if (spec.dtype == DType::Undefined) {
      const std::string declared = str_attr(d, attr::kDtype);
      if (declared.empty()) throw InputError(str("rank file ", path, ": dataset ", full, " has unsupported type ", h5::type_text(type)));
      spec.dtype = dtype_from_name(declared);
    }
    const std::vector<hsize_t> dims = h5::dims_of(d);
    if (dims.empty()) throw InputError(str("rank file ", path, ": dataset ", full, " is a scalar"));
    spec.row_shape.assign(dims.begin() + 1, dims.end());
    spec.deflate = deflate_level(d);
    info.datasets.push_back(std::move(spec));
  }
  // Per-row data (its rows are row datasets too, counted below with the outputs').
  for (const char* name : {kSampleKey, kSampleStatus, kSampleSize}) {
    if (!h5::exists(file, name)) continue;
    if (std::strcmp(name, kSampleKey) == 0) {
      h5::Dataset d(H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
      h5::Type type(H5_CHECK(H5Dget_type(d)));
      info.key_bytes = H5Tget_size(type);
    }
    if (std::strcmp(name, kSampleStatus) == 0) info.has_status = true;
    if (std::strcmp(name, kSampleSize) == 0) info.has_sizes = true;
  }
  // Rows present in every row dataset: a commit's rows exist in all of them before its record.
  info.row_datasets = row_datasets(file);
  int64_t file_rows = -1;
  for (const std::string& name : info.row_datasets) {
    h5::Dataset d(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    const int64_t rows = static_cast<int64_t>(h5::dims_of(d).at(0));
    file_rows = file_rows < 0 ? rows : std::min(file_rows, rows);
  }
  info.file_rows = std::max<int64_t>(file_rows, 0);

  // The ledger's valid prefix.  Its extent may already count a record whose bytes never reached
  // the file (the writer was killed between the two); that slot reads as the fill value and ends
  // it.  Any other record that cannot be true ends it too, and says so in `damage`.
  h5::Dataset ledger(H5_CHECK(H5Dopen2(file, kLedger, H5P_DEFAULT)));
  const int64_t n = static_cast<int64_t>(h5::dims_of(ledger).at(0));
  info.ledger_slots = n;
  std::vector<ChunkRecord> records(static_cast<std::size_t>(n));
  if (n > 0) {
    h5::Type mem = ledger_read_type();
    H5_CHECK(H5Dread(ledger, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, records.data()));
    // Commit times, where the file records them (a ledger written before they were has no member).
    h5::Type stored(H5_CHECK(H5Dget_type(ledger)));
    if (H5Tget_member_index(stored, "time") >= 0) {
      std::vector<double> times(static_cast<std::size_t>(n));
      h5::Type tt = ledger_time_type();
      H5_CHECK(H5Dread(ledger, tt, H5S_ALL, H5S_ALL, H5P_DEFAULT, times.data()));
      for (int64_t k = 0; k < n; ++k) records[static_cast<std::size_t>(k)].time = times[static_cast<std::size_t>(k)];
    } else {
      h5::error_stack_text();
    }
  }
  const ChunkRecord blank = ledger_fill();
  std::map<int64_t, int64_t> held;  // samples of the valid records: first -> end
  int64_t end_row = 0;
  for (int64_t k = 0; k < n; ++k) {
    ChunkRecord r = records[static_cast<std::size_t>(k)];
    r.seq = k;
    if (r.first_index == blank.first_index && r.count == blank.count && r.first_row == blank.first_row) break;
    const Range samples{r.first_index, r.first_index + r.count};
    std::string why;
    if (r.count <= 0 || r.first_index < 0 || samples.end > info.total_samples)
      why = str("samples [", samples.first, ", ", samples.end, ") are not inside [0, ", info.total_samples, ")");
    else if (r.first_row < end_row || r.first_row + r.count > info.file_rows)
      why = str("rows [", r.first_row, ", ", r.first_row + r.count, ") are not after row ", end_row, " and inside the ",
                info.file_rows, " rows of the datasets");
    if (why.empty()) {
      auto next = held.lower_bound(samples.first);
      const bool overlaps = (next != held.end() && next->first < samples.end) ||
                            (next != held.begin() && std::prev(next)->second > samples.first);
      if (overlaps) why = str("samples [", samples.first, ", ", samples.end, ") were already committed in this file");
    }
    if (!why.empty()) {
      // The last slot may be torn by a kill (its extent written, its bytes only in part): that is
      // an uncommitted record like a blank one.  An impossible record before others is damage.
      if (k + 1 < n) info.damage = str("ledger record ", k, " of ", n, ": ", why);
      break;
    }
    held.emplace(samples.first, samples.end);
    info.chunks.push_back(r);
    end_row = r.first_row + r.count;
  }
  info.committed_rows = end_row;
  return info;
}

std::size_t sound_records(hid_t file, const RankFileInfo& info) {
  if (info.chunks.empty()) return 0;
  h5::Dataset index(H5_CHECK(H5Dopen2(file, kSampleIndex, H5P_DEFAULT)));
  auto holds = [&](int64_t row, int64_t sample) {
    int64_t v = -2;
    h5::Space fspace = h5::select_rows(index, row, 1);
    h5::Space mspace = h5::row_block_space(1, {});
    if (H5Dread(index, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, &v) < 0) {
      h5::error_stack_text();
      return false;
    }
    return v == sample;
  };
  auto sound = [&](const ChunkRecord& r) {
    return holds(r.first_row, r.first_index) && holds(r.first_row + r.count - 1, r.first_index + r.count - 1);
  };
  // Run by run; only a run that fails is checked record by record, to find the first bad one.
  std::size_t k = 0;
  for (const ChunkRecord& run : merged_runs(info.chunks)) {
    std::size_t in_run = 0;
    for (std::size_t j = k; j < info.chunks.size() && info.chunks[j].first_row < run.first_row + run.count; ++j) ++in_run;
    if (!sound(run)) {
      for (std::size_t j = k; j < k + in_run; ++j)
        if (!sound(info.chunks[j])) return j;
      return k + in_run;  // every record's ends hold; the run's ends as well then, but be safe
    }
    k += in_run;
  }
  return k;
}

}  // namespace rankfile

std::vector<std::string> read_sample_keys(const std::string& path, int64_t first_row, int64_t count) {
  h5::quiet_errors();
  rankfile::ReadHandle h = rankfile::open_for_reading(path);
  return SampleKeyReader(h.file, path).read(first_row, count);
}

std::vector<std::pair<int64_t, std::string>> read_bad_samples(const RankFileInfo& info) {
  h5::quiet_errors();
  rankfile::ReadHandle h = rankfile::open_for_reading(info.path);
  return rankfile::scan_bad_samples(h.file, info.chunks).committed;
}

RankFileInfo read_rank_file(const std::string& path) {
  rankfile::ReadHandle h = rankfile::open_for_reading(path);
  RankFileInfo info = rankfile::read_info(h.file, path);
  info.closed_cleanly = h.clean;
  h.file.close();
  return info;
}

std::vector<ChunkRecord> merged_runs(const std::vector<ChunkRecord>& records) {
  std::vector<ChunkRecord> runs;
  for (const ChunkRecord& r : records) {
    if (!runs.empty()) {
      ChunkRecord& last = runs.back();
      if (last.first_index + last.count == r.first_index && last.first_row + last.count == r.first_row) {
        last.count += r.count;
        last.time = std::max(last.time, r.time);
        continue;
      }
    }
    runs.push_back(r);
    runs.back().seq = -1;
  }
  return runs;
}

}  // namespace sluice
