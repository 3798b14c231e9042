#pragma once
// Internal to io/: finding input files.  Every rank enumerates the same list itself, so this must
// be deterministic (the callers sort) and cheap: one readdir walk, the directory entry's type
// instead of a stat where the file system gives it, no file opened.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct FileScan {
  std::vector<std::string> files;  // relative to the scan's root, in the order found
  int64_t ignored = 0;             // files that are not images, hidden entries, sockets, ...
};

// Every image file (.jpg, .jpeg, .png, any case) under `root`, recursively.  Hidden entries (a
// name starting with '.') are skipped and counted; symbolic links are followed, each folder is
// walked once.  InputError when `root` or a folder under it cannot be read.
FileScan scan_folder(const std::string& root);

// A glob split at its first component with a wildcard: `root` holds the literal leading folders
// ("." when there are none), `parts` the rest, one path component each ("**" = any depth).
struct GlobPattern {
  std::string root;
  std::vector<std::string> parts;
};
bool has_glob_chars(std::string_view s);
GlobPattern split_glob(const std::string& pattern);
// Every regular file matching the pattern (fnmatch per component; a leading '.' must be matched
// explicitly, as in the shell).  With `images_only`, files without an image extension are counted
// as ignored instead.
FileScan scan_glob(const GlobPattern& glob, bool images_only);

// Brace expansion as WebDataset shard names use it: 'train-{000000..000099}.tar' (a numeric
// range, zero-padded when a bound is), '{a,b,c}', several per pattern.  UsageError when malformed.
bool has_brace_pattern(std::string_view s);
std::vector<std::string> expand_braces(const std::string& pattern);

}  // namespace sluice
