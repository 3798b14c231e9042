// Parquet inputs (io/source.h, open_parquet_source): one column of a table of Parquet files, on
// local disk or object storage (s3://), as images (an encoded source), arrays (a tensor source) or
// text passages (an encoded source whose text() is true, the samples a JSONL source gives).
//
// Opening reads every file's footer and nothing else: the row groups' row counts, a bound on the
// bytes of the column's values in each (its size statistics, else its uncompressed size), the
// schema.  State is O(row groups).  A read decodes whole row groups of the one or two columns it
// needs (values, keys) and keeps the last few decoded (kCachedGroups, kCacheBytes): the ranks take
// contiguous shares of rows (cluster/work.h), so each rank decodes its own row groups, and only a
// row group cut by a share boundary is decoded by both ranks.  Readers of the same row group wait
// for one decoding.
//
// A row that gives no sample is a bad sample with its reason, never an error of the job: a null, a
// key that is null, empty or over 256 bytes, text that is not UTF-8 or is over --max-record-bytes,
// and every row of a row group that does not decode (a corrupt page: the file and row group are
// named).  An array column has no bad-sample channel (Source::read): such rows are NaN (float32,
// marked non-finite downstream) or zeros (uint8), with one warning.  A file whose footer cannot be
// read, or that lacks the column, is an InputError naming it; so is a local file that changes
// during the run.
//
// Arrow's headers need C++20: this is the one translation unit that includes them (CMakeLists.txt).
#include "core/error.h"
#include "io/source.h"

#ifndef SLUICE_HAVE_PARQUET

namespace sluice {

bool parquet_available() { return false; }

std::unique_ptr<Source> open_parquet_source(const std::string& path, const std::string&, const TextOptions&, int64_t) {
  throw InputError(str("input ", path, ": Parquet inputs are not in this build of sluice (CMake did not find the "
                       "pyarrow wheel, whose Arrow and Parquet libraries it links)"),
                   "install it (data_tools/install-deps.sh, or pip install the pyarrow of data_tools/requirements.txt) "
                   "and rebuild (data_tools/build.sh): CMake asks $SLUICE_PYTHON, else python3, for pyarrow "
                   "(cmake/Pyarrow.cmake; -DSLUICE_PARQUET=ON makes it required)");
}

}  // namespace sluice

#else

#include <fnmatch.h>

#include <arrow/api.h>
#include <arrow/extension_type.h>
#include <arrow/filesystem/filesystem.h>
#include <arrow/filesystem/localfs.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/utf8.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/size_statistics.h>
#include <parquet/statistics.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/log.h"
#include "io/file_identity.h"
#include "io/file_scan.h"
#include "io/source_util.h"

namespace sluice {

bool parquet_available() { return true; }

namespace {

constexpr std::size_t kMaxKeyBytes = 256;  // as text inputs: a longer key makes a bad sample
// As io/encoded_source.cpp: no image the decoders take has a larger file.
constexpr uint64_t kMaxImageBytes = (uint64_t{1} << 27) * 8 + (uint64_t{64} << 20);
constexpr std::size_t kCachedGroups = 4;         // decoded row groups kept (reader threads share them)
constexpr int64_t kCacheBytes = int64_t{1} << 30;  // ... and beyond the newest two, no more bytes than this
constexpr std::size_t kIdleReaders = 8;          // open file readers kept for reuse
constexpr int kOpenThreads = 16;                 // footers read at once (object storage: one request each)

enum class Kind { Image, Array, Text };
const char* kind_name(Kind k) { return k == Kind::Image ? "images" : k == Kind::Array ? "arrays" : "passages"; }

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

template <typename T>
T value_or_throw(arrow::Result<T> r, const std::string& where) {
  if (!r.ok()) throw InputError(str(where, ": ", r.status().message()));
  return std::move(r).ValueUnsafe();
}

bool binary_type(arrow::Type::type t) {
  return t == arrow::Type::BINARY || t == arrow::Type::LARGE_BINARY || t == arrow::Type::BINARY_VIEW ||
         t == arrow::Type::FIXED_SIZE_BINARY;
}
bool string_type(arrow::Type::type t) {
  return t == arrow::Type::STRING || t == arrow::Type::LARGE_STRING || t == arrow::Type::STRING_VIEW;
}

// The bytes of a binary or string value (not null).
std::string_view bytes_at(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::BINARY:
    case arrow::Type::STRING: return static_cast<const arrow::BinaryArray&>(a).GetView(i);
    case arrow::Type::LARGE_BINARY:
    case arrow::Type::LARGE_STRING: return static_cast<const arrow::LargeBinaryArray&>(a).GetView(i);
    case arrow::Type::BINARY_VIEW:
    case arrow::Type::STRING_VIEW: return static_cast<const arrow::BinaryViewArray&>(a).GetView(i);
    case arrow::Type::FIXED_SIZE_BINARY: return static_cast<const arrow::FixedSizeBinaryArray&>(a).GetView(i);
    default: return {};
  }
}

// An integer value as decimal text.
std::string integer_at(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
#define SLUICE_INT_CASE(T, A) \
  case arrow::Type::T: return std::to_string(static_cast<const arrow::A&>(a).Value(i));
    SLUICE_INT_CASE(INT8, Int8Array)
    SLUICE_INT_CASE(INT16, Int16Array)
    SLUICE_INT_CASE(INT32, Int32Array)
    SLUICE_INT_CASE(INT64, Int64Array)
    SLUICE_INT_CASE(UINT8, UInt8Array)
    SLUICE_INT_CASE(UINT16, UInt16Array)
    SLUICE_INT_CASE(UINT32, UInt32Array)
    SLUICE_INT_CASE(UINT64, UInt64Array)
#undef SLUICE_INT_CASE
    default: return {};
  }
}

// An array column's sample: shape, element type, and how to find row i's elements.
struct ArrayLayout {
  Shape shape;
  DType dtype = DType::F32;
  int levels = 0;  // nested fixed-size lists down to the values
};

