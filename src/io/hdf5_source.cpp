// An HDF5 dataset [N, ...] as the job's input: each read() selects rows [first, first + count) as
// a hyperslab and lets HDF5 write them straight into the caller's (pinned) slot, so no staging
// copy exists on the input path.  Debian's HDF5 is a thread-safe build: it serializes every call
// behind one global lock, so several reader threads may share the one file id (they then take
// turns inside HDF5; the decode of compressed chunks is the part that would parallelize, and does
// not here).  Float datasets of any precision are read as float32 (HDF5 converts on the way);
// uint8 stays uint8; every other type is refused up front.
#include <filesystem>

#include "core/crash_guard.h"
#include "io/hdf5_util.h"
#include "io/source.h"

namespace sluice {

namespace {

class Hdf5Source final : public Source {
 public:
  Hdf5Source(std::string path, std::string dataset, h5::File file, h5::Dataset d, DType dtype, int64_t n, Shape shape,
             std::string stored_type)
      : path_(std::move(path)), dataset_name_(std::move(dataset)), file_(std::move(file)), dataset_(std::move(d)),
        dtype_(dtype), size_(n), shape_(std::move(shape)), stored_type_(std::move(stored_type)),
        mem_type_(h5::memory_type(dtype)), row_dims_(shape_.begin(), shape_.end()) {}

  ~Hdf5Source() override { dataset_.reset(); }  // before the file

  std::string describe() const override {
    return str("HDF5 ", path_, ":", dataset_name_, " ", size_, " x ", shape_str(shape_), " ", stored_type_,
               stored_type_ == dtype_name(dtype_) ? "" : str(" (read as ", dtype_name(dtype_), ")"));
  }
  int64_t size() const override { return size_; }
  const Shape& sample_shape() const override { return shape_; }
  DType dtype() const override { return dtype_; }

  void read(int64_t first, int64_t count, void* dst) override {
    SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= size_, "HDF5 input ", path_, ":", dataset_name_,
                 ": rows [", first, ", ", first + count, ") outside [0, ", size_, ")");
    if (count == 0) return;
    const CrashGuard guard(str("input ", path_), "libhdf5");  // a corrupt chunk index can crash it
    h5::quiet_errors();  // reader threads call this first thing; the setting is per thread
    h5::Space fspace = h5::select_rows(dataset_, first, count);
    h5::Space mspace = h5::row_block_space(count, row_dims_);
    H5_CHECK(H5Dread(dataset_, mem_type_, mspace, fspace, H5P_DEFAULT, dst));
  }

 private:
  std::string path_, dataset_name_;
  h5::File file_;
  h5::Dataset dataset_;
  DType dtype_;
  int64_t size_;
  Shape shape_;
  std::string stored_type_;
  h5::Type mem_type_;
  std::vector<hsize_t> row_dims_;
};

}  // namespace

std::unique_ptr<Source> open_hdf5_source(const std::string& path, const std::string& dataset) {
  const CrashGuard guard(str("input ", path), "libhdf5");  // libhdf5 1.10 crashes on some crafted files
  h5::quiet_errors();
  const std::string where = str("input ", path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(str(where, ": no such file"));
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(str(where, ": not a regular file"));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    h5::error_stack_text();
    throw InputError(str(where, ": not an HDF5 file"));
  }
  h5::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw InputError(str(where, ": cannot open it: ", h5::error_stack_text()));
  if (dataset.empty() || !h5::exists(file, dataset)) throw InputError(str(where, ": no dataset '", dataset, "'"));
  H5O_info_t oinfo;
  if (H5Oget_info_by_name2(file, dataset.c_str(), &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oinfo.type != H5O_TYPE_DATASET)
    throw InputError(str(where, ": '", dataset, "' is not a dataset"));
  h5::Dataset d(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT));
  if (!d.valid()) throw InputError(str(where, ": cannot open dataset '", dataset, "': ", h5::error_stack_text()));

  h5::Type type(H5_CHECK(H5Dget_type(d)));
  const std::string stored = h5::type_text(type);
  DType dtype = DType::Undefined;
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_FLOAT && h5::dtype_of(type) != DType::Undefined) dtype = DType::F32;
  if (cls == H5T_INTEGER && H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE) dtype = DType::U8;
  if (dtype == DType::Undefined)
    throw InputError(str(where, ": dataset '", dataset, "' holds ", stored, "; sluice reads float32 (or another float, ",
                         "converted) and uint8"));

  const std::vector<hsize_t> dims = h5::dims_of(d);
  if (dims.size() < 2)
    throw InputError(str(where, ": dataset '", dataset, "' has ", dims.size(), " dimension", dims.size() == 1 ? "" : "s",
                         "; it needs [N, ...] with one sample per row (at least 2 dimensions)"));
  Shape shape(dims.begin() + 1, dims.end());
  for (int64_t s : shape)
    if (s == 0) throw InputError(str(where, ": dataset '", dataset, "' has an empty sample shape ", shape_str(shape)));
  if (dims[0] == 0) throw InputError(str(where, ": dataset '", dataset, "' holds no samples"));
  return std::make_unique<Hdf5Source>(path, dataset, std::move(file), std::move(d), dtype,
                                      static_cast<int64_t>(dims[0]), std::move(shape), stored);
}

}  // namespace sluice
