// An HDF5 dataset [N, ...] as the job's input: each read() selects rows [first, first + count) as
// a hyperslab and lets HDF5 write them straight into the caller's (pinned) slot, so no staging
// copy exists on the input path.  Debian's HDF5 is a thread-safe build: it serializes every call
// behind one global lock, so several reader threads may share the one file id (they then take
// turns inside HDF5; the decode of compressed chunks is the part that would parallelize, and does
// not here).  Float datasets of any precision are read as float32 (HDF5 converts on the way);
// uint8 stays uint8; every other type is refused up front.
//
// Keys (--input-keys): a string dataset [N] beside the data (fixed-length or variable-length), read
// once at open into one buffer; without it a sample's key is its index.  --samples keeps the first
// rows only.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/crash_guard.h"
#include "io/file_identity.h"
#include "io/hdf5_util.h"
#include "io/source.h"
#include "io/source_util.h"

namespace sluice {

namespace {

class Hdf5Source final : public Source {
 public:
  Hdf5Source(std::string path, std::string dataset, h5::File file, h5::Dataset d, DType dtype, int64_t n,
             int64_t stored_n, Shape shape, std::string stored_type)
      : path_(std::move(path)), dataset_name_(std::move(dataset)), file_(std::move(file)), dataset_(std::move(d)),
        dtype_(dtype), size_(n), stored_n_(stored_n), shape_(std::move(shape)), stored_type_(std::move(stored_type)),
        mem_type_(h5::memory_type(dtype)), row_dims_(shape_.begin(), shape_.end()) {
    const std::optional<FileIdentity> id = FileIdentity::of(path_);
    if (!id) throw InputError(str("input ", path_, ": it vanished while being opened"));
    identity_ = *id;
  }

  void set_keys(std::string name, KeyList keys) {
    keys_name_ = std::move(name);
    keys_ = std::move(keys);
  }

  ~Hdf5Source() override { dataset_.reset(); }  // before the file

  std::string describe() const override {
    return str("HDF5 ", path_, ":", dataset_name_, " ", size_, " x ", shape_str(shape_), " ", stored_type_,
               stored_type_ == dtype_name(dtype_) ? "" : str(" (read as ", dtype_name(dtype_), ")"),
               size_ < stored_n_ ? str(", the first ", size_, " of ", stored_n_) : "",
               keys_name_.empty() ? "" : str(", keys ", keys_name_));
  }

  std::string key(int64_t i) const override {
    return keys_name_.empty() ? std::to_string(i) : std::string(keys_[static_cast<std::size_t>(i)]);
  }
  std::size_t key_bytes() const override { return keys_name_.empty() ? Source::key_bytes() : keys_.max_bytes(); }

  // path, datasets, shape, type, file size, a hash of the first, middle and last rows (and keys),
  // and the file's modification time when it was opened (a row rewritten in place changes only it).
  std::string fingerprint() const override {
    Fnv64 rows;
    std::vector<uint8_t> buf(sample_bytes());
    for (int64_t i : {int64_t{0}, size_ / 2, size_ - 1}) {
      read_rows(i, 1, buf.data());
      rows.bytes(buf.data(), buf.size());
    }
    for (std::size_t i = 0; i < keys_.size(); ++i) rows.text(keys_[i]);
    struct stat st;
    const uint64_t bytes = ::stat(path_.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(path_, ec);
    return str("hdf5 ", ec ? path_ : abs.lexically_normal().string(), ":", dataset_name_, " samples=", size_, " of ",
               stored_n_, " shape=", shape_str(shape_), " type=", stored_type_, " keys=", keys_name_, " bytes=", bytes,
               " rows=", rows.hex(), " mtime=", identity_.mtime_ns);
  }
  int64_t size() const override { return size_; }
  const Shape& sample_shape() const override { return shape_; }
  DType dtype() const override { return dtype_; }

  void read(int64_t first, int64_t count, void* dst) override { read_rows(first, count, dst); }

 private:
  void read_rows(int64_t first, int64_t count, void* dst) const {
    SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= size_, "HDF5 input ", path_, ":", dataset_name_,
                 ": rows [", first, ", ", first + count, ") outside [0, ", size_, ")");
    if (count == 0) return;
    const CrashGuard guard(str("input ", path_), "libhdf5");  // a corrupt chunk index can crash it
    h5::quiet_errors();  // reader threads call this first thing; the setting is per thread
    h5::Space fspace = h5::select_rows(dataset_, first, count);
    h5::Space mspace = h5::row_block_space(count, row_dims_);
    const herr_t status = H5Dread(dataset_, mem_type_, mspace, fspace, H5P_DEFAULT, dst);
    // A file truncated or rewritten under the job reads back zeros or fails: either way the rows
    // must not be committed, and the message should say why.  Checked after the read, so rows
    // read before a change are good and rows read after it are refused.
    check_unchanged(path_, identity_);
    H5_CHECK(status);
  }

