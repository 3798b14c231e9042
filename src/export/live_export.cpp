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
#include <unordered_map>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/queue.h"
#include "core/thread.h"
#include "export/classes.h"
#include "export/detections.h"
#include "export/journal.h"
#include "export/masks.h"
#include "io/npy.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMarker = ExportJournal::kLiveMarker;  // the folder is this run's export
constexpr char kTemp[] = ".sluice-partial";            // temporaries end so (sluice export's too)

bool is_temp(const std::string& name) {
  return name.size() >= std::strlen(kTemp) && name.compare(name.size() - std::strlen(kTemp), std::string::npos, kTemp) == 0;
}

class MaskFormat final : public RowFormat {
 public:
  std::string name() const override { return "masks"; }
  std::string extension() const override { return ".png"; }
  void write(const std::string& path, const StoredOutput& o, const void* row) const override {
    Shape shape{1};
    shape.insert(shape.end(), o.row_shape.begin(), o.row_shape.end());
    Tensor t(o.dtype, shape);
    std::memcpy(t.bytes.data(), row, t.nbytes());
    const std::string png = encode_mask_png(mask_of_row(t, 0));
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) throw InputError(str("export: cannot create ", path, ": ", std::strerror(errno)));
    if (std::fwrite(png.data(), 1, png.size(), f.get()) != png.size() || std::fclose(f.release()) != 0)
      throw InputError(str("export: cannot write ", path, ": ", std::strerror(errno), " (disk full?)"));
  }
};

class NpyFormat final : public RowFormat {
 public:
  std::string name() const override { return "npy"; }
  std::string extension() const override { return ".npy"; }
  void write(const std::string& path, const StoredOutput& o, const void* row) const override {
    write_npy(path, o.dtype, o.row_shape, row);
  }
};

// The temporary name of `target`: in its folder (the rename stays on one file system), short
// whatever the target's length, and the rank's own.
std::string temp_path(const fs::path& target, int rank) {
  char name[64];
  std::snprintf(name, sizeof name, ".%016zx.r%d%s", std::hash<std::string>{}(target.string()), rank, kTemp);
  return (target.parent_path() / name).string();
}

// Writes one row's file through a temporary name; false when it was there already.
bool write_row_file(const RowFormat& f, const fs::path& target, int rank, const StoredOutput& o, const void* row) {
  std::error_code ec;
  if (fs::exists(target, ec)) return false;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw InputError(str("export: cannot create the folder ", target.parent_path().string(), ": ", ec.message()));
  const std::string tmp = temp_path(target, rank);
  try {
    f.write(tmp, o, row);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(str("export: cannot rename ", tmp, " to ", target.string(), ": ", std::strerror(e)));
  }
  return true;
}

std::string marker_text(const LiveExportOptions& o) {
  return dump_json(json{{"export", o.format}, {"run", fs::absolute(o.run_dir).lexically_normal().string()}});
}

const char* kFolderHint = "give --export-dir an empty (or new) folder, or remove what is in it";

// classes: which scores make the table and how, as sluice export decides it (no labels, its
// default top-k).  `find` names a stored output (null: none).
struct ClassPlan {
  std::string data, ids;  // the scores dataset; the stored top-k's indices ("" : computed here)
  bool softmax = false;
  std::string value_name = "prob";
  std::size_t width = 0, k = 0;
};

ClassPlan class_plan(const std::string& source, const std::function<const StoredOutput*(const std::string&)>& find,
                     int top_k) {
  ClassPlan p;
  const bool stored = !find(source) && find(source + "_values") && find(source + "_indices");
  p.data = stored ? source + "_values" : source;
  if (stored) p.ids = source + "_indices";
  p.softmax = !stored && source != "softmax";
  if (stored && source != "topk_probs") p.value_name = "logit";
  const StoredOutput* d = find(p.data);
  SLUICE_CHECK(d, "export: no output ", p.data);
  p.width = static_cast<std::size_t>(shape_numel(d->row_shape));
  p.k = std::min<std::size_t>(static_cast<std::size_t>(top_k), stored ? static_cast<std::size_t>(d->row_shape.at(0)) : p.width);
  return p;
}

