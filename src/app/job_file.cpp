// The job-file reader (app/job_file.h): one pass over the characters, tracking line and column.
#include "app/job_file.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace sluice {

namespace {

constexpr std::uintmax_t kMaxJobFileBytes = 1 << 20;

bool is_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_oct(char c) { return c >= '0' && c <= '7'; }
bool is_bin(char c) { return c == '0' || c == '1'; }

// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Reader {
 public:
  Reader(const std::string& text, const std::string& name) : s_(text), name_(name) {
    if (s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // a UTF-8 byte-order mark
  }

  std::vector<JobEntry> entries() {
    std::vector<JobEntry> out;
    std::map<std::string, int> seen;  // key -> line
    while (!eof()) {
      skip_blanks();
      if (eof()) break;
      if (at_newline()) { newline(); continue; }
      if (peek() == '#') { skip_comment(); continue; }
      JobEntry e = entry();
      auto first = seen.emplace(e.key, e.line);
      if (!first.second) fail(e.line, e.column, str("'", e.key, "' is set twice (first on line ", first.first->second, ")"));
      out.push_back(std::move(e));
    }
    return out;
  }

 private:
  const std::string& s_;
  const std::string& name_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::size_t line_start_ = 0;

  bool eof() const { return pos_ >= s_.size(); }
  char peek(std::size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  int column() const { return static_cast<int>(pos_ - line_start_) + 1; }
  bool at_newline() const { return peek() == '\n' || (peek() == '\r' && peek(1) == '\n'); }
  void newline() {
    pos_ += peek() == '\r' ? 2 : 1;
    ++line_;
    line_start_ = pos_;
  }
  void skip_blanks() {
    while (peek() == ' ' || peek() == '\t') ++pos_;
  }
  void skip_comment() {
    while (!eof() && !at_newline()) {
      const unsigned char c = static_cast<unsigned char>(peek());
      if ((c < 0x20 && c != '\t') || c == 0x7F) fail(line_, column(), "control character in a comment");
      ++pos_;
    }
  }

  [[noreturn]] void fail(int line, int column, const std::string& msg) const {
    throw UsageError(str("job file ", name_, " line ", line, ", column ", column, ": ", msg),
                     "a job file holds one `key = value` per line: strings in quotes, numbers bare, true/false, "
                     "lists in [ ]; jobs/quickstart.toml is an example");
  }
  [[noreturn]] void fail_here(const std::string& msg) const { fail(line_, column(), msg); }

  // key = value [# comment] <end of line>
  JobEntry entry() {
    JobEntry e;
    e.line = line_;
    e.column = column();
    const char c = peek();
    if (c == '[')
      fail_here("tables ([section]) are not used in job files: every key is an option of sluice run, at the top level");
    if (c == '"' || c == '\'') fail_here("quoted keys are not used in job files: keys are option names such as batch-size");
    const std::size_t start = pos_;
    while (is_key_char(peek())) ++pos_;
    e.key = s_.substr(start, pos_ - start);
    if (e.key.empty()) fail_here("expected key = value");
    skip_blanks();
    if (peek() == '.') fail_here("dotted keys are not used in job files: keys are option names such as batch-size");
    if (peek() != '=') fail_here(str("expected '=' after the key '", e.key, "'"));
    ++pos_;
    skip_blanks();
    if (eof() || at_newline() || peek() == '#') fail_here(str("the key '", e.key, "' has no value"));
    if (peek() == '[') {
      e.is_array = true;
      array(e.values);
    } else {
      e.values.push_back(scalar());
    }
    skip_blanks();
    if (peek() == '#') skip_comment();
    if (!eof() && !at_newline()) fail_here("unexpected text after the value (one key = value per line)");
    return e;
  }

  // [ scalar, scalar, ... ] across lines, with comments; no nesting.
  void array(std::vector<JobScalar>& out) {
    const int open_line = line_, open_column = column();
    ++pos_;  // '['
    bool need_comma = false;
    for (;;) {
      // Whitespace, newlines and comments may sit between elements.
      for (;;) {
        skip_blanks();
        if (at_newline()) newline();
        else if (peek() == '#') skip_comment();
        else break;
      }
      if (eof()) fail(open_line, open_column, "the array opened here is not closed with ']'");
      const char c = peek();
      if (c == ']') { ++pos_; return; }
      if (need_comma) {
        if (c != ',') fail_here("expected ',' or ']' in the array");
        ++pos_;
        need_comma = false;
        continue;
      }
      if (c == ',') fail_here("expected a value before ','");
      if (c == '[') fail_here("arrays of arrays are not job values");
      if (c == '{') fail_here("inline tables are not used in job files");
      JobScalar v = scalar();
      if (!out.empty() && out.front().kind != v.kind &&
          !(is_number(out.front().kind) && is_number(v.kind)))
        fail(v.line, v.column, str("the array mixes ", job_kind_text(out.front().kind), " and ", job_kind_text(v.kind)));
      out.push_back(std::move(v));
      need_comma = true;
    }
  }

  static bool is_number(JobScalar::Kind k) { return k == JobScalar::Kind::Integer || k == JobScalar::Kind::Float; }

  JobScalar scalar() {
    JobScalar v;
    v.line = line_;
    v.column = column();
    const char c = peek();
    if (c == '"') {
      v.kind = JobScalar::Kind::String;
      v.text = basic_string();
    } else if (c == '\'') {
      v.kind = JobScalar::Kind::String;
      v.text = literal_string();
    } else if (c == '{') {
      fail_here("inline tables are not used in job files");
    } else {
      // A bare word: true, false or a number.
      const std::size_t start = pos_;
      while (is_key_char(peek()) || peek() == '+' || peek() == '.') ++pos_;
      const std::string word = s_.substr(start, pos_ - start);
      if (word.empty()) fail(v.line, v.column, "expected a value: a \"string\", a number, true, false or [an, array]");
      if (word == "true" || word == "false") {
        v.kind = JobScalar::Kind::Bool;
        v.text = word;
      } else {
        number(word, v);
      }
    }
    return v;
  }

  std::string basic_string() {
    const int open_line = line_, open_column = column();
    if (peek(1) == '"' && peek(2) == '"') fail_here("multi-line strings (\"\"\") are not used in job files");
    ++pos_;
    std::string out;
    for (;;) {
      if (eof() || at_newline()) fail(open_line, open_column, "the string opened here is not closed on its line");
      const char c = s_[pos_];
      const unsigned char u = static_cast<unsigned char>(c);
      if (c == '"') { ++pos_; return out; }
      if ((u < 0x20 && c != '\t') || u == 0x7F) fail_here("control character in a string (write it as an escape)");
      if (c != '\\') { out += c; ++pos_; continue; }
      const int esc_column = column();
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'b': out += '\b'; break;
        case 't': out += '\t'; break;
        case 'n': out += '\n'; break;
        case 'f': out += '\f'; break;
        case 'r': out += '\r'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'u': case 'U': {
          const int digits = e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < digits; ++i) {
            const char h = peek();
            uint32_t d;
            if (h >= '0' && h <= '9') d = static_cast<uint32_t>(h - '0');
            else if (h >= 'a' && h <= 'f') d = static_cast<uint32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') d = static_cast<uint32_t>(h - 'A' + 10);
            else fail(line_, esc_column, str("\\", e, " needs ", digits, " hex digits"));
            cp = cp * 16 + d;
            ++pos_;
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            fail(line_, esc_column, "the escape is not a Unicode scalar value");
          append_utf8(out, cp);
          break;
        }
        default: fail(line_, esc_column, "unknown escape (use \\\\ for a backslash, or a 'literal string')");
      }
    }
  }

  std::string literal_string() {
    const int open_line = line_, open_column = column();
    if (peek(1) == '\'' && peek(2) == '\'') fail_here("multi-line strings (''') are not used in job files");
    ++pos_;
    const std::size_t start = pos_;
    for (;;) {
      if (eof() || at_newline()) fail(open_line, open_column, "the string opened here is not closed on its line");
      const unsigned char u = static_cast<unsigned char>(s_[pos_]);
      if (u == '\'') break;
      if ((u < 0x20 && u != '\t') || u == 0x7F) fail_here("control character in a string");
      ++pos_;
    }
    std::string out = s_.substr(start, pos_ - start);
    ++pos_;
    return out;
  }

  // Integers (decimal with an optional sign, or 0x/0o/0b) and floats (fraction and/or exponent, inf,
  // nan), with '_' allowed between digits, as TOML writes them.
  void number(const std::string& w, JobScalar& v) const {
    auto bad = [&]() { fail(v.line, v.column, str("'", w, "' is not a value: expected a \"string\", a number, true, false or [an, array]")); };
    std::size_t i = 0;
    const bool sign = w[0] == '+' || w[0] == '-';
    if (sign) ++i;
    const std::string body = w.substr(i);
    if (body == "inf" || body == "nan") {
      v.kind = JobScalar::Kind::Float;
      v.text = w;
      return;
    }
    // Strips '_' (each between two digits) from the digits starting at i; false when none or misplaced.
    std::string digits;
    auto take_digits = [&](bool (*ok)(char)) {
      const std::size_t from = i;
      while (i < w.size() && (ok(w[i]) || w[i] == '_')) {
        if (w[i] == '_' && (i == from || i + 1 >= w.size() || !ok(w[i - 1]) || !ok(w[i + 1]))) return false;
        if (w[i] != '_') digits += w[i];
        ++i;
      }
      return i > from;
    };
    if (!sign && w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'o' || w[1] == 'b')) {
      const int base = w[1] == 'x' ? 16 : w[1] == 'o' ? 8 : 2;
      i = 2;
      if (!take_digits(base == 16 ? is_hex : base == 8 ? is_oct : is_bin) || i != w.size()) bad();
      uint64_t value = 0;
      for (char c : digits) {
        const uint64_t d = is_digit(c) ? static_cast<uint64_t>(c - '0') : static_cast<uint64_t>((c | 0x20) - 'a' + 10);
        if (value > (UINT64_MAX - d) / static_cast<uint64_t>(base))
          fail(v.line, v.column, str("the integer ", w, " does not fit in 64 bits"));
        value = value * static_cast<uint64_t>(base) + d;
      }
      v.kind = JobScalar::Kind::Integer;
      v.text = std::to_string(value);
      return;
    }
    if (!take_digits(is_digit)) bad();
    if (digits.size() > 1 && digits[0] == '0') fail(v.line, v.column, str("'", w, "': leading zeros are not allowed"));
    const std::string int_digits = digits;
    bool is_float = false;
    if (i < w.size() && w[i] == '.') {
      is_float = true;
      digits += '.';
      ++i;
      if (!take_digits(is_digit)) bad();
    }
    if (i < w.size() && (w[i] == 'e' || w[i] == 'E')) {
      is_float = true;
      digits += 'e';
      ++i;
      if (i < w.size() && (w[i] == '+' || w[i] == '-')) digits += w[i++];
      if (!take_digits(is_digit)) bad();
    }
    // The bare-word scan stops at anything else, so whatever is left here is not a number.
    if (i != w.size()) bad();
    const std::string sign_text = w[0] == '-' ? "-" : "";
    if (is_float) {
      v.kind = JobScalar::Kind::Float;
      v.text = sign_text + digits;
      return;
    }
    // Range check by hand: from -2^63 to 2^64 - 1 (TOML stops at 2^63 - 1; a uint64 option such as
    // seed takes its whole range, so the echo of any job reads back).
    uint64_t value = 0;
    const uint64_t limit = w[0] == '-' ? static_cast<uint64_t>(INT64_MAX) + 1 : UINT64_MAX;
    for (char c : int_digits) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (value > (limit - d) / 10) fail(v.line, v.column, str("the integer ", w, " does not fit in 64 bits"));
      value = value * 10 + d;
    }
    v.kind = JobScalar::Kind::Integer;
    v.text = value == 0 ? "0" : sign_text + int_digits;
  }
};

}  // namespace

const char* job_kind_text(JobScalar::Kind kind) {
  switch (kind) {
    case JobScalar::Kind::String: return "a string";
    case JobScalar::Kind::Integer: return "an integer";
    case JobScalar::Kind::Float: return "a number";
    case JobScalar::Kind::Bool: return "true or false";
  }
  return "a value";
}

std::vector<JobEntry> parse_job_text(const std::string& text, const std::string& name) {
  return Reader(text, name).entries();
}

std::vector<JobEntry> read_job_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UsageError(str("cannot read the job file ", path, ": it does not exist"),
                                             "--config paths are relative to the working directory; the jobs/ folder holds examples");
  if (fs::is_directory(path, ec)) throw UsageError(str("--config ", path, " is a folder; it takes a job file (TOML), e.g. jobs/quickstart.toml"));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxJobFileBytes)
    throw UsageError(str("the job file ", path, " is ", size, " bytes; a job file is a few lines of TOML (at most 1 MiB)"));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError(str("cannot read the job file ", path));
  std::ostringstream text;
  text << f.rdbuf();
  if (f.bad()) throw UsageError(str("cannot read the job file ", path));
  return parse_job_text(text.str(), path);
}

}  // namespace sluice
