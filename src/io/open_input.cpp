// --input: which kind of input a path is, and opening it.  The kind comes from what the path is
// (a folder, a .tar file or brace pattern, glob characters, the extension), or from --input-kind;
// a file without a known extension is recognized by its first bytes (HDF5, .npy, tar, Parquet).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/file_scan.h"
#include "io/source.h"
#include "io/source_util.h"

namespace sluice {

namespace {

constexpr int64_t kDefaultSyntheticSamples = 512;

std::string lower_extension(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext;
}

// The text kind an extension names ("" when none): .jsonl/.ndjson, .csv, .tsv.
std::string text_kind(const std::string& ext) {
  if (ext == "jsonl" || ext == "ndjson") return "jsonl";
  if (ext == "csv" || ext == "tsv") return ext;
  return "";
}

bool is_text_kind(const std::string& kind) { return kind == "jsonl" || kind == "csv" || kind == "tsv" || kind == "text"; }

bool is_parquet_ext(const std::string& ext) { return ext == "parquet" || ext == "parq" || ext == "pq"; }

// Whether a folder holds Parquet files rather than images: the first folder of a breadth-first
// walk that holds either decides, images first (Hugging Face's dataset/data/train-*.parquet,
// Spark's out.parquet/part-*.parquet).  Cheap: it stops there, or after a few thousand entries.
bool folder_holds_parquet(const std::string& root) {
  namespace fs = std::filesystem;
  std::deque<fs::path> todo{fs::path(root)};
  int budget = 4096;
  while (!todo.empty() && budget > 0) {
    const fs::path dir = todo.front();
    todo.pop_front();
    std::error_code ec;
    std::vector<fs::path> subdirs;
    bool images = false, parquet = false;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end && budget > 0; it.increment(ec), --budget) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || name[0] == '_') continue;
      std::error_code e2;
      if (it->is_directory(e2)) subdirs.push_back(it->path());
      else if (is_image_name(name)) images = true;
      else if (is_parquet_ext(lower_extension(name))) parquet = true;
    }
    if (images || parquet) return !images;
    std::sort(subdirs.begin(), subdirs.end());
    todo.insert(todo.end(), subdirs.begin(), subdirs.end());
  }
  return false;
}

// The kind a regular file's first bytes say it is ("" when none).
std::string sniff(const std::string& path) {
  unsigned char head[512] = {0};
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  const ssize_t n = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ::pread(fd, head, sizeof head, 0) : 0;
  ::close(fd);
  if (n >= 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0) return "hdf5";
  if (n >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return "npy";
  if (n == 512 && std::memcmp(head + 257, "ustar", 5) == 0) return "tar";
  if (n >= 4 && std::memcmp(head, "PAR1", 4) == 0) return "parquet";
  return "";
}

}  // namespace

std::string detect_input_kind(const std::string& path) {
  if (path == "synthetic") return "synthetic";
  const std::string ext = lower_extension(path);
  if (path.rfind("s3://", 0) == 0) return "parquet";  // object storage: Parquet inputs only
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;  // a path that exists is never read as a pattern
  if (exists && S_ISDIR(st.st_mode)) return is_parquet_ext(ext) || folder_holds_parquet(path) ? "parquet" : "folder";
  if (!exists && has_brace_pattern(path)) return ext == "tar" ? "tar" : "";
  if (!exists && has_glob_chars(path)) return ext == "tar" ? "tar" : is_parquet_ext(ext) ? "parquet" : "glob";
  if (ext == "tar") return "tar";
  if (ext == "txt" || ext == "lst") return "list";
  if (ext == "npy") return "npy";
  if (ext == "h5" || ext == "hdf5" || ext == "he5") return "hdf5";
  if (is_parquet_ext(ext)) return "parquet";
  if (!text_kind(ext).empty()) return text_kind(ext);
  // corpus.jsonl.gz: the text source refuses it, saying how to decompress it.
  if ((ext == "gz" || ext == "zst" || ext == "xz" || ext == "bz2") && path.size() > ext.size() + 1) {
    const std::string inner = text_kind(lower_extension(path.substr(0, path.size() - ext.size() - 1)));
    if (!inner.empty()) return inner;
  }
  if (exists && S_ISREG(st.st_mode)) return sniff(path);
  return "";
}