  std::string path_, dataset_name_;
  h5::File file_;
  h5::Dataset dataset_;
  DType dtype_;
  int64_t size_, stored_n_;
  Shape shape_;
  std::string stored_type_;
  h5::Type mem_type_;
  std::vector<hsize_t> row_dims_;
  std::string keys_name_;
  KeyList keys_;
  FileIdentity identity_;
};

// The first `n` entries of string dataset `name` [stored_n] (fixed or variable length), read in
// blocks so a huge key list never needs a second copy.
KeyList read_keys(hid_t file, const std::string& where, const std::string& name, int64_t n, int64_t stored_n) {
  if (!h5::exists(file, name)) throw InputError(str(where, ": no key dataset '", name, "' (--input-keys)"));
  h5::Dataset d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!d.valid()) throw InputError(str(where, ": '", name, "' (--input-keys) is not a dataset"));
  h5::Type type(H5_CHECK(H5Dget_type(d)));
  if (H5Tget_class(type) != H5T_STRING)
    throw InputError(str(where, ": --input-keys ", name, " holds ", h5::type_text(type), "; it must hold strings"));
  const std::vector<hsize_t> dims = h5::dims_of(d);
  if (dims.size() != 1 || static_cast<int64_t>(dims[0]) != stored_n)
    throw InputError(str(where, ": --input-keys ", name, " has shape ", shape_str(Shape(dims.begin(), dims.end())),
                         "; it must be [", stored_n, "], one key per sample"));
  const bool variable = H5_CHECK(H5Tis_variable_str(type)) > 0;
  const std::size_t width = variable ? sizeof(char*) : H5Tget_size(type);
  const bool space_padded = !variable && H5Tget_strpad(type) == H5T_STR_SPACEPAD;
  h5::Type mem(H5_CHECK(H5Tcopy(type)));  // the file's own string type: no conversion
  KeyList keys;
  constexpr int64_t kBlock = 65536;
  std::vector<char> buf(static_cast<std::size_t>(std::min(n, kBlock)) * width);
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t count = std::min(kBlock, n - first);
    h5::Space fspace = h5::select_rows(d, first, count);
    h5::Space mspace = h5::row_block_space(count, {});
    H5_CHECK(H5Dread(d, mem, mspace, fspace, H5P_DEFAULT, buf.data()));
    for (int64_t i = 0; i < count; ++i) {
      const char* p = buf.data() + static_cast<std::size_t>(i) * width;
      if (variable) {
        const char* s = *reinterpret_cast<char* const*>(p);
        keys.add(s ? std::string_view(s) : std::string_view());
      } else {
        std::size_t len = strnlen(p, width);
        while (space_padded && len > 0 && p[len - 1] == ' ') --len;
        keys.add(std::string_view(p, len));
      }
    }
    if (variable) H5_CHECK(H5Dvlen_reclaim(mem, mspace, H5P_DEFAULT, buf.data()));
  }
  return keys;
}

// A virtual dataset reads each mapped source as the fill value (zeros) when the source file or its
// dataset is missing, and H5Dread succeeds: a moved source file would pass for data.  Every source
// is checked here, where HDF5 would look for it (HDF5_VDS_PREFIX, the virtual file's folder, the
// path as written); names with printf-style patterns (%b) are not checked.
void check_virtual_sources(hid_t dataset, const std::string& path, const std::string& where, const std::string& name) {
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(dataset)));
  if (H5Pget_layout(dcpl) != H5D_VIRTUAL) return;
  size_t count = 0;
  H5_CHECK(H5Pget_virtual_count(dcpl, &count));
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const char* prefix = std::getenv("HDF5_VDS_PREFIX");
  std::set<std::pair<std::string, std::string>> checked;
  for (size_t i = 0; i < count; ++i) {
    auto text = [&](auto get) {
      const ssize_t n = get(dcpl, i, nullptr, 0);
      if (n < 0) return std::string();
      std::string v(static_cast<std::size_t>(n) + 1, '\0');
      get(dcpl, i, v.data(), v.size());
      v.resize(static_cast<std::size_t>(n));
      return v;
    };
    const std::string file = text(H5Pget_virtual_filename), source = text(H5Pget_virtual_dsetname);
    if (file.find('%') != std::string::npos || source.find('%') != std::string::npos) continue;
    if (!checked.insert({file, source}).second) continue;
    std::string found;
    if (file == ".") {
      found = path;
    } else {
      std::vector<std::string> tried;
      if (!file.empty() && file[0] == '/') tried.push_back(file);
      else {
        if (prefix && *prefix) tried.push_back((std::filesystem::path(prefix) / file).string());
        tried.push_back((std::filesystem::path(folder.empty() ? "." : folder) / file).string());
        tried.push_back(file);
      }
      std::error_code ec;
      for (const std::string& t : tried)
        if (found.empty() && std::filesystem::is_regular_file(t, ec)) found = t;
      if (found.empty()) {
        std::string list;
        for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
        throw InputError(str(where, ": dataset '", name, "' is a virtual dataset whose source file '", file,
                             "' is missing (looked for ", list, "); HDF5 would read its rows as zeros"),
                         "put the source files back where the virtual dataset names them, or set HDF5_VDS_PREFIX to "
                         "the folder that holds them");
      }
    }
    h5::File src(H5Fopen(found.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    const bool has = src.valid() && h5::exists(src, source);
    h5::error_stack_text();
    if (!has)
      throw InputError(str(where, ": dataset '", name, "' is a virtual dataset whose source '", found, ":", source,
                           "' ", src.valid() ? "does not exist" : "cannot be opened",
                           "; HDF5 would read its rows as zeros"),
                       "fix or restore the virtual dataset's source files");
  }
}

}  // namespace

