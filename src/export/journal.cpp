#include "export/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/json_text.h"
#include "core/sha256.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// A record's text: names that are not UTF-8 escaped (core/json_text.h), and then marked so that
// the manifest reads back the exact bytes.
std::string record(json j, const std::string& names) {
  if (!is_valid_utf8(names)) j["escaped"] = true;
  return dump_json(j);
}

std::string name_of(const json& j, const char* field) {
  const std::string s = j[field].get<std::string>();
  return j.value("escaped", false) ? unescape_utf8(s) : s;
}

}  // namespace

ExportJournal::ExportJournal(const std::string& out_dir, const std::string& header, bool overwrite,
                             const std::string& protected_dir)
    : dir_(out_dir), overwrite_(overwrite) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_, ec))
    throw InputError(str("export: cannot create the folder ", dir_, ec ? ": " + ec.message() : std::string()));
  real_dir_ = fs::canonical(dir_, ec).string();
  if (!protected_dir.empty()) {
    protected_ = fs::canonical(protected_dir, ec).string();
    if (!ec && real_dir_ == protected_)
      throw InputError(str("export: ", dir_, " is the run folder itself; the export writes into a folder of its own "
                           "(the default RUN_DIR/export, or another --out)"));
  }
  const long name_max = pathconf(dir_.c_str(), _PC_NAME_MAX);
  if (name_max > 0) name_max_ = name_max;
  // The folder `sluice run --export` of this very run wrote (its marker names the run folder).
  if (!protected_.empty()) {
    std::ifstream marker(fs::path(dir_) / kLiveMarker, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(marker)), std::istreambuf_iterator<char>());
    const json m = json::parse(text, nullptr, false);
    if (m.is_object() && m.contains("run") && m["run"].is_string() && m.contains("export") && m["export"].is_string()) {
      std::error_code mec;
      const std::string run = fs::weakly_canonical(m["run"].get<std::string>(), mec).string();
      if (!mec && run == protected_) live_format_ = m["export"].get<std::string>();
    }
  }
  const fs::path log_path = fs::path(dir_) / kName;
  if (fs::is_symlink(fs::symlink_status(log_path, ec)))
    throw InputError(str("export: ", log_path.string(), " is a symbolic link; the export appends only to its own "
                         "manifest: remove the link, or export to another --out"));
  if (present(log_path) && !fs::is_regular_file(log_path, ec))
    throw InputError(str("export: ", log_path.string(), " is not a file"));
  const int fd = open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  log_ = fd < 0 ? nullptr : fdopen(fd, "ab");
  if (!log_) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw InputError(str("export: cannot write ", log_path.string(), ": ", why));
  }
  // One export per folder at a time: two would interleave their records and race on the files.
  if (flock(fileno(log_), LOCK_EX | LOCK_NB) != 0)
    throw InputError(str("export: another sluice export is writing ", dir_, " (", kName, " is locked)"));
  bool ends_with_newline = true;
  std::string last_written;  // the header the newest "file" line was written under
  {
    std::ifstream in(log_path, std::ios::binary);
    std::string line, current;
    while (std::getline(in, line)) {
      // A torn line (the export was killed while appending it) does not parse and says nothing.
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      if (j.contains("export")) {
        current = j["export"].dump();
      } else if (j.contains("begin") && j["begin"].is_string()) {
        Entry& e = entries_[name_of(j, "begin")];
        e.claimed = true;
        e.complete = false;
      } else if (j.contains("file") && j["file"].is_string() && j.value("bytes", int64_t{-1}) >= 0) {
        Entry& e = entries_[name_of(j, "file")];
        e.claimed = true;
        e.complete = current == header;
        last_written = current;
        e.bytes = j["bytes"].get<int64_t>();
        e.sha256 = j.value("sha256", std::string());
      }
    }
    in.clear();
    in.seekg(0, std::ios::end);
    if (in && in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      ends_with_newline = in.get() == '\n';
    }
  }
  // Masks at each image's own size are not silently replaced by masks at the model's size (a rerun
  // that forgot --original-size would redo every file).
  if (!overwrite_ && !last_written.empty()) {
    const json before = json::parse(last_written, nullptr, false);
    const json now = json::parse(header, nullptr, false);
    if (before.is_object() && now.is_object() && before.value("original_size", false) && !now.value("original_size", true))
      throw InputError(str("export: ", dir_, " holds masks at each image's original size (an export with --original-size); ",
                           "this one would replace them with masks at the model's size"),
                       "add --original-size to finish or redo that export, --out another folder for model-size masks, or "
                       "--overwrite to replace them");
  }
  if (!ends_with_newline) std::fputc('\n', log_);
  append(json{{"export", json::parse(header)}}.dump());
}

ExportJournal::~ExportJournal() {
  if (log_) std::fclose(log_);
}

void ExportJournal::append(const std::string& line) {
  // One write and a flush per record: a killed export has handed every finished record to the
  // kernel, so only a power loss could lose one.
  if (std::fprintf(log_, "%s\n", line.c_str()) < 0 || std::fflush(log_) != 0)
    throw Error(str("export: cannot append to ", (fs::path(dir_) / kName).string()));
}

std::string ExportJournal::path(const std::string& rel) const { return (fs::path(dir_) / rel).string(); }

std::string ExportJournal::partial_path(const std::string& rel) const { return sluice::partial_path(dir_, rel); }

