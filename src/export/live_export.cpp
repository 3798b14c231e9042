// Results while the job runs (export/live_export.h).
#include "export/live_export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/queue.h"
#include "core/thread.h"
#include "export/exporter.h"
#include "export/files.h"
#include "export/journal.h"
#include "io/sample_keys.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMarker = ExportJournal::kLiveMarker;  // the folder is this run's export

std::string marker_text(const LiveExportOptions& o) {
  return dump_json(json{{"export", o.format}, {"run", fs::absolute(o.run_dir).lexically_normal().string()}});
}

const char* kFolderHint = "give --export-dir an empty (or new) folder, or remove what is in it";

// The table's rows as the ranks computed them while the job ran: per rank a file of records
// "<sample index> <bytes>\n<line>" (a line may hold a quoted newline), appended after each commit.
// The whole-file formats (embeddings, detections) keep the same records, each holding the row's
// stored bytes (of the exported outputs, one after the other): .<format>.r<rank>.sluice-lines.
constexpr char kLinesSuffix[] = ".sluice-lines";
constexpr const char* kTableFormats[] = {"classes", "embeddings", "detections"};
std::string lines_path(const std::string& dir, const std::string& format, int rank) {
  return (fs::path(dir) / str(".", format, ".r", rank, kLinesSuffix)).string();
}

// Walks the whole records of one record file without reading their payloads: fn(sample index,
// the payload's offset, its bytes).  Returns the bytes they take (a kill may have cut the last
// record short: it is left out).
std::size_t scan_records(const std::string& path, const std::function<void(int64_t, std::size_t, std::size_t)>& fn) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  struct stat st {};
  if (!f || ::fstat(::fileno(f.get()), &st) != 0) return 0;
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  std::size_t at = 0;
  char head[64];
  while (at < size) {
    if (::fseeko(f.get(), static_cast<off_t>(at), SEEK_SET) != 0) break;
    const std::size_t got = std::fread(head, 1, sizeof head - 1, f.get());
    head[got] = '\0';
    const char* nl = static_cast<const char*>(std::memchr(head, '\n', got));
    long long index = -1;
    unsigned long long bytes = 0;
    if (!nl || std::sscanf(head, "%lld %llu", &index, &bytes) != 2 || index < 0) break;
    const std::size_t payload = at + static_cast<std::size_t>(nl - head) + 1;
    if (bytes > size - payload) break;
    if (fn) fn(index, payload, static_cast<std::size_t>(bytes));
    at = payload + static_cast<std::size_t>(bytes);
  }
  return at;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool is_lines_file(const std::string& name, const std::string& format) {
  const std::string prefix = str(".", format, ".r");
  return name.rfind(prefix, 0) == 0 && name.size() > std::strlen(kLinesSuffix) &&
         name.compare(name.size() - std::strlen(kLinesSuffix), std::string::npos, kLinesSuffix) == 0;
}

bool is_lines_file(const std::string& name) {
  for (const char* f : kTableFormats)
    if (is_lines_file(name, f)) return true;
  return false;
}

// Every whole record of the table's line files, by sample index.
std::vector<std::pair<int64_t, std::string>> read_lines(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!is_lines_file(e.path().filename().string(), "classes")) continue;
    const std::string text = read_text(e.path());
    scan_records(e.path().string(), [&](int64_t index, std::size_t offset, std::size_t bytes) {
      if (offset + bytes <= text.size()) out.emplace_back(index, text.substr(offset, bytes));
    });
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// A batch's copy of the exported outputs' rows, indices, keys and status, waiting for its commit.
struct Staged {
  int64_t rows = 0;
  std::atomic<int64_t> units_left{0};            // export threads' shares not done yet
  std::vector<std::vector<unsigned char>> data;  // per exported output
  std::vector<int64_t> index;
  std::vector<char> keys;
  std::vector<uint8_t> status;
};

// An export thread's share of a committed batch: rows [begin, end).  A batch is cut into one
// share per thread, so the threads write one batch together and the copies held stay a few
// batches, whatever the number of threads (a batch of segmentation logits can take a gigabyte).
struct Unit {
  Staged* batch = nullptr;
  int64_t begin = 0, end = 0;
};

// One exported output: where it is in the batch, and what it is.
struct Exported {
  std::size_t index = 0;
  StoredOutput out;
  std::size_t row_bytes = 0;
};