std::unique_ptr<Source> open_hdf5_source(const std::string& path, const std::string& dataset, const std::string& keys,
                                         int64_t limit) {
  const CrashGuard guard(str("input ", path), "libhdf5");  // libhdf5 1.10 crashes on some crafted files
  h5::quiet_errors();
  const std::string where = str("input ", path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(str(where, ": no such file"), kPathsHint);
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(str(where, ": not a regular file"));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    h5::error_stack_text();
    throw InputError(str(where, ": not an HDF5 file"));
  }
  h5::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw InputError(str(where, ": cannot open it: ", h5::error_stack_text()));
  if (dataset.empty() || !h5::exists(file, dataset)) {
    // The datasets the file does have, so the hint can name the right --input-dataset.
    std::vector<std::string> names;
    H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC,
             [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
               if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(str("/", name));
               return static_cast<std::vector<std::string>*>(data)->size() >= 12 ? 1 : 0;
             },
             &names, H5O_INFO_BASIC);
    h5::error_stack_text();
    std::string listed;
    for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
    throw InputError(str(where, ": no dataset '", dataset, "'"),
                     names.empty() ? std::string("the file holds no dataset")
                                   : str("--input-dataset names the samples' dataset; this file has ", listed,
                                         names.size() >= 12 ? ", ..." : ""));
  }
  H5O_info_t oinfo;
  if (H5Oget_info_by_name2(file, dataset.c_str(), &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oinfo.type != H5O_TYPE_DATASET)
    throw InputError(str(where, ": '", dataset, "' is not a dataset"));
  h5::Dataset d(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT));
  if (!d.valid()) throw InputError(str(where, ": cannot open dataset '", dataset, "': ", h5::error_stack_text()));
  check_virtual_sources(d, path, where, dataset);

  h5::Type type(H5_CHECK(H5Dget_type(d)));
  const std::string stored = h5::type_text(type);
  DType dtype = DType::Undefined;
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_FLOAT && h5::dtype_of(type) != DType::Undefined) dtype = DType::F32;
  if (cls == H5T_INTEGER && H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE) dtype = DType::U8;
  if (dtype == DType::Undefined)
    throw InputError(str(where, ": dataset '", dataset, "' holds ", stored, "; sluice reads float32 (or another float, ",
                         "converted) and uint8"),
                     "store the samples as float32 or uint8, or name another dataset with --input-dataset");

  const std::vector<hsize_t> dims = h5::dims_of(d);
  if (dims.size() < 2)
    throw InputError(str(where, ": dataset '", dataset, "' has ", dims.size(), " dimension", dims.size() == 1 ? "" : "s",
                         "; it needs [N, ...] with one sample per row (at least 2 dimensions)"),
                     "store the samples as one array [N, ...] (a row per sample), or name it with --input-dataset");
  Shape shape(dims.begin() + 1, dims.end());
  for (int64_t s : shape)
    if (s == 0) throw InputError(str(where, ": dataset '", dataset, "' has an empty sample shape ", shape_str(shape)));
  if (dims[0] == 0) throw InputError(str(where, ": dataset '", dataset, "' holds no samples"));
  const int64_t stored_n = static_cast<int64_t>(dims[0]);
  const int64_t n = limit > 0 ? std::min(limit, stored_n) : stored_n;
  KeyList key_list;
  if (!keys.empty()) key_list = read_keys(file, where, keys, n, stored_n);
  auto src = std::make_unique<Hdf5Source>(path, dataset, std::move(file), std::move(d), dtype, n, stored_n,
                                          std::move(shape), stored);
  if (!keys.empty()) src->set_keys(keys, std::move(key_list));
  return src;
}

}  // namespace sluice