// The layout of a fixed-size list (nested for more axes) or arrow.fixed_shape_tensor type, or why
// it is not one Sluice reads ("" : not an array type at all).
std::string array_layout(const arrow::Field& field, ArrayLayout* out) {
  std::shared_ptr<arrow::DataType> t = field.type();
  Shape tensor_shape;
  std::string ext_name, ext_meta;
  if (t->id() == arrow::Type::EXTENSION) {
    const auto& ext = static_cast<const arrow::ExtensionType&>(*t);
    ext_name = ext.extension_name();
    ext_meta = ext.Serialize();
    t = ext.storage_type();
  } else if (field.metadata()) {  // an extension type this Arrow did not register: its storage and metadata
    const auto name = field.metadata()->Get("ARROW:extension:name");
    const auto meta = field.metadata()->Get("ARROW:extension:metadata");
    if (name.ok()) ext_name = *name;
    if (meta.ok()) ext_meta = *meta;
  }
  if (t->id() != arrow::Type::FIXED_SIZE_LIST) return "";
  if (!ext_name.empty() && ext_name != "arrow.fixed_shape_tensor")
    return str("an extension type ", ext_name, " Sluice does not read");
  ArrayLayout l;
  while (t->id() == arrow::Type::FIXED_SIZE_LIST) {
    const auto& fl = static_cast<const arrow::FixedSizeListType&>(*t);
    l.shape.push_back(fl.list_size());
    t = fl.value_type();
    ++l.levels;
  }
  if (t->id() == arrow::Type::FLOAT) l.dtype = DType::F32;
  else if (t->id() == arrow::Type::UINT8) l.dtype = DType::U8;
  else return str("arrays of ", t->ToString(), "; Sluice reads float32 or uint8 (cast the column, e.g. pyarrow.compute.cast)");
  if (ext_name == "arrow.fixed_shape_tensor") {
    const auto j = nlohmann::json::parse(ext_meta, nullptr, false);
    if (j.is_discarded() || !j.contains("shape") || !j["shape"].is_array()) return "a fixed_shape_tensor without its shape";
    if (j.contains("permutation") && j["permutation"].is_array())
      for (std::size_t k = 0; k < j["permutation"].size(); ++k)
        if (j["permutation"][k] != static_cast<int>(k)) return "a fixed_shape_tensor with a permutation; Sluice reads row-major tensors";
    Shape s;
    for (const auto& d : j["shape"]) s.push_back(d.get<int64_t>());
    if (l.levels != 1 || shape_numel(s) != l.shape[0]) return "a fixed_shape_tensor whose shape does not match its storage";
    l.shape = s;
  }
  *out = l;
  return "ok";
}

// How a column reads as samples: images, arrays or text, or why it does not.
std::string classify(const arrow::Field& f, Kind* kind, ArrayLayout* layout, std::vector<std::string>* leaf) {
  const auto id = f.type()->id();
  leaf->clear();
  if (binary_type(id)) {
    *kind = Kind::Image;
    return "";
  }
  if (id == arrow::Type::STRUCT) {
    const auto child = static_cast<const arrow::StructType&>(*f.type()).GetFieldByName("bytes");
    if (child && binary_type(child->type()->id())) {
      *kind = Kind::Image;
      leaf->push_back("bytes");
      return "";
    }
    return str("a struct without a binary 'bytes' child (", f.type()->ToString(), ")");
  }
  const std::string a = array_layout(f, layout);
  if (a == "ok") {
    *kind = Kind::Array;
    return "";
  }
  if (!a.empty()) return a;
  if (string_type(id)) {
    *kind = Kind::Text;
    return "";
  }
  return str("of type ", f.type()->ToString(), ", not images (binary, {bytes, path}), arrays (fixed-size lists) or text");
}

// A column's values through its path (a top-level column, then struct children), chunk by chunk;
// a row is null when the value or any struct above it is.
struct Column {
  struct Chunk {
    std::vector<std::shared_ptr<arrow::Array>> path;  // path.back(): the values
    int64_t first = 0;                                 // its first row in the row group
  };
  std::vector<Chunk> chunks;

  std::pair<const Chunk*, int64_t> at(int64_t row) const {
    auto it = std::upper_bound(chunks.begin(), chunks.end(), row, [](int64_t r, const Chunk& c) { return r < c.first; });
    --it;
    return {&*it, row - it->first};
  }
  static bool null(const Chunk& c, int64_t i) {
    for (const auto& a : c.path)
      if (a->IsNull(i)) return true;
    return false;
  }
};

// `names`: a top-level column, then struct children.  "" or why the table does not have it.
std::string column_of(const arrow::Table& table, const std::vector<std::string>& names, Column* out) {
  const auto col = table.GetColumnByName(names[0]);
  if (!col) return str("no column ", in_quotes(names[0]));
  int64_t first = 0;
  for (const auto& chunk : col->chunks()) {
    Column::Chunk c;
    c.first = first;
    c.path.push_back(chunk);
    for (std::size_t k = 1; k < names.size(); ++k) {
      if (c.path.back()->type_id() != arrow::Type::STRUCT) return str(in_quotes(names[k - 1]), " is no struct");
      const auto child = static_cast<const arrow::StructArray&>(*c.path.back()).GetFieldByName(names[k]);
      if (!child) return str("no field ", in_quotes(names[k]), " in ", in_quotes(names[k - 1]));
      c.path.push_back(child);
    }
    if (c.path.back()->type_id() == arrow::Type::EXTENSION)
      c.path.back() = static_cast<const arrow::ExtensionArray&>(*c.path.back()).storage();
    first += chunk->length();
    out->chunks.push_back(std::move(c));
  }
  if (out->chunks.empty()) return "no data";
  return "";
}

// One decoded row group: its value and key columns, or why it could not be read.
struct Decoded {
  Column values, keys;
  std::string error;
  int64_t bytes = 0;
};