std::string class_line(const ClassPlan& p, const std::string& key, const Tensor& values, const Tensor& ids, int64_t i) {
  const TopK t = p.ids.empty() ? top_k_of(values, static_cast<std::size_t>(i) * p.width, p.width, p.k, p.softmax)
                               : stored_top_k(values, ids, i, p.k);
  return csv_row(key, t, nullptr);
}

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

// The records of one line file's text, appended to `out`; returns the bytes they take (a kill may
// have cut the last record short: it is left out).
std::size_t parse_lines(const std::string& text, std::vector<std::pair<int64_t, std::string>>* out) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) break;
    long long index = -1;
    unsigned long long bytes = 0;
    if (std::sscanf(text.c_str() + at, "%lld %llu", &index, &bytes) != 2 || index < 0 || nl + 1 + bytes > text.size())
      break;
    if (out) out->emplace_back(index, text.substr(nl + 1, bytes));
    at = nl + 1 + bytes;
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

// Every whole record of the table's line files.
std::vector<std::pair<int64_t, std::string>> read_lines(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (is_lines_file(e.path().filename().string(), "classes")) parse_lines(read_text(e.path()), &out);
  }
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
  // `format` null: the classes table (`plan`, the first `outs` its scores, a second its indices),
  // or a whole-file format's records (o.format embeddings or detections: the rows of `outs`).
  LiveExportFile(std::unique_ptr<RankFile> inner, const LiveExportOptions& o, std::vector<Exported> outs,
                 std::unique_ptr<RowFormat> format, ClassPlan plan, std::size_t key_bytes)
      : inner_(std::move(inner)), o_(o), outs_(std::move(outs)), key_bytes_(key_bytes), format_(std::move(format)),
        plan_(std::move(plan)), queue_(static_cast<std::size_t>(std::max(o.threads, 1)) * 2) {
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
        if (format_) export_files(*u->batch, u->begin, u->end);
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
    if (b.keys.empty()) return "";
    const char* k = b.keys.data() + static_cast<std::size_t>(r) * key_bytes_;
    return std::string(k, std::find(k, k + key_bytes_, '\0'));
  }

  void export_files(const Staged& b, int64_t begin, int64_t end) {
    const Exported& e = outs_.front();
    for (int64_t r = begin; r < end; ++r) {
      if (b.status[static_cast<std::size_t>(r)] != 0) continue;  // no result: sluice export skips it too
      const fs::path target = fs::path(o_.dir) / export_path(key_of(b, r), format_->extension(), false);
      if (write_row_file(*format_, target, o_.rank, e.out,
                         b.data.front().data() + static_cast<std::size_t>(r) * e.row_bytes))
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
  std::unique_ptr<RowFormat> format_;
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

std::unique_ptr<RowFormat> make_row_format(const std::string& format) {
  if (format == "masks") return std::make_unique<MaskFormat>();
  if (format == "npy") return std::make_unique<NpyFormat>();
  return nullptr;
}

std::string live_export_source(const std::string& format, const std::vector<std::string>& outputs) {
  auto has = [&](const std::string& n) { return std::find(outputs.begin(), outputs.end(), n) != outputs.end(); };
  std::vector<std::string> order;
  if (format == "masks") order = {"argmax", "softmax", "logits"};
  else if (format == "npy") order = {"logits", "softmax"};
  else if (format == "classes") order = {"topk_probs", "softmax", "logits", "topk"};
  else if (format == "embeddings") order = {"embedding"};
  else if (format == "detections") order = {"detections"};
  else throw UsageError(str("--export '", format, "': choose masks, classes, npy, embeddings or detections"));
  for (const auto& n : order)
    if (has(n) || (has(n + "_values") && has(n + "_indices"))) return n;
  if (format == "npy" && !outputs.empty()) return outputs.front();
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
  const std::string probe = (dir / str(".probe.r", o.rank, kTemp)).string();
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
    } else if (!is_temp(name) && !(o.resume && is_lines_file(name))) {
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
  if (const std::unique_ptr<RowFormat> f = make_row_format(o.format)) {
    // Two samples on one file: the export would lose one of them (sluice export refuses it too).
    std::unordered_map<std::string, std::size_t> owner;
    owner.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto [it, fresh] = owner.emplace(export_path(keys[i], f->extension(), false), i);
      if (!fresh) {
        const KeyClash c = key_clash(keys[it->second], static_cast<int64_t>(it->second), keys[i], static_cast<int64_t>(i),
                                     it->first, f->extension(), false, false);
        throw InputError(str("--export ", o.format, ": ", c.what), c.hint);
      }
    }
  }
  // Temporaries of a killed attempt: no export thread runs yet on any rank (set-up is agreed first).
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && is_temp(it->path().filename().string())) fs::remove(it->path(), ec);
  }
  if (marker.empty()) {
    const fs::path tmp = dir / (std::string(kMarker) + kTemp), path = dir / kMarker;
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
  if (o.format == "classes") {
    // A class table needs one score per class.
    if (const StoredOutput* d = find(source))
      if (d->row_shape.empty() || shape_numel(d->row_shape) != d->row_shape[0])
        throw UsageError(str("--export classes: /outputs/", source, " has rows of shape ", shape_str(d->row_shape),
                             "; a class table needs one score per class ([C])"),
                         "export a segmentation model's outputs as masks (--export masks)");
    ClassPlan plan = class_plan(source, find, o.top_k);
    std::vector<Exported> outs{exported(plan.data)};
    if (!plan.ids.empty()) outs.push_back(exported(plan.ids));
    return std::make_unique<LiveExportFile>(std::move(inner), o, std::move(outs), nullptr, std::move(plan), key_bytes);
  }
  if (o.format == "embeddings") {
    const StoredOutput& d = *find(source);
    if (d.row_shape.size() != 1)
      throw UsageError(str("--export embeddings: /outputs/", source, " has rows of shape ", shape_str(d.row_shape),
                           "; embeddings are one vector [D] per sample"),
                       "store one vector per sample (--outputs embedding)");
    return std::make_unique<LiveExportFile>(std::move(inner), o, std::vector<Exported>{exported(source)}, nullptr,
                                            ClassPlan{}, key_bytes);
  }
  if (o.format == "detections") {
    const StoredOutput& d = *find(source);
    const StoredOutput* c = find(source + "_count");
    if (d.row_shape.size() != 2 || d.row_shape[1] != 6 || !c || !c->row_shape.empty())
      throw UsageError(str("--export detections: /outputs/", source, " has rows of shape ", shape_str(d.row_shape),
                           c ? "" : str(" and the job stores no ", source, "_count"),
                           "; detections are rows [K, 6] with a count per sample"),
                       "store detections (--outputs detections)");
    return std::make_unique<LiveExportFile>(std::move(inner), o,
                                            std::vector<Exported>{exported(source), exported(source + "_count")}, nullptr,
                                            ClassPlan{}, key_bytes);
  }
  return std::make_unique<LiveExportFile>(std::move(inner), o, std::vector<Exported>{exported(source)},
                                          make_row_format(o.format), ClassPlan{}, key_bytes);
}

