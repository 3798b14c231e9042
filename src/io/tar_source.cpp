// Tar shards in the WebDataset layout as an encoded source.  Opening reads only the 512-byte member
// headers of each shard (one pread each, skipping the data) and keeps, per sample, the shard, offset
// and size of its image member; reads are then one pread per sample from the shard, nothing is
// extracted.  Headers: POSIX ustar (with its name prefix), GNU (long names in 'L' records) and pax
// ('path' and 'size' records, which Python's tarfile writes for long names).
//
// Samples follow WebDataset: a member's key is its path up to the first dot of its file name
// ("a/b/x.seg.png" -> key "a/b/x", extension "seg.png", lowercased), consecutive members with one
// key form one sample, members whose file name has no such dot are skipped.  A sample's image is
// its member with extension jpg, jpeg or png; failing that, one whose extension ends in those
// ("seg.png"); the first such when there are several.  Samples without an image are skipped and
// counted.  A hard-link member reads its target's data (an earlier member of the same shard);
// symlink members, and hard links whose target is not in the shard, are skipped and counted.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "io/encoded_source.h"
#include "io/file_scan.h"

namespace sluice {

namespace {

constexpr uint64_t kBlock = 512;
constexpr uint64_t kMaxNameRecord = 1 << 16;  // a GNU long name or pax header larger than this is garbage
constexpr std::size_t kListedMissing = 5;

uint64_t round_up(uint64_t v) { return (v + kBlock - 1) / kBlock * kBlock; }

std::string field(const unsigned char* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h + off);
  return std::string(p, strnlen(p, len));
}

// Octal (space or NUL terminated, maybe space-led) or GNU base-256 (high bit of the first byte).
bool parse_number(const unsigned char* f, std::size_t len, uint64_t* out) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return false;  // negative
    v = f[0] & 0x3f;
    for (std::size_t i = 1; i < len; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | f[i];
    }
    *out = v;
    return true;
  }
  std::size_t i = 0;
  while (i < len && f[i] == ' ') ++i;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  if (i < len && f[i] != ' ' && f[i] != 0) return false;
  *out = v;
  return true;
}

