// Image files as an encoded source: a folder (recursive), a glob, or a text file listing paths.
// The list of samples is fixed when the source opens (every rank builds the same one: sorted
// bytewise by relative path for folders and globs, the list's own order for lists), and so is each
// file's size, which sizes the in-slots.  A file that vanishes, becomes unreadable or changes size
// during the run is one bad sample (EncodedSample::error), never a failed job.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "io/encoded_source.h"
#include "io/file_scan.h"
#include "io/source_util.h"

namespace sluice {

namespace {

constexpr std::size_t kListedProblems = 5;  // files named in an error at open; the rest are counted

std::string absolute_text(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

constexpr std::size_t kParallelStat = 4096;  // fewer files are stat'ed on the calling thread
constexpr std::size_t kStatThreads = 8;

// Readable by this process?  Decided from the mode bits when they are clear; access(2) otherwise.
bool readable(const std::string& path, const struct stat& st) {
  if (::geteuid() == 0 || (st.st_mode & S_IROTH)) return true;
  return ::access(path.c_str(), R_OK) == 0;
}

// "" and the size and modification time of a readable regular file, or why it is not one.
std::string stat_file(const std::string& path, uint64_t* size, int64_t* mtime_ns) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "does not exist" : std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "is a folder";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (!readable(path, st)) return "cannot be read (permission denied)";
  *size = static_cast<uint64_t>(st.st_size);
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return "";
}

class FileSource final : public EncodedSource {
 public:
  FileSource(std::string kind, std::string shown, std::string base, int64_t ignored)
      : shown_(std::move(shown)), base_(std::move(base)), ignored_(ignored) {
    kind_ = std::move(kind);
    root_ = absolute_text(kind_ == "list" ? shown_ : base_);
  }

  std::string describe() const override {
    std::string s = str(kind_, " ", shown_, ": ", size(), " file", size() == 1 ? "" : "s");
    if (ignored_ > 0) s += str(" (", ignored_, " other file", ignored_ == 1 ? "" : "s", " ignored)");
    return s;
  }

  // Fixes the sample list: keys (relative paths) in their final order, the first `limit` kept,
  // each one's size and modification time from one stat.  Missing, unreadable or non-regular files end the open with one
  // InputError naming the first few.  The stats run on a few threads: on a network file system each
  // is a round trip to the server.
  void open(std::vector<std::string> rel, int64_t limit) {
    if (limit > 0 && static_cast<int64_t>(rel.size()) > limit) rel.resize(static_cast<std::size_t>(limit));
    std::vector<uint64_t> sizes(rel.size());
    std::vector<std::string> why(rel.size());
    const std::size_t threads = rel.size() < kParallelStat ? 1 : kStatThreads;
    std::vector<uint64_t> mtimes(threads, 0);  // each thread's share of the mtimes_ sum
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        uint64_t sum = 0;
        for (std::size_t i = t; i < rel.size(); i += threads) {
          int64_t mtime_ns = 0;
          why[i] = stat_file(path_of(rel[i]), &sizes[i], &mtime_ns);
          sum += mtime_entry(i, mtime_ns);
        }
        mtimes[t] = sum;
      });
    for (std::thread& th : pool) th.join();
    for (uint64_t m : mtimes) mtimes_ += m;
    mtimes_known_ = true;

    std::vector<std::string> problems;
    std::size_t problem_count = 0;
    for (std::size_t i = 0; i < rel.size(); ++i) {
      if (why[i].empty()) continue;
      if (problems.size() < kListedProblems) problems.push_back(str(path_of(rel[i]), " ", why[i]));
      ++problem_count;
    }
    if (problem_count > 0) {
      std::string list;
      for (const std::string& p : problems) list += str(list.empty() ? " " : "; ", p);
      if (problem_count > problems.size()) list += str("; and ", problem_count - problems.size(), " more");
      throw InputError(str("input ", shown_, ": ", problem_count, " of its ", rel.size(), " files cannot be read:", list),
                       kind_ == "list" ? "a list (.txt, .lst) holds one image path per line, relative to the list's "
                                         "folder; fix or remove those lines, or name the kind of --input with --input-kind"
                                       : "the files changed while the input was listed, or cannot be read by this user");
    }
    for (const std::string& r : rel) keys_.add(r);
    sizes_ = std::move(sizes);
    finish_open();
  }