struct File {
  std::string path;  // in the file system
  std::string name;  // relative to the input's root: messages, the fingerprint
  int64_t size = 0, mtime_ns = 0;
  std::optional<FileIdentity> identity;  // local files: checked after every read
  std::vector<int> value_leaves, key_leaves;
  int64_t first_row = 0;
};

struct Group {
  int64_t first_row = 0;  // in the input
  int64_t rows = 0;       // in the file (the input may use fewer: --samples)
  int32_t file = 0, index = 0;
  uint64_t value_bytes = 0;  // a bound on its values' bytes
  uint64_t identity = 0;     // a hash of its column chunks' offsets and sizes (the fingerprint)
};

// What opening one file found.
struct Footer {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::string error;
};

class ParquetSource final : public Source {
 public:
  ParquetSource(std::string input, std::string image_field, const TextOptions& text)
      : input_(std::move(input)), image_field_(std::move(image_field)), text_(text) {}
  ~ParquetSource() override = default;

  void open(int64_t limit);

  std::string describe() const override {
    std::string s = str("parquet ", input_, " (", files_.size(), " file", files_.size() == 1 ? "" : "s", ", ",
                        groups_.size(), " row group", groups_.size() == 1 ? "" : "s", "): ", n_,
                        kind_ == Kind::Text ? " record" : " row", n_ == 1 ? "" : "s");
    if (limit_hit_) s += " (the first ones: --samples)";
    s += str(", ", kind_name(kind_), " from column ", in_quotes(value_name_), " (", value_type_, ")");
    if (kind_ == Kind::Array) s += str(" of ", shape_str(layout_.shape), " ", dtype_name(layout_.dtype));
    s += key_field_.empty() ? ", keys: the row index" : str(", keys from column ", in_quotes(key_field_));
    return s;
  }
  int64_t size() const override { return n_; }
  const Shape& sample_shape() const override { return kind_ == Kind::Array ? layout_.shape : no_shape_; }
  DType dtype() const override { return kind_ == Kind::Array ? layout_.dtype : DType::U8; }
  bool encoded() const override { return kind_ != Kind::Array; }
  bool text() const override { return kind_ == Kind::Text; }
  std::size_t max_encoded_bytes(int64_t count) const override;
  void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) override;
  void read(int64_t first, int64_t count, void* dst) override;
  std::string key(int64_t i) const override;
  std::size_t key_bytes() const override { return key_bytes_; }
  std::string fingerprint() const override;

 private:
  Footer open_file(const File& f) const;
  void resolve_columns(const parquet::arrow::FileReader& r, File& f);
  std::shared_ptr<const Decoded> group(int g, bool values) const;
  std::shared_ptr<const Decoded> decode(int g, bool values) const;
  int group_of(int64_t row) const {
    auto it = std::upper_bound(groups_.begin(), groups_.end(), row, [](int64_t r, const Group& x) { return r < x.first_row; });
    return static_cast<int>(it - groups_.begin()) - 1;
  }
  // Where row r of group g is, for a bad sample's reason.
  std::string where(int g, int64_t r) const {
    const Group& G = groups_[static_cast<std::size_t>(g)];
    const File& f = files_[static_cast<std::size_t>(G.file)];
    return str(f.name, " row ", G.first_row - f.first_row + r);
  }
  // Row r of a decoded group: its key ("" : none or the index) and value bytes, or why it has none.
  std::string key_of(const Decoded& d, int64_t r, std::string* key) const;
  std::string value_of(const Decoded& d, int64_t r, std::string_view* v) const;

  std::string input_, image_field_;
  TextOptions text_;
  std::shared_ptr<arrow::fs::FileSystem> fs_;
  bool local_ = true;
  std::vector<File> files_;
  std::vector<Group> groups_;
  int64_t n_ = 0;
  bool limit_hit_ = false;
  Kind kind_ = Kind::Image;
  ArrayLayout layout_;
  std::string value_name_, value_type_, key_field_;
  std::vector<std::string> value_path_, key_path_;  // column, then struct children, down to the values
  std::vector<std::string> value_field_path_;       // the named column's own path (without 'bytes')
  bool integer_key_ = false, unsigned_key_ = false;
  std::size_t key_bytes_ = 1;
  Shape no_shape_;
  mutable std::atomic<bool> warned_{false};

  struct Cached {
    int group;
    bool values;
    std::shared_future<std::shared_ptr<const Decoded>> decoded;
    int64_t bytes = 0;
  };
  mutable std::mutex cache_mutex_;
  mutable std::list<Cached> cache_;  // most recent first
  mutable std::vector<std::pair<int64_t, std::size_t>> bounds_;  // max_encoded_bytes(count), remembered
  mutable std::mutex readers_mutex_;
  mutable std::list<std::pair<int, std::unique_ptr<parquet::arrow::FileReader>>> idle_readers_;
};

Footer ParquetSource::open_file(const File& f) const {
  Footer out;
  try {
    arrow::fs::FileInfo info(f.path, arrow::fs::FileType::File);
    info.set_size(f.size);  // spares object storage a HEAD request
    auto file = fs_->OpenInputFile(info);
    if (!file.ok()) {
      out.error = file.status().message();
      return out;
    }
    parquet::ReaderProperties props = parquet::default_reader_properties();
    props.set_page_checksum_verification(true);  // a page whose CRC was written and fails it is corrupt
    parquet::ArrowReaderProperties arrow_props;
    arrow_props.set_use_threads(false);  // the reader threads are the parallelism
    auto raw = parquet::ParquetFileReader::Open(*file, props);
    auto reader = parquet::arrow::FileReader::Make(arrow::default_memory_pool(), std::move(raw), arrow_props);
    if (!reader.ok()) out.error = reader.status().message();
    else out.reader = std::move(reader).ValueUnsafe();
  } catch (const std::exception& e) {  // parquet throws ParquetException for a malformed footer
    out.error = e.what();
  }
  return out;
}

