// Small pieces shared by the sources (io/source_util.h).
#include "io/source_util.h"

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
