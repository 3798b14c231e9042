// Text corpora as an encoded source: JSONL, CSV, TSV or plain text, one file, one passage a record;
// each sample's bytes are its passage's UTF-8 bytes (as an image source's are a file's bytes), for
// a text decoder (the tokenizer) to turn into the model's inputs.
//
// Opening makes one pass over the file: it finds every record's boundaries (a quote-aware scan for
// CSV and TSV, where a quoted field may hold newlines), counts the records, and keeps a sparse
// index (the byte offset and line of every kIndexEvery-th record) and the sizes of the kLargest
// largest records (which bound max_encoded_bytes).  State is O(records / kIndexEvery), never a
// vector per record: 1e8 records cost some 1.6 MB of index.  read_encoded(first, count) starts at
// the nearest indexed record (or where a read of the records just before ended: readers take
// consecutive batches) and scans forward.
//
// A record that cannot give a passage is a bad sample with its reason (EncodedSample::error), never
// an error of the job: ill-formed UTF-8, a JSONL line that is not a JSON object or lacks the field
// or holds no string there, a CSV record with another number of fields than the header, a record
// longer than --max-record-bytes (never held in memory: the scan passes it).  Blank lines (nothing
// but spaces and tabs) are no records in any format.  The key of a sample is --key-field's value
// (a JSON string or number, a CSV column), else the record's index (0-based).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/file_identity.h"
#include "io/source.h"
#include "io/source_util.h"

namespace sluice {

namespace {

constexpr int64_t kIndexEvery = 1024;          // records between two entries of the sparse index
constexpr std::size_t kLargest = 1024;         // the largest record sizes kept (max_encoded_bytes)
constexpr std::size_t kMaxKeyBytes = 256;      // a --key-field value longer than this is a bad sample
constexpr std::size_t kReadBlock = 1 << 20;    // bytes a scan reads at a time, at most
constexpr std::size_t kFirstBlock = 64 << 10;  // its first read (a batch's records are often fewer bytes)
constexpr uint64_t kHashedBytes = 64 << 10;    // fingerprint: bytes hashed at the start, middle and end
constexpr std::size_t kMaxReason = 240;        // a bad sample's reason is cut to about this many bytes
constexpr std::size_t kCachedRanges = 64;      // reads whose keys and end positions are remembered

enum class Format { Jsonl, Csv, Tsv, Lines };

const char* format_name(Format f) {
  return f == Format::Jsonl ? "jsonl" : f == Format::Csv ? "csv" : f == Format::Tsv ? "tsv" : "text";
}

bool blank_byte(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// The offset of the first ill-formed UTF-8 sequence in [p, p + n), or -1 when it is well formed
// (shortest forms only, no surrogates, at most U+10FFFF).
int64_t utf8_error(const char* p, std::size_t n) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;  // no surrogates
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return static_cast<int64_t>(i);
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return static_cast<int64_t>(i);
    for (std::size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

// `s` cut to about kMaxReason bytes on a character boundary, "..." marking the cut.
std::string clip(std::string s) {
  if (s.size() <= kMaxReason) return s;
  std::size_t at = kMaxReason;
  while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  s.resize(at);
  return s + "...";
}

// Printable text of a JSON key or column name in a message.
std::string quoted(const std::string& name) { return "'" + clip(name) + "'"; }

// ---- finding records ------------------------------------------------------------------------

// One record as the scan found it.
struct Record {
  uint64_t offset = 0;         // its first byte in the file
  uint64_t length = 0;         // its bytes, without the line end (\n, and a \r before it)
  int64_t line = 0;            // the line it starts on, from 1
  bool blank = true;           // nothing but spaces and tabs: not a record
  bool open_quote = false;     // CSV/TSV: the file ended inside a quoted field
  const char* data = nullptr;  // its bytes, when length <= the scan's `keep`; else nullptr (too long)
};

// Reads a file forward from an offset in blocks and cuts it into records.  A record of up to
// `keep` bytes is handed over whole in memory; a longer one is measured and passed, never held.
class Scanner {
 public:
  Scanner(int fd, uint64_t end, Format format, uint64_t keep, std::vector<char>& buf)
      : fd_(fd), end_(end), format_(format), delim_(format == Format::Tsv ? '\t' : ','), keep_(keep), buf_(buf) {
    const std::size_t cap = static_cast<std::size_t>(keep_) + 2 + kReadBlock;
    if (buf_.size() < cap) buf_.resize(cap);
  }

  void seek(uint64_t offset, int64_t line) {
    pos_ = base_ = offset;
    len_ = 0;
    block_ = kFirstBlock;
    line_ = line;
  }
  uint64_t position() const { return pos_; }
  int64_t line() const { return line_; }

  // The next record, blank ones included; false at the end of the file.  Throws InputError when
  // the file cannot be read (it shrank).
  bool next(Record& r) {
    if (pos_ >= end_) return false;
    r = Record{};
    r.offset = pos_;
    r.line = line_;
    keeping_ = true;
    csv_ = Csv::Start;
    last_ = 0;
    bool found = false;
    while (!found) {
      if (pos_ == base_ + len_) {
        if (pos_ >= end_) break;  // the last record has no line end
        refill(r.offset);
      }
      const char* begin = buf_.data() + (pos_ - base_);
      const char* stop = buf_.data() + len_;
      const char* at = find_end(begin, stop, &r);
      if (r.blank)
        for (const char* c = begin; c < at && r.blank; ++c) r.blank = blank_byte(*c);
      if (at > begin) last_ = at[-1];
      pos_ += static_cast<uint64_t>(at - begin);
      if (at < stop) found = true;  // at the '\n'
    }
    uint64_t length = pos_ - r.offset;
    if (found) ++pos_;  // past the '\n'
    ++line_;
    if (length > 0 && last_ == '\r') --length;
    r.length = length;
    r.open_quote = csv_ == Csv::Quoted;
    if (keeping_ && length <= keep_) r.data = buf_.data() + (r.offset - base_);
    return true;
  }

 private:
  // Where the record ends in [p, stop): the '\n' that ends it, or stop.
  const char* find_end(const char* p, const char* stop, Record* r) {
    if (format_ == Format::Jsonl || format_ == Format::Lines) {
      const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(stop - p));
      return nl ? static_cast<const char*>(nl) : stop;
    }
    // CSV/TSV (RFC 4180): a field that starts with '"' is quoted up to a '"' not doubled; line ends
    // inside it are part of the record.
    for (; p < stop; ++p) {
      const char c = *p;
      switch (csv_) {
        case Csv::Start:
          if (c == '\n') return p;
          csv_ = c == '"' ? Csv::Quoted : c == delim_ ? Csv::Start : Csv::Unquoted;
          break;
        case Csv::Unquoted:
          if (c == '\n') return p;
          if (c == delim_) csv_ = Csv::Start;
          break;
        case Csv::Quoted: {  // up to the next quote at once, counting the line ends passed
          const char* q = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(stop - p)));
          const char* upto = q ? q : stop;
          line_ += std::count(p, upto, '\n');
          if (!q) return stop;
          p = q;
          csv_ = Csv::QuoteInQuoted;
          break;
        }
        case Csv::QuoteInQuoted:  // a '"' ends the field, or is the first of a doubled one
          if (c == '\n') return p;
          csv_ = c == '"' ? Csv::Quoted : c == delim_ ? Csv::Start : Csv::Unquoted;  // text after it: malformed
          break;
      }
    }
    return stop;
  }

