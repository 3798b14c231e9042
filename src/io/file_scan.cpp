// Enumerating input files (io/file_scan.h): a recursive folder walk, globs, brace ranges.
// Folders are read through file descriptors (openat/fdopendir/fstatat relative to the open
// folder), so no path is resolved twice, and readdir's d_type spares a stat for most entries.
#include "io/file_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "io/encoded_source.h"

namespace sluice {

namespace {

enum class Kind { Dir, File, Other, Missing };

struct Entry {
  std::string name;
  Kind kind;
};

// Reads the entries of the open folder `fd` (a duplicate of it, so `fd` stays usable for
// openat/fstatat).  Links and file systems without d_type cost one fstatat; other entries none.
std::vector<Entry> list_folder(int fd, const std::string& shown) {
  const int copy = ::dup(fd);
  DIR* d = copy < 0 ? nullptr : ::fdopendir(copy);
  if (!d) {
    const int err = errno;
    if (copy >= 0) ::close(copy);
    throw InputError(str("input ", shown, ": cannot read the folder: ", std::strerror(err)));
  }
  std::vector<Entry> out;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
    Kind k = Kind::Other;
    if (e->d_type == DT_DIR) {
      k = Kind::Dir;
    } else if (e->d_type == DT_REG) {
      k = Kind::File;
    } else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(fd, n, &st, 0) != 0) k = Kind::Missing;  // a dangling link
      else if (S_ISDIR(st.st_mode)) k = Kind::Dir;
      else if (S_ISREG(st.st_mode)) k = Kind::File;
    }
    out.push_back({n, k});
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) throw InputError(str("input ", shown, ": cannot read the folder: ", std::strerror(err)));
  // In byte order, not readdir's: a folder reached under two names (a link to a folder beside the
  // folder) is walked once, under the first of its names in that order, the same on every rank and
  // every run.
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Walks folders once each (per glob component), following links, with loop protection by
// (device, inode).
class Walker {
 public:
  Walker(std::string root, const GlobPattern* glob, bool images_only)
      : root_(std::move(root)), glob_(glob), images_only_(images_only) {}

  FileScan run() {
    const int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw InputError(str("input ", root_, ": ", err == ENOENT ? "no such folder" : err == ENOTDIR ? "not a folder"
                                                                                   : std::strerror(err)));
    }
    visit(fd, "", 0);
    return std::move(scan_);
  }

 private:
  // Opens sub-folder `name` of `parent` unless it was walked already for pattern component
  // `part` (a glob may walk one folder for several components: 'a/**/b/*.jpg' visits a/b both as
  // the 'b' and inside the '**'); -1 then.
  int open_sub(int parent, const std::string& name, const std::string& rel, std::size_t part) {
    const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw InputError(str("input ", root_, ": cannot open the folder ", rel, ": ", std::strerror(errno)));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !seen_.insert({st.st_dev, st.st_ino, part}).second) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void add_file(const std::string& rel) {
    if (!images_only_ || is_image_name(rel)) scan_.files.push_back(rel);
    else ++scan_.ignored;
  }

  // Lists the open folder `fd` and goes on from there; closes `fd`.
  void visit(int fd, const std::string& rel, std::size_t part) {
    struct stat st;
    if (::fstat(fd, &st) == 0) seen_.insert({st.st_dev, st.st_ino, part});
    try {
      const std::vector<Entry> entries = list_folder(fd, join(root_, rel));
      if (!glob_) walk_all(fd, rel, entries);
      else match(fd, rel, entries, part);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }

  // The folder walk: every non-hidden file, every non-hidden sub-folder.
  void walk_all(int dir, const std::string& rel, const std::vector<Entry>& entries) {
    for (const Entry& e : entries) {
      const std::string r = rel + e.name;
      if (e.name[0] == '.') {
        ++scan_.ignored;
      } else if (e.kind == Kind::Dir) {
        const int sub = open_sub(dir, e.name, r, 0);
        if (sub >= 0) visit(sub, r + "/", 0);
      } else if (e.kind == Kind::File) {
        add_file(r);
      } else if (e.kind == Kind::Missing && is_image_name(e.name)) {
        throw InputError(str("input ", root_, ": ", r, " is a link to nothing"));
      } else {
        ++scan_.ignored;
      }
    }
  }

  // The glob walk: component `part` of the pattern against this folder's entries.
  void match(int dir, const std::string& rel, const std::vector<Entry>& entries, std::size_t part) {
    const std::vector<std::string>& parts = glob_->parts;
    const bool last = part + 1 == parts.size();
    if (parts[part] == "**") {
      // Zero folders: the next component applies here.  One or more: every visible sub-folder.
      if (last) {
        for (const Entry& e : entries)
          if (e.kind == Kind::File && e.name[0] != '.') add_file(rel + e.name);
      } else {
        match(dir, rel, entries, part + 1);
      }
      for (const Entry& e : entries) {
        if (e.kind != Kind::Dir || e.name[0] == '.') continue;
        const int sub = open_sub(dir, e.name, rel + e.name, part);
        if (sub >= 0) visit(sub, rel + e.name + "/", part);
      }
      return;
    }
    for (const Entry& e : entries) {
      if (::fnmatch(parts[part].c_str(), e.name.c_str(), FNM_PERIOD) != 0) continue;
      if (last && e.kind == Kind::File) {
        add_file(rel + e.name);
      } else if (!last && e.kind == Kind::Dir) {
        const int sub = open_sub(dir, e.name, rel + e.name, part + 1);
        if (sub >= 0) visit(sub, rel + e.name + "/", part + 1);
      }
    }
  }

  std::string root_;
  const GlobPattern* glob_;
  bool images_only_;
  std::set<std::tuple<dev_t, ino_t, std::size_t>> seen_;  // (folder, pattern component) walked
  FileScan scan_;
};

}  // namespace

