// Small pieces shared by the sources (io/source_util.h).
#include "io/source_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace sluice {

std::string Fnv64::hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
  return buf;
}

bool is_image_name(std::string_view name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return false;
  std::string ext(name.substr(dot + 1));
  if (ext.size() > 4) return false;
  for (char& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

const char* compression_magic(const unsigned char* h, std::size_t n) {
  if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b) return "gzip";
  if (n >= 4 && h[0] == 0x28 && h[1] == 0xb5 && h[2] == 0x2f && h[3] == 0xfd) return "zstd";
  if (n >= 6 && std::memcmp(h, "\xfd" "7zXZ\0", 6) == 0) return "xz";
  if (n >= 3 && std::memcmp(h, "BZh", 3) == 0) return "bzip2";
  return nullptr;
}

std::string compressed_tar_text(const char* compression) {
  const std::string c = compression;
  const std::string tool = c == "gzip" ? "gunzip" : c == "zstd" ? "zstd -d" : c == "xz" ? "unxz" : "bunzip2";
  return str(c, "-compressed: compressed tar shards are not supported; decompress them first (", tool,
             " on each shard gives the .tar that sluice reads)");
}

int open_regular(const std::string& path, uint64_t* size, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *error = str("cannot stat: ", std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    *error = S_ISDIR(st.st_mode)    ? "is a folder"
             : S_ISFIFO(st.st_mode) ? "is a FIFO (a named pipe), not a regular file"
             : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
                                    : "is a device, not a regular file";
  } else {
    *size = static_cast<uint64_t>(st.st_size);
    return fd;
  }
  ::close(fd);
  return -1;
}

std::string pread_exact(int fd, uint8_t* dst, uint64_t size, uint64_t offset) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, dst + done, static_cast<std::size_t>(size - done), static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return str("read failed: ", std::strerror(errno));
    }
    if (n == 0) return str("only ", done, " of ", size, " bytes could be read (the file shrank)");
    done += static_cast<uint64_t>(n);
  }
  return "";
}

}  // namespace sluice