  // More bytes from pos_ on.  The record being cut (from `record`) stays in the buffer while it is
  // within `keep`; past that its bytes are dropped as they are scanned.
  void refill(uint64_t record) {
    if (keeping_ && pos_ - record > keep_ + 1) keeping_ = false;
    const uint64_t from = keeping_ ? record : pos_;
    const std::size_t kept = static_cast<std::size_t>(base_ + len_ - from);
    if (kept > 0 && from != base_) std::memmove(buf_.data(), buf_.data() + (from - base_), kept);
    base_ = from;
    len_ = kept;
    // Reads grow from kFirstBlock to kReadBlock: a read of a few records does not pay for a megabyte.
    const std::size_t room = std::min(buf_.size() - len_, block_);
    block_ = std::min(block_ * 2, kReadBlock);
    const std::size_t want = static_cast<std::size_t>(std::min<uint64_t>(room, end_ - (base_ + len_)));
    const std::string e = pread_exact(fd_, reinterpret_cast<uint8_t*>(buf_.data() + len_), want, base_ + len_);
    if (!e.empty()) throw InputError(str("text input: ", e));
    len_ += want;
  }

  int fd_;
  uint64_t end_;
  Format format_;
  char delim_;
  uint64_t keep_;
  std::vector<char>& buf_;
  uint64_t base_ = 0;  // file offset of buf_[0]
  std::size_t len_ = 0;
  std::size_t block_ = kFirstBlock;  // the next read's size
  uint64_t pos_ = 0;
  int64_t line_ = 1;
  enum class Csv { Start, Unquoted, Quoted, QuoteInQuoted } csv_ = Csv::Start;
  bool keeping_ = true;
  char last_ = 0;
};

// Each reader thread's scan buffer, kept between reads (the steady state allocates nothing).
std::vector<char>& scan_buffer() {
  thread_local std::vector<char> buf;
  return buf;
}

// ---- one record's passage and key ----------------------------------------------------------

// What a record gives: its passage (or why not) and its key ("" : the index).
struct Parsed {
  std::string error;
  std::string key;
};

// The top-level fields of a JSON object that a record needs, from nlohmann's SAX events (no
// document is built: a deeply nested value costs no recursion).
class FieldSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  FieldSax(const std::string& field, const std::string& key_field) : field_(field), key_field_(key_field) {}