std::string ExportJournal::name_problem(const std::string& rel) const {
  const fs::path p(rel);
  for (const fs::path& part : p) {
    const std::size_t n = part.native().size();
    if (static_cast<long>(n) > name_max_)
      return str("its name part of ", n, " bytes is longer than the ", name_max_, " bytes the file system takes");
  }
  return "";
}

// The folders on the way to `rel`, and `rel` itself, must not be symbolic links: a link would take
// the export's file out of its folder.
void ExportJournal::check_no_links(const std::string& rel) {
  fs::path at(dir_);
  const fs::path r(rel);
  std::string sub;
  for (auto it = r.begin(); it != r.end(); ++it) {
    at /= *it;
    sub += (sub.empty() ? "" : "/") + it->string();
    const bool last = std::next(it) == r.end();
    if (!last && checked_dirs_.count(sub)) continue;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(at, ec)))
      throw InputError(str("export: ", at.string(), " is a symbolic link; the export writes only inside its folder ",
                           "and follows no link: remove the link, or export to another --out"));
    if (!last && fs::is_directory(fs::symlink_status(at, ec))) checked_dirs_.insert(sub);
  }
  if (!protected_.empty()) {
    const fs::path parent = (fs::path(real_dir_) / r).lexically_normal().parent_path();
    if (parent.string() == protected_)
      throw InputError(str("export: ", path(rel), " would be written among the run's own files in ", protected_,
                           "; export into a folder of its own"));
  }
}

bool ExportJournal::done(const std::string& rel) {
  auto it = entries_.find(rel);
  if (it == entries_.end() || !it->second.complete) return false;
  std::error_code ec;
  const fs::path p = path(rel);
  if (!fs::is_regular_file(p, ec) || static_cast<int64_t>(fs::file_size(p, ec)) != it->second.bytes || ec) return false;
  if (sha256_file(p.string()) != it->second.sha256) return false;
  ++skipped_;
  return true;
}

std::string ExportJournal::begin(const std::string& rel) {
  if (rel == kName) throw InputError(str("export: ", rel, " is the export's own manifest; choose another name"));
  check_no_links(rel);
  const std::string problem = name_problem(rel);
  if (!problem.empty()) throw InputError(str("export: cannot write ", path(rel), ": ", problem));
  const fs::path full = path(rel), partial = partial_path(rel);
  Entry& e = entries_[rel];
  for (const fs::path& p : {full, partial}) {
    std::error_code ec;
    if (present(p) && fs::is_directory(fs::symlink_status(p, ec)))
      throw InputError(str("export: ", p.string(), " is a folder where the export would write a file"));
    if (present(p) && !e.claimed && !overwrite_ && !(p == full && !live_format_.empty() && fs::is_regular_file(p, ec)))
      throw InputError(str("export: ", p.string(), " exists and was not written by sluice export (", kName,
                           " does not name it); move it away, export to another --out, or pass --overwrite"));
  }
  std::error_code ec;
  fs::create_directories(full.parent_path(), ec);
  if (ec) throw InputError(str("export: cannot create ", full.parent_path().string(), ": ", ec.message()));
  // A file of the run's live export: whether it is this export's file too is known once the new
  // bytes are written, so the path is claimed only then (commit).
  e.live = !e.claimed && !live_format_.empty() && present(full);
  if (!e.live) {
    append(record(json{{"begin", rel}}, rel));
    e.claimed = true;
  }
  e.complete = false;
  fs::remove(partial, ec);
  return partial.string();
}

void ExportJournal::commit(const std::string& rel, const std::string& key) {
  const fs::path full = path(rel), partial = partial_path(rel);
  std::error_code ec;
  Entry& live = entries_[rel];
  if (live.live) {
    live.live = false;
    const std::string sha = sha256_file(partial.string());
    const auto bytes = static_cast<int64_t>(fs::file_size(partial, ec));
    if (!ec && bytes == static_cast<int64_t>(fs::file_size(full, ec)) && !ec && sha == sha256_file(full.string())) {
      fs::remove(partial, ec);  // the run's own file is this export's, byte for byte: kept
      append(record(json{{"begin", rel}}, rel));
      live.claimed = true;
      live.bytes = bytes;
      live.sha256 = sha;
      append(record(json{{"file", rel}, {"key", key}, {"bytes", bytes}, {"sha256", sha}}, rel + key));
      live.complete = true;
      ++skipped_;
      return;
    }
    if (!overwrite_) {
      fs::remove(partial, ec);
      throw InputError(str("export: ", full.string(), " was written by the run's own --export ", live_format_,
                           " and differs from what this export writes there"),
                       "export to another folder (--out DIR), or pass --overwrite to replace the run's files");
    }
    append(record(json{{"begin", rel}}, rel));
    live.claimed = true;
  }
  fs::rename(partial, full, ec);
  if (ec) throw Error(str("export: cannot move ", partial.string(), " to ", full.string(), ": ", ec.message()));
  Entry& e = entries_[rel];
  e.bytes = static_cast<int64_t>(fs::file_size(full));
  e.sha256 = sha256_file(full.string());
  append(record(json{{"file", rel}, {"key", key}, {"bytes", e.bytes}, {"sha256", e.sha256}}, rel + key));
  e.complete = true;
  ++written_;
}

}  // namespace sluice