class LiveExportFile final : public RankFile {
 public:
  // A per-row format (masks, npy: `outs` its one output), the classes table (`plan`, the first
  // `outs` its scores, a second its indices), or a whole-file format's records (embeddings,
  // detections: the rows of `outs`).
  LiveExportFile(std::unique_ptr<RankFile> inner, const LiveExportOptions& o, std::vector<Exported> outs, ClassPlan plan,
                 std::size_t key_bytes)
      : inner_(std::move(inner)), o_(o), outs_(std::move(outs)), key_bytes_(key_bytes),
        ext_(row_extension(o.format)), folder_(o.dir, o.rank), plan_(std::move(plan)),
        queue_(static_cast<std::size_t>(std::max(o.threads, 1)) * 2) {
    for (int t = 0; t < std::max(o.threads, 1); ++t)
      threads_.emplace_back(str("export-", t), [this] { work(); });
  }

  ~LiveExportFile() override {
    queue_.abort();
    for (auto& t : threads_) t.join_noexcept();
    if (lines_) std::fclose(lines_);
  }

  int64_t append(const RowBatch& b) override {
    rethrow();
    const int64_t stored = inner_->append(b);
    Staged* s = take();
    s->rows = b.rows;
    s->data.resize(outs_.size());
    for (std::size_t i = 0; i < outs_.size(); ++i) {
      const auto* src = static_cast<const unsigned char*>(b.data.at(outs_[i].index));
      s->data[i].assign(src, src + static_cast<std::size_t>(b.rows) * outs_[i].row_bytes);
    }
    s->index.assign(b.sample_index, b.sample_index + b.rows);
    if (b.meta.keys) s->keys.assign(b.meta.keys, b.meta.keys + static_cast<std::size_t>(b.rows) * key_bytes_);
    else s->keys.clear();
    if (b.meta.status) s->status.assign(b.meta.status, b.meta.status + b.rows);
    else s->status.assign(static_cast<std::size_t>(b.rows), 0);
    pending_.push_back(s);
    return stored;
  }

  void commit(ChunkRecord record) override {
    rethrow();
    inner_->commit(record);
    // Committed: from here on these rows are the output's, and their files may be written.
    const int64_t threads = std::max(o_.threads, 1);
    for (Staged* s : pending_) {
      const int64_t shares = std::max<int64_t>(1, std::min(threads, s->rows));
      const int64_t per = (s->rows + shares - 1) / shares;
      const int64_t units = (s->rows + per - 1) / per;
      s->units_left = units;
      bool queued = true;
      for (int64_t u = 0; u < units && queued; ++u)
        queued = queue_.push(Unit{s, u * per, std::min(s->rows, (u + 1) * per)});
      if (!queued) break;
    }
    pending_.clear();
    rethrow();
  }

  int64_t committed_rows() const override { return inner_->committed_rows(); }
  std::size_t outputs() const override { return inner_->outputs(); }
  ChunkLayout chunk_layout(std::size_t output) const override { return inner_->chunk_layout(output); }

  void close() override {
    // Every committed row's file is written before the file closes (a stop waits for them too).
    queue_.close();
    std::exception_ptr first;
    for (auto& t : threads_) {
      std::exception_ptr e = t.join_noexcept();
      if (e && !first) first = e;
    }
    threads_.clear();
    pending_.clear();
    if (lines_ && std::fclose(lines_) != 0 && !first)
      first = std::make_exception_ptr(
          InputError(str("export: cannot write ", lines_path(o_.dir, o_.format, o_.rank), " (disk full?)")));
    lines_ = nullptr;
    inner_->close();
    if (first) std::rethrow_exception(first);
    rethrow();
    log_debug("export: ", written_.load(), " file(s) or table rows written in ", o_.dir, " by this rank");
  }

 private:
  Staged* take() {
    std::lock_guard<std::mutex> lock(free_mutex_);
    if (free_.empty()) {
      pool_.push_back(std::make_unique<Staged>());
      return pool_.back().get();
    }
    Staged* s = free_.back();
    free_.pop_back();
    return s;
  }

