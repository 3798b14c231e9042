#pragma once
// UTF-8 and the Unicode properties the tokenizer reads (ICU underneath).
//
// The reference (Hugging Face's `tokenizers`) reads its properties from tables of several Unicode
// versions, and ids differ where the versions do; each function says which one it follows:
//   normalization (NFC, NFD, NFKC, NFKD) and StripAccents' marks     Unicode 9.0
//   Bert's punctuation, control characters and non-spacing marks     Unicode 8.0
//   white space, alphanumeric, numeric, case mapping, \w             the current version (ICU's)
// A character assigned after a table's version is unassigned (Cn, no decomposition) there.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::text {

// ---- UTF-8 -----------------------------------------------------------------------------------
// The code point at s[pos] (pos advanced past it); s must be valid UTF-8 (sanitize_utf8).
inline char32_t next_char(std::string_view s, std::size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const auto at = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + i]) & 0x3F); };
  char32_t c;
  if (b0 < 0xE0) {
    c = (static_cast<char32_t>(b0 & 0x1F) << 6) | at(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    c = (static_cast<char32_t>(b0 & 0x0F) << 12) | (at(1) << 6) | at(2);
    pos += 3;
  } else {
    c = (static_cast<char32_t>(b0 & 0x07) << 18) | (at(1) << 12) | (at(2) << 6) | at(3);
    pos += 4;
  }
  return c;
}
// The number of bytes of the character that starts with byte b.
inline std::size_t char_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
// The code point that ends at s[end) (end moved back to its start).
char32_t prev_char(std::string_view s, std::size_t& end);
void append_utf8(std::string& out, char32_t c);

// Whether s is well-formed UTF-8 (no surrogates, no overlong forms, nothing past U+10FFFF).
bool is_valid_utf8(std::string_view s);
// s with every ill-formed sequence replaced by U+FFFD, one for each maximal ill-formed subpart
// (as Python's errors="replace" and WHATWG decoders do).
std::string sanitize_utf8(std::string_view s);

// ---- properties --------------------------------------------------------------------------------
bool is_whitespace(char32_t c);          // White_Space (Rust's char::is_whitespace)
bool is_alphanumeric(char32_t c);        // Alphabetic or a number (Rust's char::is_alphanumeric)
bool is_numeric(char32_t c);             // Nd, Nl, No (Rust's char::is_numeric)
bool is_word_char(char32_t c);           // \w: Alphabetic, marks, Nd, Pc, Join_Control (UTS #18)
bool is_bert_punctuation(char32_t c);    // ASCII punctuation, or P* of Unicode 8.0
bool is_bert_control(char32_t c);        // Cc, Cf, Co, Cs of Unicode 8.0, but not \t \n \r
bool is_nonspacing_mark_v8(char32_t c);  // Mn of Unicode 8.0 (BertNormalizer's strip_accents)
bool is_mark_v9(char32_t c);             // Mn, Mc, Me of Unicode 9.0 (StripAccents)
bool is_chinese_char(char32_t c);        // the CJK blocks BERT pads with spaces
// c's full lowercase mapping without context (Rust's char::to_lowercase: U+0130 -> "i\u0307").
void append_lowercase(std::string& out, char32_t c);

// ---- normalization ------------------------------------------------------------------------------
enum class NormalForm { NFC, NFD, NFKC, NFKD };
// out = in in the normal form, of Unicode 9.0 (out is cleared first; in must be valid UTF-8).
void normalize(NormalForm form, std::string_view in, std::string& out);

}  // namespace sluice::text