FileScan scan_folder(const std::string& root) { return Walker(root, nullptr, true).run(); }

bool has_glob_chars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

GlobPattern split_glob(const std::string& pattern) {
  GlobPattern g;
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= pattern.size()) {
    const std::size_t slash = std::min(pattern.find('/', at), pattern.size());
    std::string p = pattern.substr(at, slash - at);
    if (!p.empty() && p != "." && !(p == "**" && !parts.empty() && parts.back() == "**")) parts.push_back(p);
    at = slash + 1;
  }
  std::string root = pattern.rfind('/', 0) == 0 ? "/" : "";
  std::size_t k = 0;
  for (; k < parts.size() && !has_glob_chars(parts[k]); ++k) root = root.empty() || root == "/" ? root + parts[k] : root + "/" + parts[k];
  g.root = root.empty() ? "." : root;
  g.parts.assign(parts.begin() + static_cast<std::ptrdiff_t>(k), parts.end());
  return g;
}

FileScan scan_glob(const GlobPattern& glob, bool images_only) {
  if (glob.parts.empty()) throw InputError(str("input ", glob.root, ": not a glob (no *, ? or [ in it)"));
  return Walker(glob.root, &glob, images_only).run();
}

bool has_brace_pattern(std::string_view s) {
  const std::size_t open = s.find('{');
  return open != std::string_view::npos && s.find('}', open) != std::string_view::npos;
}

namespace {

constexpr std::size_t kMaxExpansion = 1000000;

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

void expand_into(const std::string& pattern, const std::string& whole, std::vector<std::string>& out) {
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) throw UsageError(str("input ", whole, ": unbalanced '}'"));
    out.push_back(pattern);
    return;
  }
  // The matching close brace and the top-level commas between.
  int depth = 0;
  std::size_t close = std::string::npos;
  std::vector<std::size_t> commas;
  for (std::size_t i = open; i < pattern.size(); ++i) {
    if (pattern[i] == '{') ++depth;
    if (pattern[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
    if (pattern[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (close == std::string::npos) throw UsageError(str("input ", whole, ": unbalanced '{'"));
  const std::string head = pattern.substr(0, open), body = pattern.substr(open + 1, close - open - 1);
  const std::string tail = pattern.substr(close + 1);
  std::vector<std::string> alternatives;
  const std::size_t dots = body.find("..");
  if (commas.empty() && dots != std::string::npos) {
    const std::string lo = body.substr(0, dots), hi = body.substr(dots + 2);
    if (!all_digits(lo) || !all_digits(hi))
      throw UsageError(str("input ", whole, ": {", body, "} is not a range of numbers like {000000..000099}"));
    const long long a = std::stoll(lo), b = std::stoll(hi);
    const bool padded = (lo.size() > 1 && lo[0] == '0') || (hi.size() > 1 && hi[0] == '0');
    const std::size_t width = padded ? std::max(lo.size(), hi.size()) : 0;
    const long long step = a <= b ? 1 : -1;
    if (static_cast<std::size_t>((b - a) * step) >= kMaxExpansion)
      throw UsageError(str("input ", whole, ": {", body, "} names more than ", kMaxExpansion, " shards"));
    for (long long v = a;; v += step) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      alternatives.push_back(s);
      if (v == b) break;
    }
  } else if (!commas.empty()) {
    std::size_t from = open + 1;
    for (std::size_t c : commas) {
      alternatives.push_back(pattern.substr(from, c - from));
      from = c + 1;
    }
    alternatives.push_back(pattern.substr(from, close - from));
  } else {
    // '{x}' is no pattern (as in the shell): literal, and the expansion goes on after it.
    std::vector<std::string> rest;
    expand_into(tail, whole, rest);
    for (const std::string& r : rest) out.push_back(head + "{" + body + "}" + r);
    return;
  }
  for (const std::string& alt : alternatives) {
    expand_into(head + alt + tail, whole, out);
    if (out.size() > kMaxExpansion) throw UsageError(str("input ", whole, ": more than ", kMaxExpansion, " names"));
  }
}

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern) {
  std::vector<std::string> out;
  expand_into(pattern, pattern, out);
  return out;
}

}  // namespace sluice