// The leaf column indices of `names` (a column, then struct children) in the file's schema.
std::vector<int> leaves_of(const parquet::arrow::SchemaManifest& m, const std::vector<std::string>& names) {
  const std::vector<parquet::arrow::SchemaField>* level = &m.schema_fields;
  const parquet::arrow::SchemaField* at = nullptr;
  for (const std::string& name : names) {
    at = nullptr;
    for (const auto& f : *level)
      if (f.field->name() == name) at = &f;
    if (!at) return {};
    level = &at->children;
  }
  std::vector<int> out;
  std::vector<const parquet::arrow::SchemaField*> todo{at};
  while (!todo.empty()) {
    const auto* f = todo.back();
    todo.pop_back();
    if (f->is_leaf()) out.push_back(f->column_index);
    for (const auto& c : f->children) todo.push_back(&c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `name` as a path: the top-level column of that name, else split at its dots (a struct's child).
std::vector<std::string> field_path(const arrow::Schema& schema, const std::string& name) {
  if (schema.GetFieldByName(name) || name.find('.') == std::string::npos) return {name};
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t dot; (dot = name.find('.', at)) != std::string::npos; at = dot + 1) parts.push_back(name.substr(at, dot - at));
  parts.push_back(name.substr(at));
  return parts;
}

std::shared_ptr<arrow::Field> field_at(const arrow::Schema& schema, const std::vector<std::string>& path) {
  std::shared_ptr<arrow::Field> f = schema.GetFieldByName(path[0]);
  for (std::size_t k = 1; f && k < path.size(); ++k)
    f = f->type()->id() == arrow::Type::STRUCT ? static_cast<const arrow::StructType&>(*f->type()).GetFieldByName(path[k]) : nullptr;
  return f;
}

std::string column_list(const arrow::Schema& schema) {
  std::string s;
  for (int i = 0; i < schema.num_fields() && i < 20; ++i)
    s += str(i ? ", " : "", in_quotes(schema.field(i)->name()), " (", schema.field(i)->type()->ToString(), ")");
  if (schema.num_fields() > 20) s += ", ...";
  return s;
}

void ParquetSource::resolve_columns(const parquet::arrow::FileReader& r, File& f) {
  std::shared_ptr<arrow::Schema> schema;
  const arrow::Status st = const_cast<parquet::arrow::FileReader&>(r).GetSchema(&schema);
  if (!st.ok()) throw InputError(str("input ", input_, ": ", f.name, ": its schema: ", st.message()));
  const std::string where = str("input ", input_, ": ", f.name);
  if (value_path_.empty()) {  // the first file decides the column and the kind
    if (!image_field_.empty()) {
      value_path_ = field_path(*schema, image_field_);
      const auto fld = field_at(*schema, value_path_);
      if (!fld) throw InputError(str(where, ": no column ", in_quotes(image_field_), " (--image-field); its columns: ", column_list(*schema)));
      std::vector<std::string> leaf;
      const std::string why = classify(*fld, &kind_, &layout_, &leaf);
      if (!why.empty() || kind_ == Kind::Text)
        throw InputError(str(where, ": column ", in_quotes(image_field_), " (--image-field) is ",
                             why.empty() ? "text (a string column: --text-field reads it as passages)" : why));
      value_field_path_ = value_path_;
      value_path_.insert(value_path_.end(), leaf.begin(), leaf.end());
      value_name_ = image_field_;
      value_type_ = fld->type()->ToString();
    } else {
      std::vector<std::string> found;
      std::string near;  // a column that looks like the samples but is not of a type Sluice reads
      for (const auto& fld : schema->fields()) {
        Kind k = Kind::Text;
        ArrayLayout l;
        std::vector<std::string> leaf;
        const std::string why = classify(*fld, &k, &l, &leaf);
        const auto id = fld->type()->id();
        if (why.empty() && k != Kind::Text) found.push_back(fld->name());
        else if (!why.empty() && near.empty() &&
                 (id == arrow::Type::FIXED_SIZE_LIST || id == arrow::Type::EXTENSION || id == arrow::Type::STRUCT))
          near = str("column ", in_quotes(fld->name()), " is ", why);
      }
      if (found.size() > 1) {
        std::string names;
        for (const auto& n : found) names += str(names.empty() ? "" : ", ", in_quotes(n));
        throw InputError(str(where, ": several columns could hold the samples (", names, "); --image-field names one"));
      }
      const std::string name = found.empty() ? text_.field : found[0];
      value_path_ = field_path(*schema, name);
      const auto fld = field_at(*schema, value_path_);
      if (!fld && !near.empty()) throw InputError(str(where, ": ", near));
      if (!fld)
        throw InputError(str(where, ": no image or array column, and no text column ", in_quotes(name), " (--text-field); its columns: ",
                             column_list(*schema)),
                         "--image-field names a column of images (binary, {bytes, path}) or arrays (fixed-size lists), "
                         "--text-field one of text");
      std::vector<std::string> leaf;
      const std::string why = classify(*fld, &kind_, &layout_, &leaf);
      if (!why.empty()) throw InputError(str(where, ": column ", in_quotes(name), " is ", why));
      if (found.empty() && kind_ != Kind::Text)
        throw InputError(str(where, ": column ", in_quotes(name), " (--text-field) holds ", fld->type()->ToString(), ", not text"));
      value_field_path_ = value_path_;
      value_path_.insert(value_path_.end(), leaf.begin(), leaf.end());
      value_name_ = name;
      value_type_ = fld->type()->ToString();
    }
    if (!text_.key_field.empty()) {
      key_path_ = field_path(*schema, text_.key_field);
      const auto kf = field_at(*schema, key_path_);
      if (!kf) throw InputError(str(where, ": no column ", in_quotes(text_.key_field), " (--key-field); its columns: ", column_list(*schema)));
      const auto id = kf->type()->id();
      integer_key_ = arrow::is_integer(id);
      unsigned_key_ = arrow::is_unsigned_integer(id);
      if (!integer_key_ && !string_type(id) && !binary_type(id))
        throw InputError(str(where, ": column ", in_quotes(text_.key_field), " (--key-field) holds ", kf->type()->ToString(),
                             "; keys come from a string or integer column"));
      key_field_ = text_.key_field;
    }
  } else {  // every other file must hold the same column, of the same type
    const auto fld = field_at(*schema, value_field_path_);
    if (!fld || fld->type()->ToString() != value_type_)
      throw InputError(str(where, ": ", fld ? str("its column ", in_quotes(value_name_), " holds ", fld->type()->ToString())
                                            : str("no column ", in_quotes(value_name_)),
                           "; the first file's holds ", value_type_, " (every file of the input must have the same column)"));
    if (!key_path_.empty() && !field_at(*schema, key_path_))
      throw InputError(str(where, ": no column ", in_quotes(key_field_), " (--key-field), which the first file has"));
  }
  f.value_leaves = leaves_of(r.manifest(), value_path_);
  if (!key_path_.empty()) f.key_leaves = leaves_of(r.manifest(), key_path_);
  if (f.value_leaves.empty() || (!key_path_.empty() && f.key_leaves.empty()))
    throw InputError(str(where, ": its Parquet schema does not hold the column ", in_quotes(value_name_)));
}


// S3 is set up once per process, and must be shut down before Arrow's S3 client finalizer (a static
// made with the first client) is destroyed at exit, or the AWS SDK crashes there.  Exit handlers
// run in the reverse order of their registration: registered after the first client is made, ours
// runs before that static goes.
void ensure_s3(const std::string& where) {
  const arrow::Status st = arrow::fs::EnsureS3Initialized();
  if (!st.ok()) throw InputError(str(where, ": cannot set up S3: ", st.message()));
}
void finalize_s3_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit([] { (void)arrow::fs::EnsureS3Finalized(); }); });
}

