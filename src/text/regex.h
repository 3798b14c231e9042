#pragma once
// The regular expressions of tokenizer.json (Split and Replace patterns, the GPT-2 split of
// ByteLevel), compiled once by PCRE2 (UTF-8, Unicode properties, JIT) and matched from any thread.
//
// The reference compiles them with Oniguruma (Ruby syntax), whose classes differ from PCRE2's:
// \s is White_Space, \w is Alphabetic + marks + Nd + Pc + Join_Control, \h is a hex digit.  The
// pattern is rewritten into PCRE2 with those meanings spelled out before it is compiled.
#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace sluice::text {

class Regex {
 public:
  // Throws InputError naming `where` when the pattern does not compile.
  Regex(const std::string& oniguruma_pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The next match at or after `from` in s: true with [start, end), or false.  s must be valid UTF-8.
  bool find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end) const;

  // f(start, end) for each match, left to right, as an iterator of Oniguruma gives them: after an
  // empty match the search goes on one character further.
  template <typename F>
  void for_each_match(std::string_view s, F&& f) const {
    std::size_t from = 0, start = 0, end = 0;
    while (from <= s.size() && find(s, from, start, end)) {
      f(start, end);
      if (end == start) {
        if (end >= s.size()) break;
        from = end + char_len(static_cast<unsigned char>(s[end]));
      } else {
        from = end;
      }
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  static std::size_t char_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
};

// The pattern in PCRE2's syntax (exposed for the tests).
std::string pcre2_pattern_of(const std::string& oniguruma_pattern);

}  // namespace sluice::text
