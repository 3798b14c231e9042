#include "io/file_identity.h"

#include <sys/stat.h>

#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"

namespace sluice {

std::optional<FileIdentity> FileIdentity::of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  FileIdentity id;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<int64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

void check_unchanged(const std::string& path, const FileIdentity& opened) {
  const std::optional<FileIdentity> now = FileIdentity::of(path);
  std::string what;
  if (!now) what = "it is gone";
  else if (now->device != opened.device || now->inode != opened.inode) what = "it was replaced by another file";
  else if (now->size != opened.size) what = str("its size went from ", opened.size, " to ", now->size, " bytes");
  else if (now->mtime_ns != opened.mtime_ns) what = "it was modified";
  else return;
  throw InputError(str("input ", path, " changed during the run: ", what,
                       "; rows read since are not committed (restore the input, then rerun with --resume; a restored copy with "
                       "another modification time needs --accept-changed-input)"));
}

namespace {

// A fingerprint split into its head ("npy /data/in.npy") and its fields in order; a word without
// '=' continues the field before it ("samples=10 of 20").
struct Fingerprint {
  std::string head;
  std::vector<std::pair<std::string, std::string>> fields;
};

bool starts_field(const std::string& word) {
  const std::size_t eq = word.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  for (std::size_t i = 0; i < eq; ++i)
    if (!((word[i] >= 'a' && word[i] <= 'z') || word[i] == '_')) return false;
  return true;
}

Fingerprint parse_fingerprint(const std::string& text) {
  Fingerprint f;
  std::string* into = &f.head;
  std::size_t at = 0;
  while (at <= text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (starts_field(word)) {
      const std::size_t eq = word.find('=');
      f.fields.emplace_back(word.substr(0, eq), word.substr(eq + 1));
      into = &f.fields.back().second;
    } else {
      if (!(into == &f.head && into->empty())) *into += ' ';
      *into += word;
    }
    at = end + 1;
  }
  return f;
}

// One differing field in words; `tensor`: an HDF5 or .npy input (its `bytes` is the file size, an
// encoded source's is a hash of the sampled files).
std::string field_change(const std::string& key, const std::string& was, const std::string& now, bool tensor) {
  if (key == "mtime") return "it was modified (its modification time differs)";
  if (key == "mtimes") return "a file was modified (a modification time differs)";
  if (key == "bytes" && tensor) return str("its size went from ", was, " to ", now, " bytes");
  if (key == "bytes") return "the sampled files hold other bytes";
  if (key == "rows") return "its sampled rows hold other values";
  if (key == "list") return "its list of files or a file's size differs";
  if (key == "samples") return str("it holds ", now, " samples, not ", was);
  return str("its ", key, " went from ", was, " to ", now);
}

}  // namespace

std::string fingerprint_difference(const std::string& before, const std::string& now) {
  if (before == now) return "";
  const Fingerprint a = parse_fingerprint(before), b = parse_fingerprint(now);
  if (a.head != b.head) return str("it is another input (", a.head, ", now ", b.head, ")");
  const std::string kind = a.head.substr(0, a.head.find(' '));
  const bool tensor = kind == "npy" || kind == "hdf5";
  std::map<std::string, std::string> later(b.fields.begin(), b.fields.end());
  std::string out;
  for (const auto& [key, value] : a.fields) {
    const auto it = later.find(key);
    if (it == later.end() || it->second == value) continue;
    out += str(out.empty() ? "" : "; ", field_change(key, value, it->second, tensor));
  }
  return out;
}

}  // namespace sluice
