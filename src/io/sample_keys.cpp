// The padded-key format (io/sample_keys.h).
#include "io/sample_keys.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "io/hdf5_util.h"
#include "io/rank_file_format.h"

namespace sluice {

static_assert(std::is_same_v<hid_t, int64_t>, "SampleKeyReader takes a file's hid_t as int64_t");

std::string padded_key(const char* keys, std::size_t width, int64_t row) {
  const char* k = keys + static_cast<std::size_t>(row) * width;
  return std::string(k, strnlen(k, width));
}

void put_padded_key(char* keys, std::size_t width, int64_t row, const std::string& key) {
  char* k = keys + static_cast<std::size_t>(row) * width;
  const std::size_t n = std::min(key.size(), width);
  std::memcpy(k, key.data(), n);
  std::memset(k + n, 0, width - n);
}

struct SampleKeyReader::Impl {
  h5::Dataset keys;
  h5::Type mem;  // the file's own string type: read as stored, no conversion
  int64_t rows = 0;
  std::size_t width = 0;
  bool variable = false, space_padded = false;
};

SampleKeyReader::SampleKeyReader(int64_t file, const std::string& where) : impl_(std::make_unique<Impl>()) {
  h5::quiet_errors();
  if (!h5::exists(file, rankfile::kSampleKey)) return;
  Impl& k = *impl_;
  k.keys = h5::Dataset(H5_CHECK(H5Dopen2(file, rankfile::kSampleKey, H5P_DEFAULT)));
  h5::Type type(H5_CHECK(H5Dget_type(k.keys)));
  if (H5Tget_class(type) != H5T_STRING)
    throw InputError(str(where, ": ", rankfile::kSampleKey, " holds ", h5::type_text(type), ", not strings"));
  const std::vector<hsize_t> dims = h5::dims_of(k.keys);
  if (dims.size() != 1) throw InputError(str(where, ": ", rankfile::kSampleKey, " is not one-dimensional"));
  k.rows = static_cast<int64_t>(dims[0]);
  k.variable = H5_CHECK(H5Tis_variable_str(type)) > 0;
  k.width = k.variable ? 0 : H5Tget_size(type);
  k.space_padded = !k.variable && H5Tget_strpad(type) == H5T_STR_SPACEPAD;
  k.mem = h5::Type(H5_CHECK(H5Tcopy(type)));
}

SampleKeyReader::~SampleKeyReader() = default;

bool SampleKeyReader::has() const { return impl_->keys.valid(); }
int64_t SampleKeyReader::rows() const { return impl_->rows; }
std::size_t SampleKeyReader::width() const { return impl_->width; }

std::vector<std::string> SampleKeyReader::read(int64_t first, int64_t count) const {
  const Impl& k = *impl_;
  std::vector<std::string> out;
  if (!has()) return out;
  first = std::clamp<int64_t>(first, 0, k.rows);
  count = std::clamp<int64_t>(count, 0, k.rows - first);
  if (count == 0) return out;
  out.reserve(static_cast<std::size_t>(count));
  h5::Space fspace = h5::select_rows(k.keys, first, count);
  h5::Space mspace = h5::row_block_space(count, {});
  if (k.variable) {
    std::vector<char*> v(static_cast<std::size_t>(count), nullptr);
    H5_CHECK(H5Dread(k.keys, k.mem, mspace, fspace, H5P_DEFAULT, v.data()));
    for (const char* s : v) out.emplace_back(s ? s : "");
    H5_CHECK(H5Dvlen_reclaim(k.mem, mspace, H5P_DEFAULT, v.data()));
    return out;
  }
  std::vector<char> buf(static_cast<std::size_t>(count) * k.width);
  H5_CHECK(H5Dread(k.keys, k.mem, mspace, fspace, H5P_DEFAULT, buf.data()));
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(padded_key(buf.data(), k.width, i));
    if (k.space_padded)
      while (!out.back().empty() && out.back().back() == ' ') out.back().pop_back();
  }
  return out;
}

}  // namespace sluice