bool checksum_ok(const unsigned char* h) {
  uint64_t stored = 0;
  if (!parse_number(h + 148, 8, &stored)) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

bool all_zero(const unsigned char* h) {
  for (std::size_t i = 0; i < kBlock; ++i)
    if (h[i]) return false;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// 2: the extension is an image extension; 1: its last part is ("seg.png"); 0: neither.
int image_rank(const std::string& ext) {
  if (ext == "jpg" || ext == "jpeg" || ext == "png") return 2;
  return is_image_name(ext) ? 1 : 0;
}

struct Shard {
  std::string path;
  uint64_t size = 0;
};

class TarSource final : public EncodedSource {
 public:
  explicit TarSource(std::string shown) : shown_(std::move(shown)) {
    kind_ = "tar";
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(shown_, ec);
    root_ = ec ? shown_ : p.lexically_normal().string();
  }

  std::string describe() const override {
    std::string s = str("tar ", shown_, ": ", size(), " sample", size() == 1 ? "" : "s", " in ", shards_.size(), " shard",
                        shards_.size() == 1 ? "" : "s");
    if (no_image_ > 0) s += str(" (", no_image_, " sample", no_image_ == 1 ? "" : "s", " without an image skipped)");
    if (links_skipped_ > 0)
      s += str(" (", links_skipped_, " link member", links_skipped_ == 1 ? "" : "s",
               " skipped: symlinks, and hard links to no earlier member of their shard)");
    return s;
  }

  void open(const std::vector<std::string>& paths, int64_t limit) {
    for (const std::string& p : paths) {
      if (limit > 0 && size() >= limit) break;
      index_shard(p, limit);
    }
    if (size() == 0)
      throw InputError(str("input ", shown_, ": no samples with an image member (.jpg, .jpeg, .png) in its ",
                           shards_.size(), " shard", shards_.size() == 1 ? "" : "s"));
    finish_open();
  }

 protected:
  void read_samples(int64_t first, int64_t count, uint8_t* dst, EncodedSample* out) const override {
    int64_t k = 0;
    while (k < count) {
      const uint32_t s = shard_of_[static_cast<std::size_t>(first + k)];
      int64_t end = k + 1;
      while (end < count && shard_of_[static_cast<std::size_t>(first + end)] == s) ++end;
      const Shard& shard = shards_[s];
      std::string error, why;
      uint64_t now = 0;
      const int fd = open_regular(shard.path, &now, &why);
      if (fd < 0) error = str(shard.path, ": cannot open: ", why);
      else if (now != shard.size)
        error = str(shard.path, ": changed since the job started (", now, " bytes, was ", shard.size, ")");
      for (; k < end; ++k) {
        const std::size_t i = static_cast<std::size_t>(first + k);
        if (error.empty()) {
          const std::string e = pread_exact(fd, dst + out[k].offset, sizes_[i], offset_[i]);
          if (!e.empty()) out[k].error = str(shard.path, ": member ", keys_[i], ": ", e);
        } else {
          out[k].error = error;
        }
      }
      if (fd >= 0) ::close(fd);
    }
  }

  std::string read_head(int64_t i, uint8_t* dst, std::size_t n) const override {
    const Shard& shard = shards_[shard_of_[static_cast<std::size_t>(i)]];
    std::string why;
    uint64_t size = 0;
    const int fd = open_regular(shard.path, &size, &why);
    if (fd < 0) return str(shard.path, ": cannot open: ", why);
    const std::string e = pread_exact(fd, dst, n, offset_[static_cast<std::size_t>(i)]);
    ::close(fd);
    return e;
  }

  void extra_identity(Fnv64& h) const override {
    for (const Shard& s : shards_) {
      h.text(s.path);
      h.u64(s.size);
    }
  }

 private:
  // The sample being gathered: consecutive members sharing a key.
  struct Group {
    std::string key;
    bool open = false;
    int rank = 0;
    uint64_t offset = 0, size = 0;
  };

  void flush(Group& g, uint32_t shard) {
    if (!g.open) return;
    if (g.rank > 0) {
      keys_.add(g.key);
      sizes_.push_back(g.size);
      offset_.push_back(g.offset);
      shard_of_.push_back(shard);
    } else {
      ++no_image_;
    }
    g = Group{};
  }

  void add_member(Group& g, uint32_t shard, const std::string& name, uint64_t offset, uint64_t size) {
    const std::size_t slash = name.rfind('/');
    const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
    const std::size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base) return;  // no key.extension: not part of a sample
    const std::string key = name.substr(0, dot);
    if (!g.open || key != g.key) {
      flush(g, shard);
      g.open = true;
      g.key = key;
    }
    const int rank = image_rank(lower(name.substr(dot + 1)));
    if (rank > g.rank) {
      g.rank = rank;
      g.offset = offset;
      g.size = size;
    }
  }

  void index_shard(const std::string& path, int64_t limit) {
    const std::string where = str("input ", shown_, ": shard ", path);
    std::string why;
    uint64_t size = 0;
    const int fd = open_regular(path, &size, &why);
    if (fd < 0)
      throw InputError(str(where, ": ", why == std::strerror(ENOENT) ? "no such file" : why),
                       why.find("regular") != std::string::npos
                           ? "tar shards are regular files: a pipe or device cannot be indexed"
                           : "");
    const uint32_t shard = static_cast<uint32_t>(shards_.size());
    shards_.push_back({path, size});
    // The shard's modification time (a member rewritten in place keeps the shard's size).
    struct stat st;
    if (::fstat(fd, &st) == 0)
      mtimes_ += mtime_entry(shard, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
    mtimes_known_ = true;
    try {
      walk_headers(fd, shard, where, limit);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }

  void walk_headers(int fd, uint32_t shard, const std::string& where, int64_t limit) {
    const uint64_t file_size = shards_[shard].size;
    unsigned char h[kBlock];
    std::string long_name, pax_path, long_link, pax_link;
    // Regular members so far (name -> data offset, size): a hard link ('1') reads its target's data.
    std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> members;
    uint64_t pax_size = 0;
    bool has_pax_size = false;
    Group g;
    uint64_t pos = 0;
    bool ended = false;
    while (pos + kBlock <= file_size) {
      if (limit > 0 && size() >= limit) return;  // enough samples: the group in progress is not needed
      const std::string e = pread_exact(fd, h, kBlock, pos);
      if (!e.empty()) throw InputError(str(where, ": ", e));
      if (all_zero(h)) {  // end of archive
        ended = true;
        break;
      }
      if (pos == 0 && !checksum_ok(h))
        if (const char* c = compression_magic(h, kBlock)) throw InputError(str(where, ": ", compressed_tar_text(c)));
      if (!checksum_ok(h)) throw InputError(str(where, ": not a tar file (bad header checksum at byte ", pos, ")"));
      uint64_t size = 0;
      if (!parse_number(h + 124, 12, &size)) throw InputError(str(where, ": bad member size at byte ", pos));
      const char type = static_cast<char>(h[156]);
      const bool regular = type == '0' || type == '\0' || type == '7';
      if (regular && has_pax_size) size = pax_size;
      const uint64_t data = pos + kBlock;
      if (data + size > file_size)
        throw InputError(str(where, ": truncated: the member at byte ", pos, " needs ", data + size, " bytes, the file has ",
                             file_size));
      if (type == 'L' || type == 'K' || type == 'x') {
        if (size > kMaxNameRecord) throw InputError(str(where, ": oversized ", type, " record at byte ", pos));
        std::string text(static_cast<std::size_t>(size), '\0');
        const std::string re = pread_exact(fd, reinterpret_cast<uint8_t*>(text.data()), size, data);
        if (!re.empty()) throw InputError(str(where, ": ", re));
        if (type == 'L') long_name = text.substr(0, strnlen(text.c_str(), text.size()));
        else if (type == 'K') long_link = text.substr(0, strnlen(text.c_str(), text.size()));
        else parse_pax(text, &pax_path, &pax_size, &has_pax_size, &pax_link);
      } else if (type != 'g') {
        std::string name = field(h, 0, 100);
        if (std::memcmp(h + 257, "ustar\0", 6) == 0) {
          const std::string prefix = field(h, 345, 155);
          if (!prefix.empty()) name = prefix + "/" + name;
        }
        if (!long_name.empty()) name = long_name;
        if (!pax_path.empty()) name = pax_path;
        if (regular) {
          add_member(g, shard, name, data, size);
          members[name] = {data, size};
        } else if (type == '1' || type == '2') {
          // A hard link stands for its target's data, an earlier member of the shard (GNU tar
          // writes one for a file added twice); a symlink is skipped, and so is a hard link whose
          // target is not in the shard: both are counted, so no sample goes missing unsaid.
          std::string link = field(h, 157, 100);
          if (!long_link.empty()) link = long_link;
          if (!pax_link.empty()) link = pax_link;
          const auto target = type == '1' ? members.find(link) : members.end();
          if (target != members.end()) add_member(g, shard, name, target->second.first, target->second.second);
          else ++links_skipped_;
        }
        long_name.clear();
        pax_path.clear();
        long_link.clear();
        pax_link.clear();
        has_pax_size = false;
      }
      pos = data + round_up(size);
    }
    // Without the end-of-archive blocks the last member must end the file exactly (some writers
    // omit them); anything else is a shard cut short.
    if (!ended && pos != file_size)
      throw InputError(str(where, ": truncated: it ends at byte ", file_size, ", inside the member that starts before byte ",
                           pos));
    flush(g, shard);
  }

  // pax records: "LEN key=value\n", LEN counting the whole record.
  static void parse_pax(const std::string& text, std::string* path, uint64_t* size, bool* has_size,
                        std::string* linkpath) {
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t space = text.find(' ', at);
      if (space == std::string::npos) return;
      std::size_t len = 0;
      for (std::size_t i = at; i < space; ++i) {
        if (text[i] < '0' || text[i] > '9') return;
        len = len * 10 + static_cast<std::size_t>(text[i] - '0');
      }
      if (len == 0 || at + len > text.size()) return;
      const std::string record = text.substr(space + 1, at + len - space - 2);  // without the '\n'
      const std::size_t eq = record.find('=');
      if (eq != std::string::npos) {
        const std::string key = record.substr(0, eq), value = record.substr(eq + 1);
        if (key == "path") *path = value;
        if (key == "linkpath") *linkpath = value;
        if (key == "size" && !value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
          *size = std::stoull(value);
          *has_size = true;
        }
      }
      at += len;
    }
  }

  std::string shown_;
  std::vector<Shard> shards_;
  std::vector<uint32_t> shard_of_;  // per sample
  std::vector<uint64_t> offset_;    // per sample: its image member's data in the shard
  int64_t no_image_ = 0;
  int64_t links_skipped_ = 0;  // link members neither read nor resolved
};

// The shard files `shards` names: a brace pattern (every name must exist), a glob of files, or one file.
std::vector<std::string> shard_paths(const std::string& shards) {
  std::vector<std::string> paths;
  if (has_brace_pattern(shards)) {
    paths = expand_braces(shards);
    std::vector<std::string> missing;
    std::size_t missing_count = 0;
    for (const std::string& p : paths) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0) continue;
      if (missing.size() < kListedMissing) missing.push_back(p);
      ++missing_count;
    }
    if (missing_count > 0) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? " " : ", ") + m;
      if (missing_count > missing.size()) list += str(" and ", missing_count - missing.size(), " more");
      throw InputError(str("input ", shards, ": ", missing_count, " of its ", paths.size(), " shards do not exist:", list));
    }
  } else if (has_glob_chars(shards)) {
    const GlobPattern glob = split_glob(shards);
    FileScan scan = scan_glob(glob, false);
    std::sort(scan.files.begin(), scan.files.end());
    for (const std::string& f : scan.files)
      paths.push_back(glob.root == "." ? f : glob.root.back() == '/' ? glob.root + f : glob.root + "/" + f);
    if (paths.empty()) throw InputError(str("input ", shards, ": the pattern matches no files"));
  } else {
    paths.push_back(shards);
  }
  return paths;
}

}  // namespace

std::unique_ptr<Source> open_tar_source(const std::string& shards, int64_t limit) {
  auto src = std::make_unique<TarSource>(shards);
  src->open(shard_paths(shards), limit);
  return src;
}

}  // namespace sluice