bool glob_component(const std::string& c) { return c.find_first_of("*[") != std::string::npos; }

bool hidden_path(const std::string& rel) {
  std::size_t at = 0;
  while (at < rel.size()) {
    if (rel[at] == '.' || rel[at] == '_') return true;
    const std::size_t slash = rel.find('/', at);
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return false;
}

bool parquet_name(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "parquet" || ext == "parq" || ext == "pq";
}

int64_t mtime_ns(const arrow::fs::FileInfo& info) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(info.mtime().time_since_epoch()).count();
}

// The widest decimal text of an integer column chunk's values, from its statistics (20 without).
std::size_t integer_width(const parquet::ColumnChunkMetaData& cc, bool is_unsigned) {
  const auto st = cc.is_stats_set() ? cc.statistics() : nullptr;
  if (!st || !st->HasMinMax()) return 20;
  auto width = [&](int64_t lo, int64_t hi) { return std::max(std::to_string(lo).size(), std::to_string(hi).size()); };
  if (st->physical_type() == parquet::Type::INT32) {
    const auto& t = static_cast<const parquet::Int32Statistics&>(*st);
    if (is_unsigned) return width(static_cast<uint32_t>(t.min()), static_cast<uint32_t>(t.max()));
    return width(t.min(), t.max());
  }
  if (st->physical_type() == parquet::Type::INT64) {
    const auto& t = static_cast<const parquet::Int64Statistics&>(*st);
    if (is_unsigned)
      return std::max(std::to_string(static_cast<uint64_t>(t.min())).size(), std::to_string(static_cast<uint64_t>(t.max())).size());
    return width(t.min(), t.max());
  }
  return 20;
}