 protected:
  void read_samples(int64_t first, int64_t count, uint8_t* dst, EncodedSample* out) const override {
    for (int64_t k = 0; k < count; ++k) {
      const std::size_t i = static_cast<std::size_t>(first + k);
      const std::string path = path_of(keys_[i]);
      // A file replaced by a FIFO during the run must not block the reader (open_regular).
      std::string why;
      uint64_t size = 0;
      const int fd = open_regular(path, &size, &why);
      if (fd < 0) {
        out[k].error = str(path, ": cannot open: ", why);
        continue;
      }
      if (size != sizes_[i]) {
        out[k].error = str(path, ": changed since the job started (", size, " bytes, was ", sizes_[i], ")");
      } else {
        const std::string e = pread_exact(fd, dst + out[k].offset, sizes_[i], 0);
        if (!e.empty()) out[k].error = str(path, ": ", e);
      }
      ::close(fd);
    }
  }

  std::string read_head(int64_t i, uint8_t* dst, std::size_t n) const override {
    const std::string path = path_of(keys_[static_cast<std::size_t>(i)]);
    std::string why;
    uint64_t size = 0;
    const int fd = open_regular(path, &size, &why);
    if (fd < 0) return str("cannot open: ", why);
    const std::string e = pread_exact(fd, dst, n, 0);
    ::close(fd);
    return e;
  }

 private:
  std::string path_of(std::string_view key) const {
    if (!key.empty() && key.front() == '/') return std::string(key);
    std::string p = base_;
    if (!p.empty() && p.back() != '/') p += '/';
    return p.append(key.data(), key.size());
  }

  std::string shown_;   // the --input text
  std::string base_;    // keys are relative to this folder
  int64_t ignored_;
};

void sort_unique(std::vector<std::string>& v) {
  std::sort(v.begin(), v.end());  // std::string compares bytes as unsigned char
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

std::unique_ptr<Source> open_folder_source(const std::string& folder, int64_t limit) {
  FileScan scan = scan_folder(folder);
  if (scan.files.empty())
    throw InputError(str("input ", folder, ": no image files (.jpg, .jpeg, .png) in the folder or below it",
                         scan.ignored > 0 ? str(" (", scan.ignored, " other files)") : std::string()));
  sort_unique(scan.files);
  auto src = std::make_unique<FileSource>("folder", folder, folder, scan.ignored);
  src->open(std::move(scan.files), limit);
  return src;
}

std::unique_ptr<Source> open_glob_source(const std::string& pattern, int64_t limit) {
  const GlobPattern glob = split_glob(pattern);
  FileScan scan = scan_glob(glob, true);
  if (scan.files.empty())
    throw InputError(str("input ", pattern, ": the pattern matches no image files (.jpg, .jpeg, .png)",
                         scan.ignored > 0 ? str(" (", scan.ignored, " other files)") : std::string()));
  sort_unique(scan.files);
  auto src = std::make_unique<FileSource>("glob", pattern, glob.root, scan.ignored);
  src->open(std::move(scan.files), limit);
  return src;
}

std::unique_ptr<Source> open_list_source(const std::string& list, int64_t limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(list, ec)) throw InputError(str("input ", list, ": a folder, not a list of paths"));
  // Opened without blocking: a list that is a FIFO would wait for a writer forever.
  std::string why;
  uint64_t bytes = 0;
  const int fd = open_regular(list, &bytes, &why);
  if (fd < 0)
    throw InputError(str("input ", list, ": cannot read the list: ", why),
                     why.find("regular") != std::string::npos
                         ? "a list (.txt, .lst) is a regular text file, one path per line"
                         : "");
  std::string text(static_cast<std::size_t>(bytes), '\0');
  const std::string read_error = pread_exact(fd, reinterpret_cast<uint8_t*>(text.data()), bytes, 0);
  ::close(fd);
  if (!read_error.empty()) throw InputError(str("input ", list, ": cannot read the list: ", read_error));
  // A byte-order mark (which some Windows editors write) is not part of the first path.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  std::istringstream in(text);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    const std::size_t b = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(a, b - a + 1));
    if (line.find('\0') != std::string::npos) throw InputError(str("input ", list, ": not a text file (NUL bytes)"));
  }
  if (in.bad()) throw InputError(str("input ", list, ": cannot read the list"));
  if (keys.empty()) throw InputError(str("input ", list, ": the list names no files (one path per line, # comments)"));
  const std::string folder = std::filesystem::path(list).parent_path().string();
  auto src = std::make_unique<FileSource>("list", list, folder.empty() ? "." : folder, 0);
  src->open(std::move(keys), limit);
  return src;
}

}  // namespace sluice