std::unique_ptr<Source> open_input(const InputOptions& o) {
  std::string kind = o.kind;
  if (kind.empty() || kind == "auto") {
    kind = detect_input_kind(o.path);
    if (kind.empty() && has_brace_pattern(o.path))
      throw InputError(str("input ", o.path, ": brace patterns ({000000..000099}, {a,b}) name tar shards, and this ",
                           "one does not end in .tar; for image files use a folder, a glob or a list"));
    if (kind.empty()) {
      // A compressed tarball (.tar.gz, .tgz, .tar.zst, ...): say so rather than "not an input".
      unsigned char head[8] = {0};
      const int fd = ::open(o.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        struct stat st;
        const ssize_t n = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ::pread(fd, head, sizeof head, 0) : 0;
        ::close(fd);
        const char* c = n > 0 ? compression_magic(head, static_cast<std::size_t>(n)) : nullptr;
        if (c) throw InputError(str("input ", o.path, ": ", compressed_tar_text(c)));
      }
      struct stat st;
      const bool exists = ::stat(o.path.c_str(), &st) == 0;
      throw InputError(str("input ", o.path, ": ", exists ? "not an input sluice knows" : "no such file or folder",
                           "; --input takes 'synthetic', an HDF5 file (.h5, .hdf5), a .npy file, a folder of images, ",
                           "a glob of images ('data/*/img_*.jpg'), a list of paths (.txt, .lst), tar shards ",
                           "('shards/train-{000000..000099}.tar'), Parquet (.parquet: a file, a folder or glob of them, s3://), ",
                           "or text (.jsonl, .ndjson, .csv, .tsv; plain text ",
                           "with --input-kind text); --input-kind (", kInputKinds,
                           ") names the kind when the path does not show it, and for text (", kTextInputKinds, ")"));
    }
  }
  if (!o.keys.empty() && kind != "hdf5")
    throw UsageError(str("--input-keys names a key dataset of an HDF5 input; the input ", o.path, " is ", kind,
                         " (its keys are ", kind == "tar" ? "the members' names" : kind == "npy" ? "the row numbers"
                                            : is_text_kind(kind) ? "the record indices, or --key-field's values"
                                                                 : "the file paths",
                         ")"));
  if (!o.text.key_field.empty() && !is_text_kind(kind) && kind != "parquet")
    throw UsageError(str("--key-field names a field of a text input (jsonl, csv, tsv) or a Parquet column; the input ",
                         o.path, " is ", kind));
  if (!o.image_field.empty() && kind != "parquet")
    throw UsageError(str("--image-field names a column of a Parquet input; the input ", o.path, " is ", kind));
  if (kind != "parquet" && o.path.rfind("s3://", 0) == 0)
    throw InputError(str("input ", o.path, ": s3:// inputs are Parquet (a .parquet object, a prefix or a glob of them); ",
                         "--input-kind ", kind, " reads local files"));
  if (is_text_kind(kind)) return open_text_source(o.path, kind, o.text, o.samples);
  if (kind == "parquet") return open_parquet_source(o.path, o.image_field, o.text, o.samples);
  if (kind == "synthetic")
    return make_synthetic_source(o.samples > 0 ? o.samples : kDefaultSyntheticSamples, o.sample_shape, o.dtype, o.seed);
  if (kind == "hdf5") return open_hdf5_source(o.path, o.dataset, o.keys, o.samples);
  if (kind == "npy") return open_npy_source(o.path, o.samples);
  if (kind == "folder") return open_folder_source(o.path, o.samples);
  if (kind == "glob") return open_glob_source(o.path, o.samples);
  if (kind == "list") return open_list_source(o.path, o.samples);
  if (kind == "tar") return open_tar_source(o.path, o.samples);
  throw UsageError(str("--input-kind ", kind, ": not one of auto, ", kInputKinds, ", ", kTextInputKinds));
}

}  // namespace sluice