  bool null() override { return scalar("null", nullptr); }
  bool boolean(bool) override { return scalar("a boolean", nullptr); }
  bool number_integer(number_integer_t v) override { return number(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(std::to_string(v)); }
  bool number_float(number_float_t, const string_t& s) override { return number(s); }
  bool string(string_t& s) override { return scalar("a string", &s); }
  bool binary(binary_t&) override { return scalar("binary", nullptr); }
  bool start_object(std::size_t) override { return open("an object", true); }
  bool start_array(std::size_t) override { return open("an array", false); }
  bool end_object() override { return --depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ == 1) current_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    const std::size_t b = error_.find("] ");
    if (b != std::string::npos) error_.erase(0, b + 2);
    return false;
  }

  std::string error_;
  const char* top_ = nullptr;    // what the top-level value is
  const char* text_kind_ = nullptr;
  std::string text_;             // the field's string
  const char* key_kind_ = nullptr;
  std::string key_;              // the key field's string or number text
  bool key_ok_ = false;

 private:
  bool open(const char* what, bool object) {
    if (depth_ == 0) top_ = what;
    else if (depth_ == 1) scalar(what, nullptr);
    ++depth_;
    return true;
  }
  bool number(const std::string& text) {
    if (depth_ == 1 && !key_field_.empty() && current_ == key_field_) {
      key_kind_ = "a number";
      key_ = text;
      key_ok_ = true;
    }
    return scalar("a number", nullptr, true);
  }
  bool scalar(const char* what, string_t* s, bool key_done = false) {
    if (depth_ == 0) {
      top_ = what;
      return true;
    }
    if (depth_ != 1) return true;
    if (!key_done && !key_field_.empty() && current_ == key_field_) {
      key_kind_ = what;
      key_ok_ = s != nullptr;
      if (s) key_ = *s;
    }
    if (current_ == field_) {
      text_kind_ = what;
      if (s) text_ = std::move(*s);
    }
    return true;
  }

  const std::string& field_;
  const std::string& key_field_;
  std::string current_;
  int depth_ = 0;
};