void ParquetSource::open(int64_t limit) {
  const std::string where = str("input ", input_);
  arrow::util::InitializeUTF8();
  // The file system, and the files: one, a folder's (recursively), or a glob's.
  std::string root, pattern;
  if (input_.rfind("s3://", 0) == 0) {
    local_ = false;
    ensure_s3(where);
    // s3://bucket/prefix/*.parquet?endpoint_override=...: the glob is cut off before the URI is parsed.
    const std::size_t q = input_.find('?');
    std::string base = input_.substr(0, q), query = q == std::string::npos ? "" : input_.substr(q);
    std::size_t cut = base.size();
    for (std::size_t at = 5; at < base.size();) {
      const std::size_t slash = base.find('/', at);
      const std::string comp = base.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
      if (glob_component(comp)) {
        cut = at;
        break;
      }
      if (slash == std::string::npos) break;
      at = slash + 1;
    }
    pattern = base.substr(cut);
    std::string prefix = base.substr(0, cut);
    while (prefix.size() > 5 && prefix.back() == '/') prefix.pop_back();
    auto options = value_or_throw(arrow::fs::S3Options::FromUri(prefix + query, &root), where);
    // Throttling (SlowDown, 503) and dropped connections are retried with backoff, more than the SDK's 3.
    options.retry_strategy = arrow::fs::S3RetryStrategy::GetAwsStandardRetryStrategy(10);
    fs_ = value_or_throw(arrow::fs::S3FileSystem::Make(options), where);
    finalize_s3_at_exit();
  } else {
    fs_ = std::make_shared<arrow::fs::LocalFileSystem>();
    std::error_code ec;
    const bool exists = std::filesystem::exists(input_, ec);
    if (!exists && has_glob_chars(input_)) {
      const GlobPattern g = split_glob(input_);
      const FileScan scan = scan_glob(g, false);
      const std::string abs_root = std::filesystem::absolute(g.root, ec).lexically_normal().string();
      for (const std::string& rel : scan.files) {
        File f;
        f.path = (std::filesystem::path(abs_root) / rel).string();
        f.name = rel;
        files_.push_back(std::move(f));
      }
      if (files_.empty()) throw InputError(str(where, ": the glob matches no file"), kPathsHint);
    } else {
      root = std::filesystem::absolute(input_, ec).lexically_normal().string();
      if (root.size() > 1 && root.back() == '/') root.pop_back();
    }
  }
  if (files_.empty()) {  // not a local glob: list the root
    const auto info = value_or_throw(fs_->GetFileInfo(root), where);
    if (info.type() == arrow::fs::FileType::NotFound)
      throw InputError(str(where, ": no such file or folder"), local_ ? kPathsHint : "s3:// URLs name s3://BUCKET/KEY or a prefix");
    if (info.type() == arrow::fs::FileType::File && pattern.empty()) {
      File f;
      f.path = info.path();
      f.name = info.base_name();
      f.size = info.size();
      f.mtime_ns = mtime_ns(info);
      files_.push_back(std::move(f));
    } else {
      arrow::fs::FileSelector sel;
      sel.base_dir = root;
      sel.recursive = true;
      const auto infos = value_or_throw(fs_->GetFileInfo(sel), where);
      const int flags = pattern.find("**") != std::string::npos ? 0 : FNM_PATHNAME;
      for (const auto& i : infos) {
        if (i.type() != arrow::fs::FileType::File) continue;
        std::string rel = i.path().substr(std::min(i.path().size(), root.size() + (root.empty() ? 0 : 1)));
        if (pattern.empty() ? (hidden_path(rel) || !parquet_name(rel)) : fnmatch(pattern.c_str(), rel.c_str(), flags) != 0)
          continue;
        File f;
        f.path = i.path();
        f.name = std::move(rel);
        f.size = i.size();
        f.mtime_ns = mtime_ns(i);
        files_.push_back(std::move(f));
      }
      if (files_.empty())
        throw InputError(str(where, pattern.empty() ? ": no Parquet files (*.parquet) in it" : ": the glob matches no object"));
    }
  }
  std::sort(files_.begin(), files_.end(), [](const File& a, const File& b) { return a.name < b.name; });
  if (local_)
    for (File& f : files_) {
      f.identity = FileIdentity::of(f.path);
      if (!f.identity) throw InputError(str(where, ": ", f.name, ": vanished while the input was opened"));
      f.size = f.identity->size;
      f.mtime_ns = f.identity->mtime_ns;
    }

  // The footers, a batch at a time on a few threads (one request each on object storage).
  std::size_t widest_key = 1;
  for (std::size_t batch = 0; batch < files_.size() && !(limit > 0 && n_ >= limit);) {
    const std::size_t count = std::min<std::size_t>(files_.size() - batch, batch == 0 ? 1 : kOpenThreads * 4);
    std::vector<Footer> footers(count);
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t k; (k = next++) < count;) footers[k] = open_file(files_[batch + k]);
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < std::min<int>(kOpenThreads, static_cast<int>(count)); ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    for (std::size_t k = 0; k < count && !(limit > 0 && n_ >= limit); ++k) {
      File& f = files_[batch + k];
      if (!footers[k].reader)
        throw InputError(str(where, ": ", f.name, " is not a readable Parquet file: ", footers[k].error),
                         "a file whose footer cannot be read has no rows to mark bad; remove or rewrite it");
      resolve_columns(*footers[k].reader, f);
      const auto md = footers[k].reader->parquet_reader()->metadata();
      f.first_row = n_;
      const int file_index = static_cast<int>(batch + k);
      for (int rg = 0; rg < md->num_row_groups() && !(limit > 0 && n_ >= limit); ++rg) {
        const auto rgm = md->RowGroup(rg);
        if (rgm->num_rows() <= 0) continue;
        Group g;
        g.first_row = n_;
        g.rows = rgm->num_rows();
        g.file = file_index;
        g.index = rg;
        Fnv64 id;
        for (int leaf : f.value_leaves) {
          const auto cc = rgm->ColumnChunk(leaf);
          const auto ss = cc->size_statistics();
          g.value_bytes += static_cast<uint64_t>(ss && ss->unencoded_byte_array_data_bytes ? *ss->unencoded_byte_array_data_bytes
                                                                                           : cc->total_uncompressed_size());
          id.u64(static_cast<uint64_t>(cc->data_page_offset()));
          id.u64(static_cast<uint64_t>(cc->total_compressed_size()));
        }
        for (int leaf : f.key_leaves) {
          const auto cc = rgm->ColumnChunk(leaf);
          id.u64(static_cast<uint64_t>(cc->data_page_offset()));
          if (integer_key_) widest_key = std::max(widest_key, integer_width(*cc, unsigned_key_));
        }
        g.identity = id.value();
        const int64_t taken = std::min(g.rows, limit > 0 ? limit - n_ : g.rows);
        n_ += taken;
        groups_.push_back(g);
        // --samples cut the input short: rows of this group, a later one or a later file are left out.
        if (limit > 0 && n_ >= limit)
          limit_hit_ = taken < g.rows || rg + 1 < md->num_row_groups() || batch + k + 1 < files_.size();
      }
    }
    batch += count;
  }
  if (n_ == 0) throw InputError(str(where, ": no rows"));
  // Files past the limit were never opened: they are not part of the input.
  if (!groups_.empty()) files_.resize(static_cast<std::size_t>(groups_.back().file) + 1);
  const std::size_t index_width = std::to_string(n_ - 1).size();
  key_bytes_ = key_field_.empty() ? index_width : std::max(index_width, integer_key_ ? widest_key : kMaxKeyBytes);
}