  void work() {
    try {
      while (std::optional<Unit> u = queue_.pop()) {
        if (!ext_.empty()) export_files(*u->batch, u->begin, u->end);
        else if (o_.format == "classes") export_lines(*u->batch, u->begin, u->end);
        else export_records(*u->batch, u->begin, u->end);
        if (--u->batch->units_left == 0) {
          std::lock_guard<std::mutex> lock(free_mutex_);
          free_.push_back(u->batch);
        }
      }
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      failed_ = true;
      queue_.abort();
    }
  }

  std::string key_of(const Staged& b, int64_t r) const {
    return b.keys.empty() ? "" : padded_key(b.keys.data(), key_bytes_, r);
  }

  void export_files(const Staged& b, int64_t begin, int64_t end) {
    const Exported& e = outs_.front();
    for (int64_t r = begin; r < end; ++r) {
      if (b.status[static_cast<std::size_t>(r)] != 0) continue;  // no result: sluice export skips it too
      const std::string key = key_of(b, r), rel = export_path(key, ext_, false);
      if (folder_.done(rel)) continue;
      write_row_file(folder_, rel, key, o_.format, e.out, b.data.front().data() + static_cast<std::size_t>(r) * e.row_bytes);
      ++written_;
    }
  }

  // classes: the batch's table lines, appended to this rank's line file in one write.
  void export_lines(const Staged& b, int64_t begin, int64_t end) {
    auto tensor = [&](std::size_t i) {  // rows [begin, end) of exported output i
      Shape shape{end - begin};
      shape.insert(shape.end(), outs_[i].out.row_shape.begin(), outs_[i].out.row_shape.end());
      Tensor t(outs_[i].out.dtype, shape);
      std::memcpy(t.bytes.data(), b.data[i].data() + static_cast<std::size_t>(begin) * outs_[i].row_bytes, t.nbytes());
      return t;
    };
    const Tensor values = tensor(0);
    const Tensor ids = outs_.size() > 1 ? tensor(1) : Tensor();
    std::string records;
    for (int64_t r = begin; r < end; ++r) {
      if (b.status[static_cast<std::size_t>(r)] != 0) continue;
      const std::string line = class_line(plan_, key_of(b, r), values, ids, r - begin);
      records += str(b.index[static_cast<std::size_t>(r)], " ", line.size(), "\n", line);
      ++written_;
    }
    append_records(records);
  }

  // embeddings, detections: each good row's stored bytes (the exported outputs' rows, one after
  // the other), appended to this rank's record file in one write; the files are made of them
  // when the job completes (finish_live_export).
  void export_records(const Staged& b, int64_t begin, int64_t end) {
    std::size_t payload = 0;
    for (const Exported& e : outs_) payload += e.row_bytes;
    std::string records;
    for (int64_t r = begin; r < end; ++r) {
      if (b.status[static_cast<std::size_t>(r)] != 0) continue;
      records += str(b.index[static_cast<std::size_t>(r)], " ", payload, "\n");
      for (std::size_t i = 0; i < outs_.size(); ++i)
        records.append(reinterpret_cast<const char*>(b.data[i].data()) + static_cast<std::size_t>(r) * outs_[i].row_bytes,
                       outs_[i].row_bytes);
      ++written_;
    }
    append_records(records);
  }

  void append_records(const std::string& records) {
    std::lock_guard<std::mutex> lock(lines_mutex_);
    if (!lines_) open_lines();
    if (std::fwrite(records.data(), 1, records.size(), lines_) != records.size() || std::fflush(lines_) != 0)
      throw InputError(str("export: cannot write ", lines_path(o_.dir, o_.format, o_.rank), ": ", std::strerror(errno),
                           " (disk full?)"));
  }

  // This rank's line file, opened at its first committed rows (after every rank's set-up): what an
  // earlier attempt left of it is kept up to its last whole record, and appended to.
  void open_lines() {
    const std::string path = lines_path(o_.dir, o_.format, o_.rank);
    std::error_code ec;
    if (fs::exists(path, ec)) {
      const std::size_t whole = scan_records(path, nullptr);
      if (::truncate(path.c_str(), static_cast<off_t>(whole)) != 0)
        throw InputError(str("export: cannot truncate ", path, ": ", std::strerror(errno)), kFolderHint);
    }
    lines_ = std::fopen(path.c_str(), "ab");
    if (!lines_) throw InputError(str("export: cannot open ", path, ": ", std::strerror(errno)), kFolderHint);
  }

