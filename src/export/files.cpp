// An export's files: naming, collisions, temporaries and the run's own export folder
// (export/files.h).
#include "export/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;

// A short, stable name for the temporary file of `rel` (FNV-1a, 64 bits): the same on every run, so a
// rerun finds the one a killed export left.
std::string short_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::string export_path(const std::string& key, const std::string& ext, bool keep_extension, bool* went_up) {
  std::vector<std::string> parts;
  std::string cur;
  auto flush = [&] {
    if (cur == "..") {
      cur = kUpPart;
      if (went_up) *went_up = true;
    }
    if (!cur.empty() && cur != ".") parts.push_back(cur);
    cur.clear();
  };
  for (char c : key) {
    if (c == '/') {
      flush();
      continue;
    }
    const auto u = static_cast<unsigned char>(c);
    cur += (u < 0x20 || u == 0x7f || c == '\\') ? '_' : c;
  }
  flush();
  if (parts.empty()) throw InputError(str("export: key '", key, "' names no file"));
  std::string& last = parts.back();
  if (!keep_extension) {
    const std::size_t dot = last.rfind('.');
    if (dot != std::string::npos && dot > 0) last.erase(dot);
  }
  std::string rel;
  for (const auto& p : parts) rel += (rel.empty() ? "" : "/") + p;
  return rel + ext;
}

KeyClash key_clash(const std::string& first, int64_t first_row, const std::string& second, int64_t second_row,
                   const std::string& rel, const std::string& ext, bool keep_extension, bool can_keep_extension) {
  KeyClash c;
  if (first == second || fs::path(first).lexically_normal() == fs::path(second).lexically_normal()) {
    c.what = str("rows ", first_row, " and ", second_row, " are the same file, '", first, "'",
                 first == second ? "" : str(" and '", second, "'"), ", listed twice in the input (both would be written to ",
                 rel, ")");
    c.hint = "the input lists the same file twice: remove the repeated line from the list file, then run the job again";
    return c;
  }
  c.what = str("keys '", first, "' (row ", first_row, ") and '", second, "' (row ", second_row,
               ") would both be written to ", rel);
  if (can_keep_extension && !keep_extension && export_path(first, ext, true) != export_path(second, ext, true))
    c.hint = str("pass --keep-extension to name files <key>", ext, " (", export_path(first, ext, true), " and ",
                 export_path(second, ext, true), ")");
  else
    c.hint = str("rename one of the two files in the input (a file is named after its key",
                 keep_extension ? "" : " without its extension", ", with '\\' and control characters as '_' and each '..' as '",
                 kUpPart, "')");
  return c;
}

std::string FileNames::claim(const std::string& key, int64_t row) {
  bool up = false;
  std::string rel = export_path(key, ext_, keep_extension_, &up);
  if (up && ++went_up_ == 1) first_up_ = {key, rel};
  const auto [it, fresh] = owner_.emplace(rel, std::make_pair(key, row));
  if (!fresh) {
    const KeyClash c = key_clash(it->second.first, it->second.second, key, row, rel, ext_, keep_extension_,
                                 can_keep_extension_);
    throw InputError(prefix_ + c.what, c.hint);
  }
  return rel;
}

bool is_partial(const std::string& name) {
  const std::size_t n = std::strlen(kPartial);
  return name.size() >= n && name.compare(name.size() - n, std::string::npos, kPartial) == 0;
}

std::string partial_path(const std::string& dir, const std::string& rel, int rank) {
  const std::string name = str(".", short_hash(rel), rank >= 0 ? str(".r", rank) : std::string(), kPartial);
  return ((fs::path(dir) / rel).parent_path() / name).string();
}

void ExportFolder::write(const std::string& rel, const std::string& key, const std::string& bytes) {
  const std::string tmp = begin(rel);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(str("export: cannot create ", tmp, " (for ", rel, "): ", std::strerror(errno)));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    ::unlink(tmp.c_str());
    throw Error(str("export: cannot write ", tmp, " (for ", rel, "; disk full?)"));
  }
  commit(rel, key);
}

bool RunExportFolder::done(const std::string& rel) {
  std::error_code ec;
  return fs::exists(fs::path(dir_) / rel, ec);
}

std::string RunExportFolder::begin(const std::string& rel) {
  const fs::path target = fs::path(dir_) / rel;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw InputError(str("export: cannot create the folder ", target.parent_path().string(), ": ", ec.message()));
  return partial_path(dir_, rel, rank_);
}

void RunExportFolder::commit(const std::string& rel, const std::string&) {
  const std::string tmp = partial_path(dir_, rel, rank_), target = (fs::path(dir_) / rel).string();
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(str("export: cannot rename ", tmp, " to ", target, ": ", std::strerror(e)));
  }
  ++written_;
}

}  // namespace sluice
