#pragma once
// The samples' keys as Sluice keeps them: the padded-key format, read and written here only.
//
// In a batch (pipeline/batch_input.h BatchRows, io/rank_file.h RowMeta) the keys are `width` bytes
// each, one after the other, every key NUL-padded (a key as long as the width has no NUL, a longer
// one is cut to it).  In a rank file and in outputs.h5 (docs/file-formats.md) they are /sample_key,
// fixed-length strings of the same width, NUL-padded, that h5py reads as bytes.  A key is its bytes
// up to the first NUL.
//
// SampleKeyReader also reads the /sample_key of a file written by other tools: variable-length
// strings (h5py's str) and space-padded fixed-length ones, trailing spaces dropped.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

// Row `row` of `keys` (rows of `width` bytes, NUL-padded): its bytes up to the first NUL.
std::string padded_key(const char* keys, std::size_t width, int64_t row);

// Writes `key` as row `row` of `keys` (rows of `width` bytes): cut to `width` bytes, the rest of the
// row NUL.
void put_padded_key(char* keys, std::size_t width, int64_t row, const std::string& key);

// /sample_key of an open HDF5 file (a rank file, or outputs.h5 whose virtual /sample_key maps the
// rank files'), read by rows.
class SampleKeyReader {
 public:
  // `file`: the file's HDF5 id (hid_t); `where` names the file in errors.  InputError when
  // /sample_key is there but is not a one-dimensional string dataset.  A file without it reads as
  // having no keys (has() false).
  SampleKeyReader(int64_t file, const std::string& where);
  ~SampleKeyReader();
  SampleKeyReader(const SampleKeyReader&) = delete;
  SampleKeyReader& operator=(const SampleKeyReader&) = delete;

  bool has() const;
  int64_t rows() const;       // rows of /sample_key (0 without)
  std::size_t width() const;  // bytes per key of a fixed-length one (0 variable-length, or none)
  // Keys of rows [first, first + count), the range cut to the rows there are (none without keys).
  std::vector<std::string> read(int64_t first, int64_t count) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