// An upper bound of the length of the top-level field `name`'s value in the JSON object [p, end)
// (its bytes as written: escapes only shrink a string, and a number's text is as written or
// shorter), 0 when the object has no such field; -1 when the text is not the simple shape this
// scan follows (the caller then parses it properly).  For the open pass: only the keys' width is
// needed there, and a full parse of every record costs 20 times the scan.
int64_t json_field_width(const char* p, const char* end, const std::string& name) {
  auto ws = [&] {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
  };
  auto string_end = [&](const char* q) -> const char* {  // q at the opening quote
    for (++q; q < end; ++q) {
      if (*q == '\\') ++q;
      else if (*q == '"') return q + 1;
    }
    return nullptr;
  };
  ws();
  if (p == end || *p != '{') return -1;
  ++p;
  int64_t width = 0;
  for (;;) {
    ws();
    if (p < end && *p == '}') return width;
    if (p == end || *p != '"') return -1;
    const char* k_end = string_end(p);
    if (!k_end) return -1;
    const bool match = static_cast<std::size_t>(k_end - p - 2) == name.size() &&
                       std::memcmp(p + 1, name.data(), name.size()) == 0;
    const bool escaped = std::memchr(p + 1, '\\', static_cast<std::size_t>(k_end - p - 2)) != nullptr;
    if (escaped) return -1;  // an escaped key might spell `name`
    p = k_end;
    ws();
    if (p == end || *p != ':') return -1;
    ++p;
    ws();
    if (p == end) return -1;
    const char* v = p;
    if (*p == '"') {
      p = string_end(p);
      if (!p) return -1;
      if (match) width = std::max<int64_t>(width, p - v - 2);
    } else if (*p == '{' || *p == '[') {
      int depth = 0;
      while (p < end) {
        if (*p == '"') {
          p = string_end(p);
          if (!p) return -1;
          continue;
        }
        if (*p == '{' || *p == '[') ++depth;
        else if ((*p == '}' || *p == ']') && --depth == 0) {
          ++p;
          break;
        }
        ++p;
      }
      if (depth != 0) return -1;
    } else {
      while (p < end && *p != ',' && *p != '}' && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') ++p;
      if (match) width = std::max<int64_t>(width, p - v);
    }
    ws();
    if (p < end && *p == ',') {
      ++p;
      continue;
    }
    if (p < end && *p == '}') return width;
    return -1;
  }
}

int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// The value of the 4 hex digits at p, or -1.
int hex4_at(const char* p, const char* end) {
  if (end - p < 4) return -1;
  int v = 0;
  for (int k = 0; k < 4; ++k) {
    const int d = hex_digit(p[k]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Whether the JSON text [p, end) escapes a lone surrogate (\uD800-\uDFFF not in a high-low pair),
// which nlohmann refuses.  With `out` (a copy of the text), each such escape there becomes \uFFFD
// (the same length), as text/passages.h reads them: a scraped corpus's broken emoji costs a
// character, not the record.
bool lone_surrogates(const char* p, const char* end, char* out = nullptr) {
  bool any = false;
  const char* q = p;
  while ((q = static_cast<const char*>(std::memchr(q, '\\', static_cast<std::size_t>(end - q)))) && q + 1 < end) {
    if (q[1] != 'u') {
      q += 2;  // \\, \" and the others: the byte after is no escape's start
      continue;
    }
    const int v = hex4_at(q + 2, end);
    if (v < 0xD800 || v > 0xDFFF) {
      q += 2;
      continue;
    }
    if (v <= 0xDBFF && end - q >= 12 && q[6] == '\\' && q[7] == 'u') {
      const int w = hex4_at(q + 8, end);
      if (w >= 0xDC00 && w <= 0xDFFF) {
        q += 12;  // a pair
        continue;
      }
    }
    any = true;
    if (out) std::memcpy(out + (q - p) + 2, "FFFD", 4);
    q += 6;
  }
  return any;
}

// A CSV/TSV record's fields, unquoted; "" or why it is malformed.
std::string split_fields(const char* p, std::size_t n, char delim, std::vector<std::string>& fields) {
  fields.clear();
  const char* end = p + n;
  for (;;) {
    fields.emplace_back();
    std::string& f = fields.back();
    if (p < end && *p == '"') {
      // A quoted field: up to the '"' that is not doubled.
      ++p;
      for (;;) {
        const char* q = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
        if (!q) return str("field ", fields.size(), ": a quoted field without its closing quote");
        f.append(p, static_cast<std::size_t>(q - p));
        p = q + 1;
        if (p < end && *p == '"') {
          f += '"';
          ++p;
          continue;
        }
        break;
      }
      if (p < end && *p != delim)
        return str("field ", fields.size(), ": text after its closing quote (a quote inside a quoted field is "
                   "written twice: \"\")");
    } else {
      const char* d = static_cast<const char*>(std::memchr(p, delim, static_cast<std::size_t>(end - p)));
      const char* upto = d ? d : end;
      f.append(p, static_cast<std::size_t>(upto - p));
      p = upto;
    }
    if (p >= end) return "";
    ++p;  // the delimiter: another field follows, perhaps empty
  }
}

// ---- the source -------------------------------------------------------------------------------

class TextSource final : public Source {
 public:
  TextSource(std::string path, Format format, std::string field, std::string key_field, uint64_t max_record)
      : path_(std::move(path)), format_(format), field_(std::move(field)), key_field_(std::move(key_field)),
        max_record_(max_record) {}
  ~TextSource() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void open(int64_t limit);

  std::string describe() const override {
    const bool csv = format_ == Format::Csv || format_ == Format::Tsv;
    std::string s = str(format_name(format_), " ", path_, ": ", n_, " record", n_ == 1 ? "" : "s");
    if (limit_hit_) s += " (the first ones: --samples)";
    if (format_ == Format::Jsonl) s += str(", the text in field ", quoted(field_));
    if (csv) s += str(", the text in column ", quoted(field_), " of ", columns_.size());
    if (format_ == Format::Lines) s += ", one passage a line";
    s += key_field_.empty() ? ", keys: the record index" : str(", keys from ", csv ? "column " : "field ", quoted(key_field_));
    if (oversize_ > 0)
      s += str(" (", oversize_, " record", oversize_ == 1 ? "" : "s", " over --max-record-bytes ", max_record_,
               ": bad samples, not read)");
    return s;
  }

  int64_t size() const override { return n_; }
  const Shape& sample_shape() const override { return no_shape_; }
  DType dtype() const override { return DType::U8; }
  void read(int64_t, int64_t, void*) override {
    SLUICE_THROW(describe(), " holds text records: read them with read_encoded()");
  }
  bool encoded() const override { return true; }
  bool text() const override { return true; }

  // The `count` largest records together (the kLargest largest kept; beyond them each further one
  // counts as the smallest of those): no `count` passages take more.
  std::size_t max_encoded_bytes(int64_t count) const override {
    const std::size_t c = static_cast<std::size_t>(std::clamp<int64_t>(count, 0, n_));
    const std::size_t k = std::min(c, largest_sum_.size() - 1);
    uint64_t total = largest_sum_[k];
    if (c > k && !largest_.empty()) total += (c - k) * largest_.back();
    return static_cast<std::size_t>(total);
  }

  void read_encoded(int64_t first, int64_t count, uint8_t* dst, std::size_t capacity, EncodedSample* out) override {
    SLUICE_CHECK(first >= 0 && count >= 0 && first + count <= n_, describe(), ": samples [", first, ", ", first + count,
                 ") outside [0, ", n_, ")");
    if (count == 0) return;
    std::vector<std::string> keys;
    if (!key_field_.empty()) keys.resize(static_cast<std::size_t>(count));
    std::size_t offset = 0;
    Scanner sc(fd_, file_size_, format_, max_record_, scan_buffer());
    int64_t index = start_at(first, sc);
    Record r;
    std::vector<std::string> fields;
    while (index < first + count) {
      if (!sc.next(r))
        throw InputError(str("input ", path_, ": ends before record ", index, " (it had ", n_, " records when opened)"),
                         "the file changed during the run; restore it, then rerun with --resume");
      if (r.blank) continue;
      if (index >= first) {
        EncodedSample& s = out[index - first];
        s.offset = offset;
        s.size = 0;
        s.error.clear();
        std::string text;
        Parsed p = parse(r, fields, &text);
        if (p.error.empty() && offset + text.size() > capacity)
          SLUICE_THROW(describe(), ": samples [", first, ", ", first + count, ") take more than the area's ", capacity,
                       " bytes");
        if (p.error.empty()) {
          std::memcpy(dst + offset, text.data(), text.size());
          s.size = text.size();
          offset += text.size();
        } else {
          s.error = str("line ", r.line, ": ", p.error);
        }
        if (!keys.empty()) keys[static_cast<std::size_t>(index - first)] = std::move(p.key);
      }
      ++index;
    }
    check_unchanged(path_, identity_);
    remember(first, count, std::move(keys), sc.position(), sc.line());
  }

  // The key of sample i: the index, or --key-field's value (from the reads just made, else read).
  std::string key(int64_t i) const override {
    if (key_field_.empty()) return std::to_string(i);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      for (const Cached& c : cache_)
        if (i >= c.first && i < c.first + static_cast<int64_t>(c.keys.size())) {
          const std::string& k = c.keys[static_cast<std::size_t>(i - c.first)];
          return k.empty() ? std::to_string(i) : k;
        }
    }
    Scanner sc(fd_, file_size_, format_, max_record_, scan_buffer());
    int64_t index = start_at(i, sc);
    Record r;
    std::vector<std::string> fields;
    while (sc.next(r)) {
      if (r.blank) continue;
      if (index++ < i) continue;
      const Parsed p = parse(r, fields, nullptr);
      return p.key.empty() ? std::to_string(i) : p.key;
    }
    return std::to_string(i);
  }
  std::size_t key_bytes() const override { return key_bytes_; }

  // Format, path, options, records, the file's size and modification time, a hash of the sparse
  // index and the largest sizes, and a hash of 64 KiB at its start, middle and end.
  std::string fingerprint() const override {
    Fnv64 index, bytes;
    for (std::size_t k = 0; k < index_offset_.size(); ++k) {
      index.u64(index_offset_[k]);
      index.u64(static_cast<uint64_t>(index_line_[k]));
    }
    for (uint64_t s : largest_) index.u64(s);
    std::vector<uint8_t> buf(static_cast<std::size_t>(std::min(kHashedBytes, file_size_)));
    const uint64_t mid = file_size_ / 2 > buf.size() / 2 ? file_size_ / 2 - buf.size() / 2 : 0;
    for (uint64_t at : {uint64_t{0}, mid, file_size_ - buf.size()}) {
      const std::string e = pread_exact(fd_, buf.data(), buf.size(), at);
      if (e.empty()) bytes.bytes(buf.data(), buf.size());
      else bytes.text(e);
    }
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(path_, ec);
    return str(format_name(format_), " ", ec ? path_ : abs.lexically_normal().string(), " samples=", n_,
               " field=", field_, " key_field=", key_field_, " max_record=", max_record_, " size=", file_size_,
               " mtime=", identity_.mtime_ns, " index=", index.hex(), " bytes=", bytes.hex());
  }

 private:
  struct Cached {
    int64_t first = 0;
    std::vector<std::string> keys;  // "" : the index
    int64_t end_record = 0;         // the record after the read, and where it starts
    uint64_t end_offset = 0;
    int64_t end_line = 0;
  };

  // Seeks `sc` to the nearest known record at or before `i` (an index entry, or where a read ended)
  // and returns that record's index.
  int64_t start_at(int64_t i, Scanner& sc) const {
    const std::size_t k = static_cast<std::size_t>(i / kIndexEvery);
    int64_t record = static_cast<int64_t>(k) * kIndexEvery;
    uint64_t offset = index_offset_[k];
    int64_t line = index_line_[k];
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      for (const Cached& c : cache_)
        if (c.end_record <= i && c.end_record > record) {
          record = c.end_record;
          offset = c.end_offset;
          line = c.end_line;
        }
    }
    sc.seek(offset, line);
    return record;
  }

  void remember(int64_t first, int64_t count, std::vector<std::string> keys, uint64_t end_offset, int64_t end_line) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCachedRanges) cache_.pop_front();
    cache_.push_back(Cached{first, std::move(keys), first + count, end_offset, end_line});
  }

  // Record r's passage (into *text, when given) and key, or why it has none.
  Parsed parse(const Record& r, std::vector<std::string>& fields, std::string* text) const {
    Parsed p;
    if (!r.data) {
      p.error = str(r.length, " bytes, more than --max-record-bytes ", max_record_, "; not read");
      return p;
    }
    if (r.open_quote) {
      p.error = "a quoted field without its closing quote: it runs to the end of the file";
      return p;
    }
    const int64_t bad = utf8_error(r.data, static_cast<std::size_t>(r.length));
    if (bad >= 0) {
      p.error = str("not valid UTF-8 (at byte ", bad, " of the record)");
      return p;
    }
    if (format_ == Format::Lines) {
      if (text) text->assign(r.data, static_cast<std::size_t>(r.length));
      return p;
    }
    std::string key;
    bool has_key = false;
    if (format_ == Format::Jsonl) {
      FieldSax sax(field_, key_field_);
      const char* json = r.data;
      std::string fixed;
      if (lone_surrogates(r.data, r.data + r.length)) {
        fixed.assign(r.data, static_cast<std::size_t>(r.length));
        lone_surrogates(r.data, r.data + r.length, fixed.data());
        json = fixed.data();
      }
      const bool ok = nlohmann::json::sax_parse(json, json + r.length, &sax);
      if (!ok) {
        p.error = clip(str("not JSON: ", sax.error_));
        return p;
      }
      if (!sax.top_ || std::strcmp(sax.top_, "an object") != 0) {
        p.error = str("not a JSON object (", sax.top_ ? sax.top_ : "nothing", ")");
        return p;
      }
      if (!key_field_.empty()) {
        if (!sax.key_kind_) p.error = str("no field ", quoted(key_field_), " (--key-field)");
        else if (!sax.key_ok_) p.error = str("field ", quoted(key_field_), " (--key-field) is ", sax.key_kind_,
                                             ", not a string or number");
        if (!p.error.empty()) return p;
        key = std::move(sax.key_);
        has_key = true;
      }
      if (!sax.text_kind_) p.error = str("no field ", quoted(field_), " (--text-field)");
      else if (std::strcmp(sax.text_kind_, "a string") != 0)
        p.error = str("field ", quoted(field_), " (--text-field) is ", sax.text_kind_, ", not a string");
      if (!p.error.empty()) return p;
      if (text) *text = std::move(sax.text_);
    } else {
      const std::string e =
          split_fields(r.data, static_cast<std::size_t>(r.length), format_ == Format::Tsv ? '\t' : ',', fields);
      if (!e.empty()) {
        p.error = e;
        return p;
      }
      if (fields.size() != columns_.size()) {
        p.error = str(fields.size(), " field", fields.size() == 1 ? "" : "s", ", the header has ", columns_.size());
        return p;
      }
      if (key_column_ >= 0) {
        key = std::move(fields[static_cast<std::size_t>(key_column_)]);
        has_key = true;
      }
      if (text) *text = std::move(fields[static_cast<std::size_t>(text_column_)]);
    }
    if (has_key) {
      if (key.empty()) p.error = "its key (--key-field) is empty";
      else if (key.size() > kMaxKeyBytes)
        p.error = str("its key (--key-field) has ", key.size(), " bytes, more than ", kMaxKeyBytes);
      else if (key.find('\0') != std::string::npos) p.error = "its key (--key-field) holds a NUL character";
      if (!p.error.empty()) {
        if (text) text->clear();
        return p;
      }
      p.key = std::move(key);
    }
    return p;
  }

  void read_header(Scanner& sc);

  std::string path_;
  Format format_;
  std::string field_, key_field_;
  uint64_t max_record_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  FileIdentity identity_;
  int64_t n_ = 0;
  bool limit_hit_ = false;
  int64_t oversize_ = 0;
  std::vector<uint64_t> index_offset_;  // [k]: where record k * kIndexEvery starts
  std::vector<int64_t> index_line_;     // [k]: its line, from 1
  std::vector<uint64_t> largest_;       // the largest record sizes, largest first
  std::vector<uint64_t> largest_sum_;   // [k]: the sum of the k largest
  std::vector<std::string> columns_;    // CSV/TSV: the header
  int text_column_ = -1, key_column_ = -1;
  std::size_t key_bytes_ = 1;
  Shape no_shape_;
  mutable std::mutex cache_mutex_;
  mutable std::deque<Cached> cache_;
};