  // An export thread's failure ends the run on the writer's next call, with the thread's message.
  void rethrow() {
    if (!failed_.load()) return;
    std::lock_guard<std::mutex> lock(error_mutex_);
    std::rethrow_exception(error_);
  }

  std::unique_ptr<RankFile> inner_;
  LiveExportOptions o_;
  std::vector<Exported> outs_;
  std::size_t key_bytes_;
  std::string ext_;                                // a per-row format's extension ("": a table's records)
  RunExportFolder folder_;
  ClassPlan plan_;
  std::FILE* lines_ = nullptr;                     // classes, embeddings, detections: this rank's record file
  std::mutex lines_mutex_;
  BoundedQueue<Unit> queue_;                       // committed rows, in shares, to the export threads
  std::vector<WorkerThread> threads_;
  std::vector<Staged*> pending_;                   // appended since the last commit
  std::mutex free_mutex_;
  std::vector<std::unique_ptr<Staged>> pool_;      // every copy made, reused
  std::vector<Staged*> free_;                      // copies no one holds
  std::atomic<int64_t> written_{0};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;                       // the first export thread's failure
};

}  // namespace

std::string live_export_source(const std::string& format, const std::vector<std::string>& outputs) {
  const std::vector<std::string>& order = source_order(format);
  if (order.empty() || format == "logits" || format == "dense")
    throw UsageError(str("--export '", format, "': choose masks, classes, npy, embeddings or detections"));
  const std::string source = default_source(format, outputs);
  if (!source.empty()) return source;
  std::string names;
  for (const auto& n : outputs) names += (names.empty() ? "" : ", ") + n;
  std::string want;
  for (const auto& n : order) want += (want.empty() ? "" : ", ") + n;
  throw UsageError(str("--export ", format, " needs one of the outputs ", want, "; this job stores ", names),
                   str("add one to --outputs (e.g. --outputs ", order.front(), ")"));
}

void open_live_export_dir(const LiveExportOptions& o, const std::vector<std::string>& keys) {
  std::error_code ec;
  const fs::path dir(o.dir);
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    throw InputError(str("--export-dir ", o.dir, ": cannot create the export folder: ",
                         ec ? ec.message() : "it is not a folder"), kFolderHint);
  if (fs::equivalent(dir, fs::path(o.run_dir), ec))
    throw UsageError(str("--export-dir ", o.dir, " is the run's output folder; the exported files go in a folder of "
                         "their own (the default is OUTPUT/export)"));
  // Writable?  Each rank creates and removes a file of its own.
  const std::string probe = (dir / str(".probe.r", o.rank, kPartial)).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, "x", 1) != 1) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(probe.c_str());
    throw InputError(str("--export-dir ", o.dir, ": cannot write in the export folder: ", std::strerror(e)),
                     "give --export-dir a folder this job can write (or fix its permissions)");
  }
  ::close(fd);
  ::unlink(probe.c_str());

  // Whose folder: a fresh run's must hold nothing exported; a resume's must be this run's export.
  std::string marker;
  bool others = false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kMarker) {
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      marker = ss.str();
    } else if (!is_partial(name) && !(o.resume && is_lines_file(name))) {
      others = true;
    }
  }
  if (!o.resume && others)
    throw InputError(str("--export-dir ", o.dir, " is not empty: a new run exports into an empty folder, so that no "
                         "file there is mistaken for one of its own"), kFolderHint);
  if (o.resume && others && marker.empty())
    throw InputError(str("--export-dir ", o.dir, " holds files this run's export did not write (no ", kMarker, ")"),
                     kFolderHint);
  if (!marker.empty() && marker != marker_text(o) + "\n") {
    const json m = json::parse(marker, nullptr, false);
    const std::string was = m.is_object() && m.contains("export") && m["export"].is_string()
                                ? str(m["export"].get<std::string>(), " export of ",
                                      m.contains("run") && m["run"].is_string() ? m["run"].get<std::string>() : "?")
                                : "unreadable marker";
    throw InputError(str("--export-dir ", o.dir, " holds another export (", was, "); this run writes its ", o.format,
                         " export"),
                     kFolderHint);
  }

  if (o.rank != 0) return;
  if (const std::string ext = row_extension(o.format); !ext.empty()) {
    // Two samples on one file: the export would lose one of them (sluice export refuses it too).
    FileNames names(str("--export ", o.format, ": "), ext, false, false);
    names.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) names.claim(keys[i], static_cast<int64_t>(i));
  }
  // Temporaries of a killed attempt: no export thread runs yet on any rank (set-up is agreed first).
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && is_partial(it->path().filename().string())) fs::remove(it->path(), ec);
  }
  if (marker.empty()) {
    const fs::path tmp = dir / (std::string(kMarker) + kPartial), path = dir / kMarker;
    {
      std::ofstream out(tmp, std::ios::binary);
      out << marker_text(o) << "\n";
      if (!out.flush()) throw InputError(str("--export-dir ", o.dir, ": cannot write ", tmp.string()), kFolderHint);
    }
    fs::rename(tmp, path, ec);
    if (ec) throw InputError(str("--export-dir ", o.dir, ": cannot write ", path.string(), ": ", ec.message()), kFolderHint);
  }
}

