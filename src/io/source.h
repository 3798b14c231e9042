#pragma once
// Where samples come from.  A source is read by several reader threads at once.
//
// Two kinds (docs/architecture.md, "Inputs"):
//  - tensor sources (synthetic, HDF5, .npy): every sample is a fixed-shape array; read() writes
//    whole samples [first, first + count) in row-major order.
//  - encoded sources (image folders, globs, path lists, tar shards): every sample is a file's
//    bytes; read_encoded() copies them one after another into a byte area and an image decoder
//    (image/, pipeline/batch_input.h) turns them into the model's input.
// Every sample has a key (the path relative to the input root, a tar member's stem, an entry of
// an HDF5 key dataset, or the decimal index), stored in the rank files beside the sample index.
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace sluice {

// Where read_encoded() put one sample.
struct EncodedSample {
  std::size_t offset = 0;  // into the destination area
  std::size_t size = 0;    // bytes (0 when `error` is set)
  std::string error;       // non-empty: the sample could not be read (vanished, unreadable, ...)
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string describe() const = 0;
  virtual int64_t size() const = 0;               // N samples

  // ---- tensor sources -------------------------------------------------------------------------
  virtual const Shape& sample_shape() const = 0;  // one sample, no batch dimension ({} when encoded)
  virtual DType dtype() const = 0;                // F32 or U8 (U8 when encoded)
  std::size_t sample_bytes() const { return static_cast<std::size_t>(shape_numel(sample_shape())) * dtype_size(dtype()); }
  // Thread-safe.  Writes count * sample_bytes() bytes to dst.  Throws InputError when the input
  // changed under the job (a file truncated or replaced).
  virtual void read(int64_t first, int64_t count, void* dst) = 0;

  // ---- encoded sources ------------------------------------------------------------------------
  virtual bool encoded() const { return false; }
  // An encoded source whose samples are UTF-8 passages (io/text_source.cpp), for a text decoder
  // (a tokenizer) rather than an image one.
  virtual bool text() const { return false; }
  // The most bytes any `count` consecutive samples take together (sizes the in-slots).
  virtual std::size_t max_encoded_bytes(int64_t count) const { return 0; }
  // Thread-safe.  Copies samples [first, first + count) one after another into dst (room for
  // `capacity` bytes, at least max_encoded_bytes(count)); out[k] says where sample first + k is.
  // A sample that cannot be read gets out[k].error and no bytes; the others are unaffected.
  virtual void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) {}

  // ---- every source -----------------------------------------------------------------------------
  // The key of sample i, at most key_bytes() bytes (the rank files store keys NUL-padded to that
  // width).  Default: the decimal index.
  virtual std::string key(int64_t i) const { return std::to_string(i); }
  virtual std::size_t key_bytes() const { return std::to_string(size() > 0 ? size() - 1 : 0).size(); }
  // Identifies the input for --resume: changes when the samples would (another file, another size,
  // other contents of the sampled bytes, another seed or shape).  Cheap: never reads every sample.
  virtual std::string fingerprint() const { return describe(); }
};

// Deterministic pseudo-random samples: sample i depends only on (seed, i), so outputs do not depend
// on which rank or batch computes it.  float32 values in [-1, 1), uint8 values in [0, 255].
std::unique_ptr<Source> make_synthetic_source(int64_t samples, const Shape& sample_shape, DType dtype, uint64_t seed);

// `limit` below: the first `limit` samples only (--samples; 0: all of them).

// An HDF5 dataset [N, ...] of float32 or uint8, read by hyperslab straight into the slot.  `keys`
// (--input-keys) names a string dataset [N] in the same file holding each sample's key.  Throws
// InputError for a missing file or dataset, or an unsupported type.
std::unique_ptr<Source> open_hdf5_source(const std::string& path, const std::string& dataset,
                                         const std::string& keys = "", int64_t limit = 0);

// A .npy array [N, ...] of float32 or uint8 (io/npy_source.cpp).
std::unique_ptr<Source> open_npy_source(const std::string& path, int64_t limit = 0);

// Encoded sources over image files (.jpg, .jpeg, .png; io/file_source.cpp, io/file_scan.cpp):
//  - a folder, walked recursively, keys = paths relative to it, sorted bytewise;
//  - a glob ('data/*/img_*.jpg', ** for any depth), keys relative to its fixed leading folders;
//  - a text file listing paths (one per line, relative to the list's folder, # comments), in its order.
std::unique_ptr<Source> open_folder_source(const std::string& folder, int64_t limit = 0);
std::unique_ptr<Source> open_glob_source(const std::string& pattern, int64_t limit = 0);
std::unique_ptr<Source> open_list_source(const std::string& list, int64_t limit = 0);
// Tar shards in the WebDataset layout (io/tar_source.cpp): one .tar, a brace range
// ('train-{000000..000099}.tar') or a glob of .tar files; a sample is a run of members sharing a
// key (the member path up to the first dot of its file name) and its bytes are the image member's.
std::unique_ptr<Source> open_tar_source(const std::string& shards, int64_t limit = 0);