std::size_t ParquetSource::max_encoded_bytes(int64_t count) const {
  if (kind_ == Kind::Array || count <= 0) return 0;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);  // asked once a batch: the batch size, the last short batch
    for (const auto& [c, b] : bounds_)
      if (c == count) return b;
  }
  // count consecutive rows touch the row groups from the one holding the first to the one holding
  // the last; the most bytes any such run of row groups holds bounds them (a window starting at the
  // last row of group g reaches count - 1 rows beyond it).
  const std::size_t G = groups_.size();
  std::vector<int64_t> rows(G + 1, 0);
  std::vector<uint64_t> bytes(G + 1, 0);
  for (std::size_t g = 0; g < G; ++g) {
    rows[g + 1] = rows[g] + groups_[g].rows;
    bytes[g + 1] = bytes[g] + groups_[g].value_bytes;
  }
  uint64_t most = 0;
  std::size_t j = 0;
  for (std::size_t g = 0; g < G; ++g) {
    if (j < g) j = g;
    while (j + 1 < G && rows[j + 1] - rows[g + 1] < count - 1) ++j;
    most = std::max(most, bytes[j + 1] - bytes[g]);
  }
  const uint64_t per_sample = kind_ == Kind::Text ? text_.max_record_bytes : kMaxImageBytes;
  const uint64_t cap = static_cast<uint64_t>(std::min<int64_t>(count, n_)) * per_sample;
  const std::size_t bound = static_cast<std::size_t>(std::min(most, cap));
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (bounds_.size() >= 8) bounds_.erase(bounds_.begin());
  bounds_.emplace_back(count, bound);
  return bound;
}

std::shared_ptr<const Decoded> ParquetSource::group(int g, bool values) const {
  std::promise<std::shared_ptr<const Decoded>> promise;
  std::shared_future<std::shared_ptr<const Decoded>> decoded;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->group == g && (it->values || !values)) {
        decoded = it->decoded;
        cache_.splice(cache_.begin(), cache_, it);
        break;
      }
    if (!decoded.valid()) {
      decoded = promise.get_future().share();
      mine = true;
      cache_.push_front(Cached{g, values, decoded, 0});
      while (cache_.size() > kCachedGroups) cache_.pop_back();
    }
  }
  if (mine) {
    std::shared_ptr<const Decoded> d;
    try {
      d = decode(g, values);
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(cache_mutex_);
      cache_.remove_if([&](const Cached& c) { return c.group == g && c.values == values; });
      throw;
    }
    promise.set_value(d);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    int64_t total = 0;
    for (Cached& c : cache_) {
      if (c.group == g && c.values == values) c.bytes = d->bytes;
      total += c.bytes;
    }
    while (cache_.size() > 2 && total > kCacheBytes) {
      total -= cache_.back().bytes;
      cache_.pop_back();
    }
  }
  return decoded.get();
}

std::shared_ptr<const Decoded> ParquetSource::decode(int g, bool values) const {
  const Group& G = groups_[static_cast<std::size_t>(g)];
  const File& f = files_[static_cast<std::size_t>(G.file)];
  auto d = std::make_shared<Decoded>();
  std::unique_ptr<parquet::arrow::FileReader> reader;
  {
    std::lock_guard<std::mutex> lock(readers_mutex_);
    for (auto it = idle_readers_.begin(); it != idle_readers_.end(); ++it)
      if (it->first == G.file) {
        reader = std::move(it->second);
        idle_readers_.erase(it);
        break;
      }
  }
  if (!reader) {
    Footer ft = open_file(f);
    if (ft.reader) reader = std::move(ft.reader);
    else d->error = str("the file cannot be opened again: ", ft.error);
  }
  if (reader) {
    std::vector<int> leaves = f.key_leaves;
    if (values) leaves.insert(leaves.end(), f.value_leaves.begin(), f.value_leaves.end());
    std::sort(leaves.begin(), leaves.end());
    leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
    std::shared_ptr<arrow::Table> table;
    try {
      auto r = reader->ReadRowGroup(G.index, leaves);
      if (r.ok()) table = *r;
      else d->error = r.status().message();
    } catch (const std::exception& e) {
      d->error = e.what();
    }
    if (table) {
      if (table->num_rows() != G.rows) d->error = str("it decodes to ", table->num_rows(), " rows, its footer says ", G.rows);
      if (d->error.empty() && values) d->error = column_of(*table, value_path_, &d->values);
      if (d->error.empty() && !key_path_.empty()) d->error = column_of(*table, key_path_, &d->keys);
      d->bytes = arrow::util::TotalBufferSize(*table);
    }
    if (d->error.empty()) {
      std::lock_guard<std::mutex> lock(readers_mutex_);
      idle_readers_.emplace_front(G.file, std::move(reader));
      if (idle_readers_.size() > kIdleReaders) idle_readers_.pop_back();
    }
  }
  // A file changed under the job ends it, before any row read from it is committed.
  if (f.identity) check_unchanged(f.path, *f.identity);
  if (!d->error.empty()) {
    d->error = str("row group ", G.index, " of ", f.name, " cannot be read: ", d->error);
    d->values = Column{};
    d->keys = Column{};
    d->bytes = 0;
  }
  return d;
}

std::string ParquetSource::key_of(const Decoded& d, int64_t r, std::string* key) const {
  key->clear();
  if (key_path_.empty()) return "";
  if (!d.error.empty()) return d.error;
  const auto [c, i] = d.keys.at(r);
  if (Column::null(*c, i)) return "its key (--key-field) is null";
  const arrow::Array& a = *c->path.back();
  if (integer_key_) {
    *key = integer_at(a, i);
    return "";
  }
  const std::string_view v = bytes_at(a, i);
  if (v.empty()) return "its key (--key-field) is empty";
  if (v.size() > kMaxKeyBytes) return str("its key (--key-field) has ", v.size(), " bytes, more than ", kMaxKeyBytes);
  if (std::memchr(v.data(), 0, v.size())) return "its key (--key-field) holds a NUL character";
  key->assign(v);
  return "";
}

std::string ParquetSource::value_of(const Decoded& d, int64_t r, std::string_view* v) const {
  if (!d.error.empty()) return d.error;
  const auto [c, i] = d.values.at(r);
  if (Column::null(*c, i))
    return str("its ", kind_ == Kind::Text ? "text" : "image", " (column ", in_quotes(value_name_), ") is null");
  *v = bytes_at(*c->path.back(), i);
  if (kind_ == Kind::Image && v->size() > kMaxImageBytes)
    return str(v->size(), " bytes: larger than any image file the decoders take");
  if (kind_ == Kind::Text) {
    if (v->size() > text_.max_record_bytes)
      return str(v->size(), " bytes, more than --max-record-bytes ", text_.max_record_bytes);
    if (!arrow::util::ValidateUTF8(reinterpret_cast<const uint8_t*>(v->data()), static_cast<int64_t>(v->size())))
      return "not valid UTF-8";
  }
  return "";
}