namespace {

constexpr std::size_t kBlockBytes = 64u << 20;  // rows read at once, as sluice export reads them

int64_t block_rows(const StoredOutput& s) {
  const std::size_t row = static_cast<std::size_t>(shape_numel(s.row_shape)) * dtype_size(s.dtype);
  return static_cast<int64_t>(std::max<std::size_t>(1, kBlockBytes / std::max<std::size_t>(row, 1)));
}

// classes: the table sluice export writes by default (no labels, its default top-k), whole, from
// the lines the ranks computed as the job ran; a line a kill kept from being computed is computed
// here from outputs.h5.
bool write_classes_table(const LiveExportOptions& o, const RunOutputs& r, const std::string& source) {
  const fs::path target = fs::path(o.dir) / "classes.csv";
  std::error_code ec;
  if (fs::exists(target, ec)) return false;
  const ClassPlan p = class_plan(source, [&](const std::string& n) { return r.output(n); }, o.top_k);
  std::vector<std::pair<int64_t, std::string>> lines = read_lines(o.dir);
  std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string tmp = temp_path(target, o.rank);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) throw InputError(str("export: cannot create ", tmp, ": ", std::strerror(errno)));
  std::string text = csv_header(p.k, false, p.value_name);
  const int64_t n = r.size(), step = block_rows(*r.output(p.data));
  std::size_t at = 0;  // the next line of `lines`
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    std::vector<const std::string*> have(static_cast<std::size_t>(count), nullptr);
    bool missing = false;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = first + i;
      while (at < lines.size() && lines[at].first < row) ++at;
      if (at < lines.size() && lines[at].first == row) have[static_cast<std::size_t>(i)] = &lines[at].second;
      missing = missing || (r.status()[static_cast<std::size_t>(row)] == 0 && !have[static_cast<std::size_t>(i)]);
    }
    Tensor values, ids;
    std::vector<std::string> keys;
    if (missing) {
      keys = r.keys(first, count);
      values = r.read_rows(p.data, first, count);
      if (!p.ids.empty()) ids = r.read_rows(p.ids, first, count);
    }
    for (int64_t i = 0; i < count; ++i) {
      if (r.status()[static_cast<std::size_t>(first + i)] != 0) continue;
      if (const std::string* line = have[static_cast<std::size_t>(i)]) text += *line;
      else text += class_line(p, keys[static_cast<std::size_t>(i)], values, ids, i);
    }
    if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size()) {
      ::unlink(tmp.c_str());
      throw InputError(str("export: cannot write ", tmp, " (disk full?)"));
    }
    text.clear();
  }
  if (std::fclose(f.release()) != 0 || std::rename(tmp.c_str(), target.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw InputError(str("export: cannot write ", target.string(), ": ", std::strerror(errno)));
  }
  // The table is in place: the ranks' lines have served.
  for (const auto& e : fs::directory_iterator(o.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_lines_file(name, "classes")) fs::remove(e.path(), ec);
  }
  return true;
}

