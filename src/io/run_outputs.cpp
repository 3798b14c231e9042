#include "io/run_outputs.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/hdf5_util.h"
#include "io/rank_file_format.h"
#include "io/sample_keys.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

std::vector<std::string> output_names(hid_t file) {
  std::vector<std::string> names;
  h5::Group g(H5_CHECK(H5Gopen2(file, rankfile::kOutputsGroup, H5P_DEFAULT)));
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_name, &names) < 0) {
    h5::error_stack_text();  // no creation-order index (a file written by h5py): by name
    names.clear();
    idx = 0;
    H5_CHECK(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names));
  }
  return names;
}

template <typename T>
std::vector<T> read_all(hid_t file, const char* name, hid_t mem_type, std::size_t per_row, int64_t rows) {
  h5::Dataset d(H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
  const std::vector<hsize_t> dims = h5::dims_of(d);
  std::size_t n = 1;
  for (hsize_t x : dims) n *= static_cast<std::size_t>(x);
  if (dims.empty() || static_cast<int64_t>(dims[0]) != rows || n != static_cast<std::size_t>(rows) * per_row)
    throw InputError(str(name, " has ", dims.empty() ? 0 : dims[0], " rows of ", n / std::max<hsize_t>(dims.empty() ? 1 : dims[0], 1),
                         " values; expected ", rows, " of ", per_row));
  std::vector<T> v(n);
  if (n > 0) H5_CHECK(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  return v;
}

}  // namespace

int64_t block_rows(const StoredOutput& output) {
  constexpr std::size_t kBlockBytes = 64u << 20;
  return static_cast<int64_t>(std::max<std::size_t>(1, kBlockBytes / std::max<std::size_t>(output.row_bytes(), 1)));
}

struct RunOutputs::Handles {
  h5::File file;
  std::unique_ptr<SampleKeyReader> keys;
};

RunOutputs::RunOutputs(const std::string& run_dir) : h_(std::make_unique<Handles>()) {
  h5::quiet_errors();
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) throw InputError(str("export: ", run_dir, ": no such run folder"));
  path_ = (fs::path(run_dir) / "outputs.h5").string();
  if (!fs::exists(path_, ec))
    throw InputError(str("export: ", run_dir, " has no outputs.h5: the run is not complete (rank 0 writes outputs.h5 "
                         "when every sample is committed); finish it with `sluice run --resume --output ", run_dir,
                         "` (the folder keeps its job in job.toml), then export"));
  h_->file = h5::File(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!h_->file.valid()) throw InputError(str("export: cannot open ", path_, ": ", h5::error_stack_text()));
  const hid_t f = h_->file;
  if (!h5::exists(f, rankfile::kSampleIndex) || !h5::exists(f, rankfile::kOutputsGroup))
    throw InputError(str("export: ", path_, " has no /sample_index or /outputs: not a Sluice run's outputs.h5"));

  const std::vector<int64_t> index = [&] {
    h5::Dataset d(H5_CHECK(H5Dopen2(f, rankfile::kSampleIndex, H5P_DEFAULT)));
    const std::vector<hsize_t> dims = h5::dims_of(d);
    if (dims.size() != 1) throw InputError(str("export: ", path_, ": /sample_index is not one-dimensional"));
    total_ = static_cast<int64_t>(dims[0]);
    std::vector<int64_t> v(static_cast<std::size_t>(total_));
    if (total_ > 0) H5_CHECK(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
    return v;
  }();
  // A virtual dataset whose rank file is gone reads its fill value (-1): that is an incomplete run.
  for (int64_t i = 0; i < total_; ++i)
    if (index[static_cast<std::size_t>(i)] != i)
      throw InputError(str("export: ", path_, ": row ", i, " maps sample ", index[static_cast<std::size_t>(i)],
                           index[static_cast<std::size_t>(i)] < 0 ? " (its rank file is missing or incomplete)" : "",
                           "; the run is not complete: finish it with `sluice run --resume --output ", run_dir, "`"));

  for (const std::string& name : output_names(f)) {
    h5::Dataset d(H5_CHECK(H5Dopen2(f, ("/outputs/" + name).c_str(), H5P_DEFAULT)));
    h5::Type t(H5_CHECK(H5Dget_type(d)));
    const std::vector<hsize_t> dims = h5::dims_of(d);
    StoredOutput o;
    o.name = name;
    o.dtype = h5::dtype_of(t);
    if (o.dtype == DType::Undefined || dims.empty() || static_cast<int64_t>(dims[0]) != total_)
      throw InputError(str("export: ", path_, ": /outputs/", name, " is ", h5::type_text(t), " with ",
                           dims.empty() ? 0 : dims[0], " rows; expected one of Sluice's types with ", total_, " rows"));
    o.row_shape.assign(dims.begin() + 1, dims.end());
    outputs_.push_back(o);
  }

  if (h5::exists(f, rankfile::kSampleStatus)) status_ = read_all<uint8_t>(f, rankfile::kSampleStatus, H5T_NATIVE_UINT8, 1, total_);
  else status_.assign(static_cast<std::size_t>(total_), 0);
  if (h5::exists(f, rankfile::kSampleSize)) sizes_ = read_all<int32_t>(f, rankfile::kSampleSize, H5T_NATIVE_INT32, 2, total_);
  if (h5::exists(f, rankfile::kBadSamples)) {
    h5::Type mem = rankfile::bad_memory_type();
    h5::Dataset d(H5_CHECK(H5Dopen2(f, rankfile::kBadSamples, H5P_DEFAULT)));
    const std::vector<hsize_t> dims = h5::dims_of(d);
    std::vector<rankfile::BadRecord> rows(dims.empty() ? 0 : static_cast<std::size_t>(dims[0]));
    if (!rows.empty()) H5_CHECK(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
    for (const rankfile::BadRecord& b : rows)
      bad_reasons_[b.index] = std::string(b.reason, strnlen(b.reason, sizeof b.reason));
  }
  preprocess_ = h5::read_attr_string(f, kPreprocessAttr);
  h_->keys = std::make_unique<SampleKeyReader>(f, str("export: ", path_));
  if (h_->keys->has() && h_->keys->rows() != total_)
    throw InputError(str("export: ", path_, ": /sample_key does not have one key per row"));
  has_keys_ = h_->keys->has();
}

RunOutputs::~RunOutputs() = default;

const StoredOutput* RunOutputs::output(const std::string& name) const {
  for (const auto& o : outputs_)
    if (o.name == name) return &o;
  return nullptr;
}

Tensor RunOutputs::read_rows(const std::string& name, int64_t first, int64_t count) const {
  const StoredOutput* o = output(name);
  if (!o) throw InputError(str("export: ", path_, " has no /outputs/", name));
  Shape shape{count};
  shape.insert(shape.end(), o->row_shape.begin(), o->row_shape.end());
  Tensor t(o->dtype, shape);
  if (count == 0) return t;
  h5::Dataset d(H5_CHECK(H5Dopen2(h_->file, ("/outputs/" + name).c_str(), H5P_DEFAULT)));
  h5::Space fs = h5::select_rows(d, first, count);
  h5::Space ms = h5::row_block_space(count, std::vector<hsize_t>(o->row_shape.begin(), o->row_shape.end()));
  h5::Type mt = h5::memory_type(o->dtype);
  H5_CHECK(H5Dread(d, mt, ms, fs, H5P_DEFAULT, t.bytes.data()));
  return t;
}

std::vector<std::string> RunOutputs::keys(int64_t first, int64_t count) const {
  if (has_keys_) return h_->keys->read(first, count);
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int64_t i = first; i < first + count; ++i) out.push_back(std::to_string(i));
  return out;
}

std::pair<int32_t, int32_t> RunOutputs::original_size(int64_t row) const {
  if (sizes_.empty()) return {0, 0};
  return {sizes_[2 * static_cast<std::size_t>(row)], sizes_[2 * static_cast<std::size_t>(row) + 1]};
}

std::string RunOutputs::bad_reason(int64_t row) const {
  auto it = bad_reasons_.find(row);
  return it == bad_reasons_.end() ? std::string() : it->second;
}

}  // namespace sluice
