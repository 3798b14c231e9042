// A .npy array [N, ...] of float32 or uint8 as a tensor source: the header is parsed once, then
// each read() is one pread of whole rows straight into the caller's (pinned) slot.  pread rather
// than a memory map, so a file truncated under the job is an error naming it, not a SIGBUS.
// Big-endian float32 is swapped in place after the read; Fortran-order arrays are refused (their
// rows are not contiguous).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/npy.h"
#include "io/source.h"
#include "io/source_util.h"

namespace sluice {

namespace {

class NpySource final : public Source {
 public:
  NpySource(std::string path, int fd, NpyHeader h, int64_t n, uint64_t file_size, int64_t mtime_ns)
      : path_(std::move(path)), fd_(fd), h_(std::move(h)), n_(n), file_size_(file_size), mtime_ns_(mtime_ns) {
    shape_.assign(h_.shape.begin() + 1, h_.shape.end());
  }
  ~NpySource() override { ::close(fd_); }

  std::string describe() const override {
    std::string s = str("npy ", path_, " ", n_, " x ", shape_str(shape_), " ", dtype_name(h_.dtype));
    if (n_ < h_.shape[0]) s += str(" (first ", n_, " of ", h_.shape[0], ")");
    return s;
  }
  int64_t size() const override { return n_; }
  const Shape& sample_shape() const override { return shape_; }
  DType dtype() const override { return h_.dtype; }

  void read(int64_t first, int64_t count, void* dst) override {
    SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= n_, "npy input ", path_, ": rows [", first, ", ",
                 first + count, ") outside [0, ", n_, ")");
    const uint64_t row = sample_bytes();
    const std::string e = pread_exact(fd_, static_cast<uint8_t*>(dst), row * static_cast<uint64_t>(count),
                                      h_.data_offset + row * static_cast<uint64_t>(first));
    if (!e.empty()) throw InputError(str("npy input ", path_, ": rows [", first, ", ", first + count, "): ", e));
    if (h_.big_endian) {
      auto* p = static_cast<uint8_t*>(dst);
      const std::size_t elem = dtype_size(h_.dtype), bytes = static_cast<std::size_t>(row * count);
      for (std::size_t i = 0; i + elem <= bytes; i += elem) std::reverse(p + i, p + i + elem);
    }
  }

  // path, shape, dtype, file size, a hash of the first, middle and last rows, and the modification
  // time (a row rewritten in place keeps the size and may be none of the three).
  std::string fingerprint() const override {
    Fnv64 rows;
    std::vector<uint8_t> buf(sample_bytes());
    for (int64_t i : {int64_t{0}, n_ / 2, n_ - 1}) {
      const std::string e = pread_exact(fd_, buf.data(), buf.size(), h_.data_offset + buf.size() * static_cast<uint64_t>(i));
      if (e.empty()) rows.bytes(buf.data(), buf.size());
      else rows.text(e);
    }
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(path_, ec);
    return str("npy ", ec ? path_ : abs.lexically_normal().string(), " samples=", n_, " shape=", shape_str(h_.shape),
               " dtype=", dtype_name(h_.dtype), " bytes=", file_size_, " rows=", rows.hex(), " mtime=", mtime_ns_);
  }

 private:
  std::string path_;
  int fd_;
  NpyHeader h_;
  Shape shape_;
  int64_t n_;
  uint64_t file_size_;
  int64_t mtime_ns_;
};

}  // namespace

std::unique_ptr<Source> open_npy_source(const std::string& path, int64_t limit) {
  const std::string where = str("input ", path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(str(where, ": no such file"), kPathsHint);
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(str(where, ": not a regular file"));
  NpyHeader h;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(str(where, ": cannot read it: ", std::strerror(errno)));
    h = read_npy_header(in, where);
  }
  if (h.dtype != DType::F32 && h.dtype != DType::U8)
    throw InputError(str(where, ": holds ", dtype_name(h.dtype), "; sluice reads float32 and uint8 .npy arrays ",
                         "(convert with a.astype(np.float32))"));
  if (h.fortran_order && h.shape.size() > 1)
    throw InputError(str(where, ": is stored in Fortran order; save it in C order (np.ascontiguousarray)"));
  if (h.shape.size() < 2)
    throw InputError(str(where, ": has shape ", shape_str(h.shape), "; it needs [N, ...] with one sample per row (at least ",
                         "2 dimensions)"));
  for (int64_t d : h.shape)
    if (d <= 0) throw InputError(str(where, ": has an empty dimension: shape ", shape_str(h.shape)));
  const uint64_t data_bytes = static_cast<uint64_t>(shape_numel(h.shape)) * dtype_size(h.dtype);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(str(where, ": cannot open it: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < h.data_offset + data_bytes) {
    ::close(fd);
    throw InputError(str(where, ": truncated: shape ", shape_str(h.shape), " needs ", h.data_offset + data_bytes,
                         " bytes, the file has ", st.st_size));
  }
  const int64_t n = limit > 0 ? std::min(limit, h.shape[0]) : h.shape[0];
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return std::make_unique<NpySource>(path, fd, std::move(h), n, static_cast<uint64_t>(st.st_size), mtime_ns);
}

}  // namespace sluice
