#pragma once
// Reading a finished run's outputs.h5 (`sluice export`, and `sluice run --export` once the job is
// complete): the stored outputs by rows, and the per-row datasets beside them (/sample_key through
// io/sample_keys.h, /sample_status, /sample_size, /bad_samples; see docs/file-formats.md).  Files of
// runs made before those datasets existed read as keys = the decimal index, every row ok, no sizes.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sluice {

// The attribute of outputs.h5 that records the run's image geometry (a JSON object,
// export/geometry.h writes and reads it).
inline constexpr char kPreprocessAttr[] = "preprocess";

struct StoredOutput {
  std::string name;  // under /outputs
  DType dtype = DType::Undefined;
  Shape row_shape;   // one row, without the leading sample axis
  std::size_t row_bytes() const { return static_cast<std::size_t>(shape_numel(row_shape)) * dtype_size(dtype); }
};

// Rows of `output` read at once: as many as fit in 64 MiB, at least one.  Every reader of
// outputs.h5 goes by such blocks.
int64_t block_rows(const StoredOutput& output);

class RunOutputs {
 public:
  // Opens RUN_DIR/outputs.h5 and checks that it maps every sample (/sample_index reads 0..N-1).
  // InputError naming --resume when the run is not complete.
  explicit RunOutputs(const std::string& run_dir);
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return total_; }
  const std::vector<StoredOutput>& outputs() const { return outputs_; }
  const StoredOutput* output(const std::string& name) const;

  // Rows [first, first + count) of /outputs/<name>, in its stored type.
  Tensor read_rows(const std::string& name, int64_t first, int64_t count) const;
  // Keys of rows [first, first + count) (NUL padding removed).
  std::vector<std::string> keys(int64_t first, int64_t count) const;
  bool has_keys() const { return has_keys_; }
  // Per row: 0 ok, else the RowStatus of a sample that was not computed (io/rank_file.h).
  const std::vector<uint8_t>& status() const { return status_; }
  // Per row (height, width) of the original image, when the input was images.
  bool has_sizes() const { return !sizes_.empty(); }
  std::pair<int32_t, int32_t> original_size(int64_t row) const;
  // The run's image geometry (export/geometry.h), when it recorded one.
  const std::optional<std::string>& preprocess() const { return preprocess_; }
  // Why a bad sample was bad, from /bad_samples ("" when not recorded).
  std::string bad_reason(int64_t row) const;

 private:
  struct Handles;
  std::string path_;
  int64_t total_ = 0;
  std::vector<StoredOutput> outputs_;
  bool has_keys_ = false;
  std::vector<uint8_t> status_;
  std::vector<int32_t> sizes_;  // [N * 2]
  std::map<int64_t, std::string> bad_reasons_;
  std::optional<std::string> preprocess_;
  std::unique_ptr<Handles> h_;  // the file, its /sample_key
};

}  // namespace sluice