std::unique_ptr<RankFile> make_live_export(std::unique_ptr<RankFile> inner, const LiveExportOptions& o,
                                           const std::vector<DatasetSpec>& specs, const std::string& source,
                                           std::size_t key_bytes) {
  std::vector<StoredOutput> stored;
  for (const DatasetSpec& d : specs) stored.push_back(StoredOutput{d.name, d.dtype, d.row_shape});
  auto find = [&](const std::string& name) -> const StoredOutput* {
    for (const StoredOutput& s : stored)
      if (s.name == name) return &s;
    return nullptr;
  };
  auto exported = [&](const std::string& name) {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == name) return Exported{i, stored[i], specs[i].row_bytes()};
    throw Error(str("export: the job stores no output ", name));
  };
  const std::string problem = shape_problem(o.format, source, find);
  if (!problem.empty())
    throw UsageError(str("--export ", o.format, ": ", problem),
                     o.format == "classes"      ? "export a segmentation model's outputs as masks (--export masks)"
                     : o.format == "embeddings" ? "store one vector per sample (--outputs embedding)"
                                                : "store detections (--outputs detections)");
  std::vector<Exported> outs;
  ClassPlan plan;
  if (o.format == "classes") {
    plan = class_plan(source, find, o.top_k);
    outs.push_back(exported(plan.data));
    if (!plan.ids.empty()) outs.push_back(exported(plan.ids));
  } else {
    outs.push_back(exported(source));
    if (o.format == "detections") outs.push_back(exported(source + "_count"));
  }
  return std::make_unique<LiveExportFile>(std::move(inner), o, std::move(outs), std::move(plan), key_bytes);
}

namespace {

// The rows the ranks kept in their record files as the job ran (embeddings, detections), read
// back block by block; a block with a good row a kill kept from being recorded is read from
// outputs.h5 instead (the same values: both are the committed rows).
class RecordedRows {
 public:
  RecordedRows(const LiveExportOptions& o, const RunOutputs& r, std::vector<std::string> names)
      : r_(r), names_(std::move(names)), where_(static_cast<std::size_t>(r.size())) {
    for (const std::string& n : names_) {
      row_bytes_.push_back(r.output(n)->row_bytes());
      payload_ += row_bytes_.back();
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(o.dir, ec)) {
      if (!is_lines_file(e.path().filename().string(), o.format)) continue;
      const int fd = ::open(e.path().c_str(), O_RDONLY);
      if (fd < 0) continue;
      fds_.push_back(fd);
      const int file = static_cast<int>(fds_.size()) - 1;
      scan_records(e.path().string(), [&](int64_t index, std::size_t offset, std::size_t bytes) {
        if (index < r.size() && bytes == payload_) where_[static_cast<std::size_t>(index)] = Where{file, offset};
      });
    }
  }
  ~RecordedRows() {
    for (int fd : fds_) ::close(fd);
  }
  RecordedRows(const RecordedRows&) = delete;
  RecordedRows& operator=(const RecordedRows&) = delete;

  RowReader reader() {
    return [this](const std::string& name, int64_t first, int64_t count) { return read(name, first, count); };
  }
  int64_t from_outputs_h5() const { return from_h5_; }

 private:
  struct Where {
    int file = -1;
    std::size_t offset = 0;
  };

