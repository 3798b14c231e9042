#include "text/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ucasemap.h>
#include <unicode/uniset.h>

#include <memory>

#include "core/error.h"

namespace sluice::text {

char32_t prev_char(std::string_view s, std::size_t& end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  std::size_t p = start;
  const char32_t c = next_char(s, p);
  end = start;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// The length of the well-formed sequence at s[i], or 0 with `bad` set to the length of the maximal
// ill-formed subpart there (Unicode's "U+FFFD substitution of maximal subparts").
std::size_t sequence_at(std::string_view s, std::size_t i, std::size_t& bad) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = b(i);
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    bad = 1;
    return 0;
  }
  std::size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) break;
    const unsigned char c = b(i + k);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  if (k > need) return need + 1;
  bad = k;
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t bad = 0;
    const std::size_t n = sequence_at(s, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t bad = 0;
    const std::size_t n = sequence_at(s, i, bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

namespace {

// Whether c was assigned by Unicode major.minor.
bool assigned_by(char32_t c, int major, int minor) {
  UVersionInfo v;
  u_charAge(static_cast<UChar32>(c), v);
  return v[0] < major || (v[0] == major && v[1] <= minor);
}

int8_t category_of_version(char32_t c, int major, int minor) {
  if (!assigned_by(c, major, minor)) return U_UNASSIGNED;
  return u_charType(static_cast<UChar32>(c));
}

}  // namespace

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_alphanumeric(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || is_numeric(c);
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return c == '_' || is_alphanumeric(c);
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  switch (category_of_version(c, 8, 0)) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  switch (category_of_version(c, 8, 0)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return true;
    default:
      return false;
  }
}

bool is_nonspacing_mark_v8(char32_t c) { return c >= 0x300 && category_of_version(c, 8, 0) == U_NON_SPACING_MARK; }

bool is_mark_v9(char32_t c) {
  if (c < 0x300) return false;
  const int8_t t = category_of_version(c, 9, 0);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

namespace {

const UCaseMap* root_case_map() {
  static const UCaseMap* map = [] {
    UErrorCode e = U_ZERO_ERROR;
    UCaseMap* m = ucasemap_open("", 0, &e);
    if (U_FAILURE(e)) SLUICE_THROW("ICU: cannot open the root case map: ", u_errorName(e));
    return m;
  }();
  return map;
}

}  // namespace

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  char src[4], dst[32];
  const std::size_t n = char_length(c < 0x800 ? 0xC0 : c < 0x10000 ? 0xE0 : 0xF0);
  if (n == 2) {
    src[0] = static_cast<char>(0xC0 | (c >> 6));
  } else if (n == 3) {
    src[0] = static_cast<char>(0xE0 | (c >> 12));
    src[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  } else {
    src[0] = static_cast<char>(0xF0 | (c >> 18));
    src[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    src[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  }
  if (n >= 2) src[n - 1] = static_cast<char>(0x80 | (c & 0x3F));
  if (n == 3 || n == 4) src[n - 2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  UErrorCode e = U_ZERO_ERROR;
  // One character alone: no context, so no final sigma (Rust maps each character by itself).
  const int32_t len = ucasemap_utf8ToLower(root_case_map(), dst, sizeof dst, src, static_cast<int32_t>(n), &e);
  if (U_FAILURE(e) || len <= 0) {
    out.append(src, n);
    return;
  }
  out.append(dst, static_cast<std::size_t>(len));
}

namespace {

// The normalizers of Unicode 9.0: ICU's, filtered to the characters assigned by 9.0 (ICU's way
// of normalizing by an older version, as IDNA2003 does with 3.2).
struct Normalizers {
  std::unique_ptr<icu::UnicodeSet> v9;
  std::unique_ptr<icu::FilteredNormalizer2> forms[4];
  Normalizers() {
    UErrorCode e = U_ZERO_ERROR;
    v9 = std::make_unique<icu::UnicodeSet>(icu::UnicodeString(u"[:age=9.0:]"), e);
    if (U_FAILURE(e)) SLUICE_THROW("ICU: cannot make the set of Unicode 9.0: ", u_errorName(e));
    v9->freeze();
    const icu::Normalizer2* base[4] = {icu::Normalizer2::getNFCInstance(e), icu::Normalizer2::getNFDInstance(e),
                                       icu::Normalizer2::getNFKCInstance(e), icu::Normalizer2::getNFKDInstance(e)};
    if (U_FAILURE(e)) SLUICE_THROW("ICU: no normalizer: ", u_errorName(e));
    for (int i = 0; i < 4; ++i) forms[i] = std::make_unique<icu::FilteredNormalizer2>(*base[i], *v9);
  }
};

const Normalizers& normalizers() {
  static const Normalizers n;
  return n;
}

}  // namespace

void normalize(NormalForm form, std::string_view in, std::string& out) {
  out.clear();
  bool ascii = true;
  for (char ch : in)
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) {  // ASCII is in every normal form
    out.assign(in);
    return;
  }
  const icu::FilteredNormalizer2& n = *normalizers().forms[static_cast<int>(form)];
  UErrorCode e = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(in.size()));
  n.normalizeUTF8(0, icu::StringPiece(in.data(), static_cast<int32_t>(in.size())), sink, nullptr, e);
  if (U_FAILURE(e)) SLUICE_THROW("ICU: normalization failed: ", u_errorName(e));
}

}  // namespace sluice::text