// Text corpora (io/text_source.cpp): one file of JSONL (the passage in a string field), CSV or TSV
// (a column named in the header line, RFC 4180 quoting) or plain text (one passage a line); blank
// lines are no records.  Each sample's bytes are its passage's UTF-8 bytes; a record that gives none
// (ill-formed UTF-8, not a JSON object, no such field, another number of CSV fields than the
// header, longer than max_record_bytes) is a bad sample with its reason.  Keys: `key_field`'s value
// (a JSON string or number, a CSV column; at most 256 bytes), else the record's index.  Opening
// makes one pass over the file and keeps a sparse index, not a vector per record.
inline constexpr uint64_t kDefaultMaxRecordBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMaxRecordBytes = uint64_t{1} << 30;
struct TextOptions {
  std::string field = "text";   // --text-field: the JSONL field or CSV/TSV column of the passage
  std::string key_field;        // --key-field: the one of the key ("" : the record's index)
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // --max-record-bytes
};
// `format`: jsonl, csv, tsv or text.  InputError for a missing, compressed or non-text file, a CSV
// header without the column, a file without records.
std::unique_ptr<Source> open_text_source(const std::string& path, const std::string& format,
                                         const TextOptions& options, int64_t limit = 0);

// Parquet (io/parquet_source.cpp; built when CMake found the pyarrow wheel, cmake/Pyarrow.cmake):
// one file, a folder of *.parquet files (recursive; names starting with '.' or '_' skipped), a
// glob, or any of these as an s3:// URL (Arrow's S3 file system: credentials from the AWS variables
// and profile files, the endpoint from AWS_ENDPOINT_URL).  Files in bytewise order, rows in file
// order.  One column gives the samples:
//  - images (an encoded source, as image files): a binary column, or a struct with a binary `bytes`
//    child (the {bytes, path} of Hugging Face's Image feature);
//  - arrays (a tensor source): a fixed-size list of float32 or uint8 (nested: more axes) or an
//    arrow.fixed_shape_tensor column;
//  - text (text() true: the samples a JSONL source gives): the string column `text.field`.
// `image_field` (--image-field) names the image or array column; "" takes the table's one image or
// array column, or text when it has none.  Keys: `text.key_field` (a string column, values of at
// most 256 bytes, or an integer column; "image.path" names a struct's child), else the row index.
// Opening reads the footers only; row groups are the unit of reading (a rank's contiguous share
// of rows decodes its own row groups).  A null value, a row group that does not decode, a value
// over --max-record-bytes (text) are bad samples with their reason; a file without a readable
// footer, or without the column, is an InputError naming it.
std::unique_ptr<Source> open_parquet_source(const std::string& path, const std::string& image_field,
                                            const TextOptions& text, int64_t limit = 0);
// Whether this build reads Parquet (false: open_parquet_source says how to enable it).
bool parquet_available();

// What --input and its companions ask for (app/job.h).
struct InputOptions {
  std::string path = "synthetic";   // --input
  std::string kind = "auto";        // --input-kind: auto, one of kInputKinds or kTextInputKinds, parquet
  std::string dataset = "/images";  // --input-dataset (HDF5)
  std::string keys;                 // --input-keys (HDF5)
  int64_t samples = 0;              // --samples: the first N (0: all; synthetic: 512)
  Shape sample_shape;               // synthetic
  DType dtype = DType::F32;         // synthetic
  uint64_t seed = 0;                // synthetic
  TextOptions text;                 // jsonl, csv, tsv, text; parquet (--text-field, --key-field)
  std::string image_field;          // --image-field (parquet): the column of images or arrays
};
inline constexpr const char* kInputKinds = "synthetic, hdf5, npy, folder, glob, list, tar";
inline constexpr const char* kTextInputKinds = "jsonl, csv, tsv, text";  // text corpora (open_text_source)
// The kind `path` names by what it is: "synthetic", a folder, a .tar file or brace pattern, glob
// characters (a glob of .tar files is "tar"), .txt/.lst, .npy, .h5/.hdf5 (or such a file's magic
// bytes), .jsonl/.ndjson, .csv, .tsv (also followed by .gz, .zst, .xz, .bz2: the source then says
// how to decompress), .parquet (a file, a glob, a folder whose first data file found is one, an
// s3:// URL); "" when it is none of them.  Plain text ("text") is never detected: a .txt
// file is a list of image paths; --input-kind text reads it as passages.
std::string detect_input_kind(const std::string& path);
// Opens the input (io/open_input.cpp).  UsageError or InputError naming the kinds when the path is
// none of them.
std::unique_ptr<Source> open_input(const InputOptions& options);

}  // namespace sluice