void TextSource::read_header(Scanner& sc) {
  const std::string where = str("input ", path_);
  Record r;
  bool any = false;
  while ((any = sc.next(r)) && r.blank) {
  }
  if (!any) throw InputError(str(where, ": empty (no header line)"));
  if (!r.data)
    throw InputError(str(where, ": its header line has ", r.length, " bytes, more than --max-record-bytes ", max_record_));
  if (r.open_quote) throw InputError(str(where, ": its header has a quoted field without its closing quote"));
  if (utf8_error(r.data, static_cast<std::size_t>(r.length)) >= 0)
    throw InputError(str(where, ": its header line is not valid UTF-8"));
  const std::string e =
      split_fields(r.data, static_cast<std::size_t>(r.length), format_ == Format::Tsv ? '\t' : ',', columns_);
  if (!e.empty()) throw InputError(str(where, ": its header line: ", e));
  auto find = [&](const std::string& name, const char* option) {
    int at = -1;
    for (std::size_t c = 0; c < columns_.size(); ++c)
      if (columns_[c] == name) {
        if (at >= 0) throw InputError(str(where, ": its header names the column ", quoted(name), " twice"));
        at = static_cast<int>(c);
      }
    if (at < 0) {
      std::string names;
      for (std::size_t c = 0; c < columns_.size() && c < 20; ++c) names += str(c ? ", " : "", quoted(columns_[c]));
      if (columns_.size() > 20) names += ", ...";
      throw InputError(str(where, ": no column ", quoted(name), " (", option, ") in its header line: ", names),
                       str("the first line of a ", format_name(format_), " input names its columns; ", option,
                           " names the one to read"));
    }
    return at;
  };
  text_column_ = find(field_, "--text-field");
  if (!key_field_.empty()) key_column_ = find(key_field_, "--key-field");
}