void ParquetSource::read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) {
  SLUICE_CHECK(kind_ != Kind::Array && first >= 0 && count >= 0 && first + count <= n_, describe(), ": samples [", first,
               ", ", first + count, ")");
  std::size_t offset = 0;
  std::string key;
  for (int64_t i = first; i < first + count;) {
    const int g = group_of(i);
    const Group& G = groups_[static_cast<std::size_t>(g)];
    const auto d = group(g, true);
    for (const int64_t end = std::min(first + count, G.first_row + G.rows); i < end; ++i) {
      EncodedSample& s = out[i - first];
      s.offset = offset;
      s.size = 0;
      std::string_view v;
      std::string why = key_of(*d, i - G.first_row, &key);
      if (why.empty()) why = value_of(*d, i - G.first_row, &v);
      if (why.empty() && v.size() > capacity - offset)  // a bound from the footers that did not hold
        why = str(v.size(), " bytes, more than the in-slot has left (sized from the footers: a row group whose values ",
                  "repeat through a dictionary decodes to more than its footer says)");
      if (!why.empty()) {
        s.error = str(where(g, i - G.first_row), ": ", why);
        continue;
      }
      s.error.clear();
      std::memcpy(dst + offset, v.data(), v.size());
      s.size = v.size();
      offset += v.size();
    }
  }
}

void ParquetSource::read(int64_t first, int64_t count, void* dst) {
  SLUICE_CHECK(kind_ == Kind::Array && first >= 0 && count >= 0 && first + count <= n_, describe(), ": samples [", first,
               ", ", first + count, ")");
  const std::size_t sb = sample_bytes();
  const int64_t numel = shape_numel(layout_.shape);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = first; i < first + count;) {
    const int g = group_of(i);
    const Group& G = groups_[static_cast<std::size_t>(g)];
    const auto d = group(g, true);
    for (const int64_t end = std::min(first + count, G.first_row + G.rows); i < end; ++i) {
      uint8_t* row = out + static_cast<std::size_t>(i - first) * sb;
      std::string why = d->error;
      if (why.empty()) {
        const auto [c, at] = d->values.at(i - G.first_row);
        const arrow::Array* a = c->path.back().get();
        int64_t idx = at;
        if (Column::null(*c, at)) why = str("its array (column ", in_quotes(value_name_), ") is null");
        for (int l = 0; why.empty() && l < layout_.levels; ++l) {
          const auto& fl = static_cast<const arrow::FixedSizeListArray&>(*a);
          if (l > 0 && fl.IsNull(idx)) why = "a null inner list";
          idx = fl.value_offset(idx);
          a = fl.values().get();
        }
        if (why.empty() && a->null_count() > 0)
          for (int64_t k = 0; k < numel && why.empty(); ++k)
            if (a->IsNull(idx + k)) why = "null elements";
        if (why.empty()) {
          const uint8_t* src = layout_.dtype == DType::F32
                                   ? reinterpret_cast<const uint8_t*>(static_cast<const arrow::FloatArray&>(*a).raw_values() + idx)
                                   : static_cast<const arrow::UInt8Array&>(*a).raw_values() + idx;
          std::memcpy(row, src, sb);
          continue;
        }
      }
      if (layout_.dtype == DType::F32) std::fill_n(reinterpret_cast<float*>(row), numel, std::nanf(""));
      else std::memset(row, 0, sb);
      if (!warned_.exchange(true))
        log_warn(where(g, i - G.first_row), ": ", why, "; an array row that cannot be read is fed as ",
                 layout_.dtype == DType::F32 ? "NaN (marked non-finite in /sample_status)" : "zeros",
                 " (this warning is shown once)");
    }
  }
}

std::string ParquetSource::key(int64_t i) const {
  if (key_path_.empty()) return std::to_string(i);
  const int g = group_of(i);
  const auto d = group(g, false);
  std::string k;
  const std::string why = key_of(*d, i - groups_[static_cast<std::size_t>(g)].first_row, &k);
  return why.empty() ? k : std::to_string(i);
}

std::string ParquetSource::fingerprint() const {
  Fnv64 list, mtimes;
  for (const File& f : files_) {
    list.text(f.name);
    list.u64(static_cast<uint64_t>(f.size));
    mtimes.u64(static_cast<uint64_t>(f.mtime_ns));
  }
  for (const Group& g : groups_) {
    list.u64(static_cast<uint64_t>(g.rows));
    list.u64(g.identity);
  }
  std::string where = input_;
  if (local_) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(input_, ec);
    if (!ec) where = abs.lexically_normal().string();
  }
  return str("parquet ", where, " samples=", n_, " column=", value_name_, " as=", kind_name(kind_), " key_field=",
             key_field_, " max_record=", kind_ == Kind::Text ? text_.max_record_bytes : 0, " files=", files_.size(),
             " list=", list.hex(), " mtimes=", mtimes.hex());
}

}  // namespace

std::unique_ptr<Source> open_parquet_source(const std::string& path, const std::string& image_field, const TextOptions& text,
                                            int64_t limit) {
  if (text.max_record_bytes < 1 || text.max_record_bytes > kMaxMaxRecordBytes)
    throw UsageError(str("--max-record-bytes ", text.max_record_bytes, ": not in [1, ", kMaxMaxRecordBytes, "]"));
  auto src = std::make_unique<ParquetSource>(path, image_field, text);
  src->open(limit);
  return src;
}

}  // namespace sluice

#endif  // SLUICE_HAVE_PARQUET
