#include "text/passages.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/unicode.h"

namespace sluice::text {

namespace {

int hex4(const std::string& s, std::size_t at) {
  if (at + 4 > s.size()) return -1;
  int v = 0;
  for (std::size_t i = at; i < at + 4; ++i) {
    const char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return -1;
  }
  return v;
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  if (s.size() < x.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - x.size() + i])) != x[i]) return false;
  return true;
}

}  // namespace

void replace_lone_surrogate_escapes(std::string& s) {
  for (std::size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] != '\\') continue;
    if (s[i + 1] != 'u') {
      ++i;  // \\, \" and the others: skip the escaped character
      continue;
    }
    const int v = hex4(s, i + 2);
    if (v < 0xD800 || v > 0xDFFF) {
      i += 1;
      continue;
    }
    if (v <= 0xDBFF && i + 7 < s.size() && s[i + 6] == '\\' && s[i + 7] == 'u') {
      const int lo = hex4(s, i + 8);
      if (lo >= 0xDC00 && lo <= 0xDFFF) {  // a pair
        i += 11;
        continue;
      }
    }
    s.replace(i + 2, 4, "FFFD");
    i += 5;
  }
}

PassageReader::PassageReader(const std::string& path, PassageFormat format, std::string field)
    : path_(path), field_(std::move(field)), in_(path, std::ios::binary) {
  if (!in_) throw InputError(str("cannot read the input ", path), kPathsHint);
  jsonl_ = format == PassageFormat::Jsonl ||
           (format == PassageFormat::Auto && (ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json")));
}

bool PassageReader::next(std::string& passage) {
  for (;;) {
    if (!std::getline(in_, buf_)) return false;
    ++line_;
    if (!jsonl_) {
      if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
      passage = is_valid_utf8(buf_) ? buf_ : sanitize_utf8(buf_);
      return true;
    }
    if (buf_.find_first_not_of(" \t\r") == std::string::npos) {
      // A blank last line (the file ends in an empty line) is no record; one in the middle is an error.
      if (in_.peek() == std::char_traits<char>::eof()) return false;
      throw InputError(str(path_, ":", line_, ": an empty line"), "a JSONL input holds one JSON object a line: remove the empty line");
    }
    if (!is_valid_utf8(buf_)) buf_ = sanitize_utf8(buf_);
    replace_lone_surrogate_escapes(buf_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(buf_);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(str(path_, ":", line_, ": not JSON (", e.what(), ")"),
                       "a JSONL input holds one JSON object a line; for plain text, one passage a line, pass --format text");
    }
    if (!j.is_object()) throw InputError(str(path_, ":", line_, ": not a JSON object"), "a JSONL input holds one JSON object a line");
    auto it = j.find(field_);
    if (it == j.end()) {
      std::string fields;
      for (auto f = j.begin(); f != j.end() && fields.size() < 200; ++f) fields += (fields.empty() ? "" : ", ") + f.key();
      throw InputError(str(path_, ":", line_, ": no field \"", field_, "\" (the object has: ", fields.empty() ? "nothing" : fields, ")"),
                       "name the field of the passage with --text-field");
    }
    if (!it->is_string())
      throw InputError(str(path_, ":", line_, ": the field \"", field_, "\" is ", it->type_name(), ", not a string"),
                       "the passage must be a JSON string; name another field with --text-field");
    passage = it->get<std::string>();
    return true;
  }
}

}  // namespace sluice::text