void TextSource::open(int64_t limit) {
  const std::string where = str("input ", path_);
  std::string why;
  fd_ = open_regular(path_, &file_size_, &why);
  if (fd_ < 0)
    throw InputError(str(where, ": ", why == std::strerror(ENOENT) ? "no such file" : why),
                     why == std::strerror(ENOENT) ? kPathsHint : "a text input is one regular file");
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    identity_.device = static_cast<uint64_t>(st.st_dev);
    identity_.inode = static_cast<uint64_t>(st.st_ino);
    identity_.size = static_cast<int64_t>(st.st_size);
    identity_.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  unsigned char head[4096];
  const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(sizeof head, file_size_));
  const std::string e = pread_exact(fd_, head, n, 0);
  if (!e.empty()) throw InputError(str(where, ": ", e));
  if (const char* c = compression_magic(head, n)) {
    const std::string tool = std::string(c) == "gzip" ? "gunzip -k" : std::string(c) == "zstd" ? "zstd -d"
                             : std::string(c) == "xz" ? "unxz -k" : "bunzip2 -k";
    throw InputError(str(where, ": ", c, "-compressed: sluice reads uncompressed ", format_name(format_),
                         " text; decompress it first (", tool, " ", path_, ")"),
                     "a compressed corpus cannot be split into byte ranges by record; decompress it once, to local disk");
  }
  if (n >= 2 && ((head[0] == 0xFF && head[1] == 0xFE) || (head[0] == 0xFE && head[1] == 0xFF)))
    throw InputError(str(where, ": UTF-16 text (its byte-order mark); sluice reads UTF-8: iconv -f UTF-16 -t UTF-8"));
  if (std::memchr(head, 0, n))
    throw InputError(str(where, ": not a text file (NUL bytes in its first ", n, " bytes)"),
                     "--input-kind jsonl, csv, tsv and text read UTF-8 text files");
  const uint64_t start = n >= 3 && std::memcmp(head, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;  // a byte-order mark

  Scanner sc(fd_, file_size_, format_, max_record_, scan_buffer());
  sc.seek(start, 1);
  if (format_ == Format::Csv || format_ == Format::Tsv) read_header(sc);
  // The first records found; the keys are needed at open only for their width.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> top;  // the kLargest largest sizes
  std::size_t widest_key = 0;
  std::vector<std::string> fields;
  Record r;
  for (;;) {
    if (limit > 0 && n_ >= limit) {
      limit_hit_ = true;
      break;
    }
    const uint64_t at = sc.position();
    const int64_t line = sc.line();
    if (!sc.next(r)) break;
    if (r.blank) continue;
    if (n_ % kIndexEvery == 0) {
      index_offset_.push_back(at);
      index_line_.push_back(line);
    }
    ++n_;
    if (!r.data) {
      ++oversize_;
      continue;
    }
    if (top.size() < kLargest) top.push(r.length);
    else if (r.length > top.top()) {
      top.pop();
      top.push(r.length);
    }
    if (!key_field_.empty()) {
      const int64_t w = format_ == Format::Jsonl ? json_field_width(r.data, r.data + r.length, key_field_) : -1;
      widest_key = std::max(widest_key, w >= 0 ? std::min<std::size_t>(static_cast<std::size_t>(w), kMaxKeyBytes)
                                               : parse(r, fields, nullptr).key.size());
    }
  }
  if (limit_hit_) {  // --samples cut it short: was there another record?
    limit_hit_ = false;
    while (sc.next(r))
      if (!r.blank) {
        limit_hit_ = true;
        break;
      }
  }
  if (n_ == 0)
    throw InputError(str(where, ": no records (", format_ == Format::Csv || format_ == Format::Tsv ? "a header line only"
                                                                                                 : "no line holds text",
                         ")"));
  while (!top.empty()) {
    largest_.push_back(top.top());
    top.pop();
  }
  std::reverse(largest_.begin(), largest_.end());
  largest_sum_.assign(largest_.size() + 1, 0);
  for (std::size_t k = 0; k < largest_.size(); ++k) largest_sum_[k + 1] = largest_sum_[k] + largest_[k];
  key_bytes_ = std::max(widest_key, std::to_string(n_ - 1).size());
}

}  // namespace