// The rows the ranks kept in their record files as the job ran (embeddings, detections), read
// back block by block; a block with a good row a kill kept from being recorded is read from
// outputs.h5 instead (the same values: both are the committed rows).
class RecordedRows {
 public:
  RecordedRows(const LiveExportOptions& o, const RunOutputs& r, std::vector<std::string> names)
      : r_(r), names_(std::move(names)), where_(static_cast<std::size_t>(r.size())) {
    for (const std::string& n : names_) {
      const StoredOutput& s = *r.output(n);
      row_bytes_.push_back(static_cast<std::size_t>(shape_numel(s.row_shape)) * dtype_size(s.dtype));
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

// Writes `text` as `target` through the rank's temporary name.
void write_whole(const fs::path& target, int rank, const std::string& text) {
  const std::string tmp = temp_path(target, rank);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) throw InputError(str("export: cannot create ", tmp, ": ", std::strerror(errno)));
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() || std::fclose(f.release()) != 0 ||
      std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(str("export: cannot write ", target.string(), ": ", std::strerror(e), " (disk full?)"));
  }
}

void say(const ExportNotes& n) {
  for (const std::string& line : n.notes) log_info("export: note: ", line);
  for (const std::string& line : n.warnings) log_warn("export: ", line);
}

// embeddings, detections: the files sluice export writes by default (float16; no labels), whole,
// from the rows the ranks kept.  Returns the files written (0: they were all there).
int64_t write_whole_files(const LiveExportOptions& o, const RunOutputs& r, const std::string& source) {
  const fs::path dir(o.dir);
  const std::vector<std::string> targets = o.format == "embeddings"
                                               ? std::vector<std::string>{"embeddings.npy", "embeddings.keys.txt"}
                                               : std::vector<std::string>{"detections.json", "detections.csv", "images.json"};
  std::error_code ec;
  bool all = true;
  for (const std::string& t : targets) all = all && fs::exists(dir / t, ec);
  if (all) return 0;
  const std::vector<std::string> names =
      o.format == "embeddings" ? std::vector<std::string>{source} : std::vector<std::string>{source, source + "_count"};
  RecordedRows rows(o, r, names);
  if (o.format == "embeddings") {
    const fs::path target = dir / targets[0];
    const std::string tmp = temp_path(target, o.rank);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) throw InputError(str("export: cannot create ", tmp, ": ", std::strerror(errno)));
    ExportNotes notes;
    std::string keys;
    try {
      keys = write_embeddings_npy(r, source, false, rows.reader(), f.get(), tmp, notes);
    } catch (const InputError& e) {
      f.reset();
      ::unlink(tmp.c_str());
      throw InputError(str(e.what(), " (the run itself is complete)"),
                       str("`sluice export ", o.run_dir, " --what embeddings --dtype float32 --out DIR` writes them"));
    } catch (...) {
      f.reset();
      ::unlink(tmp.c_str());
      throw;
    }
    if (std::fclose(f.release()) != 0 || std::rename(tmp.c_str(), target.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      throw InputError(str("export: cannot write ", target.string(), ": ", std::strerror(e), " (disk full?)"));
    }
    write_whole(dir / targets[1], o.rank, keys);
    say(notes);
  } else {
    const DetectionFiles files = detection_files(r, source, Categories{}, rows.reader());
    write_whole(dir / targets[0], o.rank, files.json);
    write_whole(dir / targets[1], o.rank, files.csv);
    write_whole(dir / targets[2], o.rank, files.images);
    say(files.notes);
  }
  log_debug("export: ", rows.from_outputs_h5(), " block(s) read from outputs.h5, the rest from the ranks' records");
  // The files are in place: the ranks' records have served.
  for (const auto& e : fs::directory_iterator(o.dir, ec))
    if (is_lines_file(e.path().filename().string(), o.format)) fs::remove(e.path(), ec);
  return static_cast<int64_t>(targets.size());
}

}  // namespace

