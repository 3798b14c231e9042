#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace sluice::text {

namespace {

constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
constexpr const char* kSpace = "\\p{White_Space}";
constexpr const char* kHex = "0-9A-Fa-f";

// One match-data block per thread, reused by every pattern (only the whole match is read).
struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

pcre2_match_data* thread_match_data() {
  static thread_local MatchData data;
  return data.md;
}

}  // namespace

std::string pcre2_pattern_of(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const char* set = e == 'w' || e == 'W' ? kWord : e == 's' || e == 'S' ? kSpace : e == 'h' || e == 'H' ? kHex : nullptr;
      if (set) {
        const bool negated = e == 'W' || e == 'S' || e == 'H';
        if (in_class && !negated) {
          out += set;
        } else if (in_class) {  // a negated class inside a class: PCRE2's own meaning, close enough
          out += p.substr(i, 2);
        } else {
          out += negated ? "[^" : "[";
          out += set;
          out += "]";
        }
        ++i;
        continue;
      }
      out += p.substr(i, 2);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' first in a class (or after '^') is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  const std::string translated = pcre2_pattern_of(pattern);
  int code = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    throw InputError(str(where, ": the regular expression \"", pattern, "\" does not compile (", reinterpret_cast<char*>(msg),
                         " at offset ", offset, ")"),
                     "tokenizer.json patterns are Oniguruma's syntax; fix or replace the pattern");
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // without JIT (not built in) it still matches
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end) const {
  pcre2_match_data* md = thread_match_data();
  int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the JIT's stack is small; the interpreter keeps its frames on the heap
    rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0 && rc != 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(str("matching the regular expression \"", pattern_, "\" failed: ", reinterpret_cast<char*>(msg)));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  start = ov[0];
  end = ov[1];
  return true;
}

}  // namespace sluice::text
