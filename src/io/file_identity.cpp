#include "io/file_identity.h"

#include <sys/stat.h>

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
                       "; rows read since are not committed (restore the input, then rerun with --resume)"));
}

}  // namespace sluice