std::unique_ptr<Source> open_text_source(const std::string& path, const std::string& format, const TextOptions& options,
                                         int64_t limit) {
  Format f = Format::Lines;
  if (format == "jsonl") f = Format::Jsonl;
  else if (format == "csv") f = Format::Csv;
  else if (format == "tsv") f = Format::Tsv;
  else if (format != "text") SLUICE_THROW("text input format '", format, "': not jsonl, csv, tsv or text");
  if (options.max_record_bytes < 1 || options.max_record_bytes > kMaxMaxRecordBytes)
    throw UsageError(str("--max-record-bytes ", options.max_record_bytes, ": not in [1, ", kMaxMaxRecordBytes, "]"));
  if (options.field.empty() && f != Format::Lines) throw UsageError("--text-field: empty; name the field holding the text");
  if (!options.key_field.empty() && f == Format::Lines)
    throw UsageError(str("--key-field ", options.key_field, ": a plain text input (one passage a line) has no fields; ",
                         "its keys are the line indices"));
  // A plain text input has no fields: --text-field is not part of its identity.
  auto src = std::make_unique<TextSource>(path, f, f == Format::Lines ? std::string() : options.field, options.key_field,
                                          options.max_record_bytes);
  src->open(limit);
  return src;
}

}  // namespace sluice