  Tensor read(const std::string& name, int64_t first, int64_t count) {
    const std::size_t e = static_cast<std::size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin());
    if (e == names_.size()) return r_.read_rows(name, first, count);
    for (int64_t i = first; i < first + count; ++i)
      if (r_.status()[static_cast<std::size_t>(i)] == 0 && where_[static_cast<std::size_t>(i)].file < 0) {
        if (e == 0) ++from_h5_;
        return r_.read_rows(name, first, count);
      }
    const StoredOutput& s = *r_.output(name);
    Shape shape{count};
    shape.insert(shape.end(), s.row_shape.begin(), s.row_shape.end());
    Tensor t(s.dtype, shape);
    std::memset(t.bytes.data(), 0, t.nbytes());  // bad rows: no record, and never read
    std::size_t skip = 0;
    for (std::size_t j = 0; j < e; ++j) skip += row_bytes_[j];
    for (int64_t i = 0; i < count; ++i) {
      const Where w = where_[static_cast<std::size_t>(first + i)];
      if (w.file < 0) continue;
      unsigned char* dst = t.bytes.data() + static_cast<std::size_t>(i) * row_bytes_[e];
      const ssize_t got = ::pread(fds_[static_cast<std::size_t>(w.file)], dst, row_bytes_[e], static_cast<off_t>(w.offset + skip));
      if (got != static_cast<ssize_t>(row_bytes_[e]))
        throw InputError(str("export: cannot read a row kept in the export folder's record files: ",
                             got < 0 ? std::strerror(errno) : "cut short"));
    }
    return t;
  }
  const RunOutputs& r_;
  std::vector<std::string> names_;         // the exported outputs, in a record's order
  std::vector<std::size_t> row_bytes_;
  std::size_t payload_ = 0;
  std::vector<Where> where_;               // per sample: its record (file -1: none)
  std::vector<int> fds_;
  int64_t from_h5_ = 0;                    // blocks read from outputs.h5
};

}  // namespace

int64_t finish_live_export(const LiveExportOptions& o) {
  const RunOutputs r(o.run_dir);
  std::vector<std::string> names;
  for (const auto& s : r.outputs()) names.push_back(s.name);
  // The files sluice export writes by default (no labels, its top-k, float16 embeddings), through
  // the exporter: the rows' files not there yet, or a table's or whole-file format's files from
  // what the ranks kept as the job ran (a row a kill kept from being kept is read from outputs.h5).
  ExportSpec spec;
  spec.what = o.format == "npy" ? "logits" : o.format;
  spec.source = live_export_source(o.format, names);
  spec.top_k = o.top_k;
  spec.threads = std::max(o.threads, 1);
  const bool records = o.format == "embeddings" || o.format == "detections";
  std::vector<std::string> kept_names{spec.source};
  if (o.format == "detections") kept_names.push_back(spec.source + "_count");
  std::unique_ptr<RecordedRows> rows;
  std::vector<std::pair<int64_t, std::string>> lines;
  KeptRows kept;
  if (records) {
    rows = std::make_unique<RecordedRows>(o, r, kept_names);
    kept.read = rows->reader();
  } else if (o.format == "classes") {
    lines = read_lines(o.dir);
    kept.class_line = [&lines](int64_t row) -> const std::string* {
      auto it = std::lower_bound(lines.begin(), lines.end(), row, [](const auto& l, int64_t v) { return l.first < v; });
      return it != lines.end() && it->first == row ? &it->second : nullptr;
    };
  }
  RunExportFolder folder(o.dir, o.rank);
  Exporter e(spec, r, folder, std::move(kept));
  try {
    e.run();
  } catch (const InputError& err) {
    if (o.format != "embeddings") throw;
    throw InputError(str(err.what(), " (the run itself is complete)"),
                     str("`sluice export ", o.run_dir, " --what embeddings --dtype float32 --out DIR` writes them"));
  }
  for (const std::string& line : e.notes()) log_info("export: note: ", line);
  for (const std::string& line : e.warnings()) log_warn("export: ", line);
  if (rows) log_debug("export: ", rows->from_outputs_h5(), " block(s) read from outputs.h5, the rest from the ranks' records");
  if (records || o.format == "classes") {
    // The files are in place: the ranks' records have served.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(o.dir, ec))
      if (is_lines_file(entry.path().filename().string(), o.format)) fs::remove(entry.path(), ec);
  }
  return folder.written();
}

}  // namespace sluice
