#pragma once
// Which file a path names and what state it is in: device, inode, size and modification time.
// An input file's identity is taken when it is opened and compared after every read, so a file
// truncated, rewritten or replaced during a run ends the run before any row read from it is
// committed (a truncated HDF5 file reads back zeros, without an error).
#include <cstdint>
#include <optional>
#include <string>

namespace sluice {

struct FileIdentity {
  uint64_t device = 0, inode = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;

  // nullopt when the path cannot be stat'ed (gone).
  static std::optional<FileIdentity> of(const std::string& path);
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

// Throws InputError when `path` no longer is the file `opened` described: "input X changed during
// the run: ...".  Cheap (one stat).
void check_unchanged(const std::string& path, const FileIdentity& opened);

// How the input a fingerprint (Source::fingerprint(): "KIND WHERE key=value ...") describes differs
// from the one another fingerprint describes, in words ("it was modified (its modification time
// differs)", "its size went from 10 to 12 bytes"), or "" when they agree.  Only the fields both
// carry are compared, so a fingerprint written before a field existed (an older Sluice's, without
// `mtime`) still matches an unchanged input on the others.
std::string fingerprint_difference(const std::string& before, const std::string& now);

}  // namespace sluice