int64_t finish_live_export(const LiveExportOptions& o) {
  const RunOutputs r(o.run_dir);
  std::vector<std::string> names;
  for (const auto& s : r.outputs()) names.push_back(s.name);
  const std::string source = live_export_source(o.format, names);
  if (o.format == "classes") {
    return write_classes_table(o, r, source) ? 1 : 0;
  }
  if (o.format == "embeddings" || o.format == "detections") return write_whole_files(o, r, source);
  const std::unique_ptr<RowFormat> format = make_row_format(o.format);
  const StoredOutput& s = *r.output(source);
  const std::size_t row_bytes = static_cast<std::size_t>(shape_numel(s.row_shape)) * dtype_size(s.dtype);
  std::atomic<int64_t> written{0};
  const int64_t n = r.size(), step = block_rows(s);
  for (int64_t first = 0; first < n; first += step) {
    const int64_t count = std::min(step, n - first);
    const std::vector<std::string> keys = r.keys(first, count);
    std::vector<int64_t> missing;
    std::error_code ec;
    for (int64_t i = 0; i < count; ++i)
      if (r.status()[static_cast<std::size_t>(first + i)] == 0 &&
          !fs::exists(fs::path(o.dir) / export_path(keys[static_cast<std::size_t>(i)], format->extension(), false), ec))
        missing.push_back(i);
    if (missing.empty()) continue;  // the usual case: the run wrote them all
    const Tensor rows = r.read_rows(source, first, count);
    std::atomic<std::size_t> next{0};
    std::vector<WorkerThread> pool;
    auto body = [&] {
      for (std::size_t m; (m = next++) < missing.size();) {
        const int64_t i = missing[m];
        const fs::path target = fs::path(o.dir) / export_path(keys[static_cast<std::size_t>(i)], format->extension(), false);
        if (write_row_file(*format, target, o.rank, s, rows.bytes.data() + static_cast<std::size_t>(i) * row_bytes))
          ++written;
      }
    };
    for (int t = 0; t < std::max(o.threads, 1); ++t) pool.emplace_back(str("export-", t), body);
    std::exception_ptr first_error;
    for (auto& t : pool) {
      std::exception_ptr e = t.join_noexcept();
      if (e && !first_error) first_error = e;
    }
    if (first_error) std::rethrow_exception(first_error);
  }
  return written;
}

}  // namespace sluice
