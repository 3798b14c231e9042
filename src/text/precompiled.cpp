// SentencePiece's precompiled character map (the "Precompiled" normalizer of tokenizer.json files
// converted from SentencePiece models: T5, XLM-R, ALBERT, ...).
//
// The map is base64 of: a little-endian uint32, the size in bytes of a double-array trie (the
// layout of darts-clone, whose units hold an offset, a label and a leaf flag), the trie's units, and
// then the replacement strings, each ended by a NUL; a key's value is the offset of its replacement.
// The reference applies it grapheme by grapheme: a grapheme shorter than 6 bytes that has a key
// among its prefixes becomes the replacement of the shortest such key, whole; any other grapheme is
// mapped character by character.  Graphemes come from ICU's character break iterator.
#include <unicode/brkiter.h>
#include <unicode/utext.h>

#include <cstring>

#include "core/error.h"
#include "text/components.h"
#include "text/unicode.h"

namespace sluice::text::detail {

namespace {

std::string base64_decode(const std::string& in, const std::string& where) {
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+' || c == '-')
      v = 62;
    else if (c == '/' || c == '_')
      v = 63;
    else if (c == '=' || c == '\n' || c == '\r')
      continue;
    else
      throw InputError(str(where, ": precompiled_charsmap is not base64"));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

class Precompiled : public Normalizer {
 public:
  Precompiled(const std::string& b64, const std::string& where) {
    const std::string blob = base64_decode(b64, where);
    if (blob.size() < 4) throw InputError(str(where, ": precompiled_charsmap is too short"));
    uint32_t trie_bytes = 0;
    for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<uint8_t>(blob[static_cast<std::size_t>(i)]);
    if (trie_bytes % 4 || trie_bytes == 0 || 4 + static_cast<std::size_t>(trie_bytes) > blob.size())
      throw InputError(str(where, ": precompiled_charsmap's trie size ", trie_bytes, " does not fit its ", blob.size(), " bytes"));
    units_.resize(trie_bytes / 4);
    for (std::size_t i = 0; i < units_.size(); ++i) {
      const auto* p = reinterpret_cast<const uint8_t*>(blob.data()) + 4 + 4 * i;
      units_[i] = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
                  (static_cast<uint32_t>(p[3]) << 24);
    }
    strings_ = blob.substr(4 + trie_bytes);
    if (strings_.empty() || strings_.back() != '\0') strings_.push_back('\0');
  }

  void normalize(std::string& s, Scratch& sc) const override {
    if (s.empty()) return;
    std::string& out = sc.norm2;
    out.clear();
    icu::BreakIterator* bi = graphemes();
    UErrorCode e = U_ZERO_ERROR;
    UText* ut = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &e);
    if (U_FAILURE(e)) SLUICE_THROW("ICU: cannot open the text: ", u_errorName(e));
    bi->setText(ut, e);
    if (U_FAILURE(e)) {
      utext_close(ut);
      SLUICE_THROW("ICU: cannot segment the text: ", u_errorName(e));
    }
    int32_t start = bi->first();
    for (int32_t end = bi->next(); end != icu::BreakIterator::DONE; start = end, end = bi->next()) {
      const std::string_view g(s.data() + start, static_cast<std::size_t>(end - start));
      if (g.size() < 6 && replace(g, out)) continue;
      for (std::size_t i = 0; i < g.size();) {
        const std::size_t n = char_length(static_cast<unsigned char>(g[i]));
        if (!replace(g.substr(i, n), out)) out.append(g.substr(i, n));
        i += n;
      }
    }
    utext_close(ut);
    s.swap(out);
  }
  std::string name() const override { return "Precompiled"; }

 private:
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }

  // Appends the replacement of the shortest key that is a prefix of s; false when there is none.
  bool replace(std::string_view s, std::string& out) const {
    std::size_t node = offset(units_[0]);
    for (char ch : s) {
      const auto b = static_cast<uint8_t>(ch);
      node ^= b;
      if (node >= units_.size()) return false;
      const uint32_t u = units_[node];
      if (label(u) != b) return false;
      node ^= offset(u);
      if (node >= units_.size()) return false;
      if (has_leaf(u)) {
        const uint32_t at = value(units_[node]);
        if (at >= strings_.size()) return false;
        out.append(strings_.c_str() + at);
        return true;
      }
    }
    return false;
  }

  static icu::BreakIterator* graphemes() {
    // One iterator per thread: ICU's iterators are not shared between threads.
    static thread_local std::unique_ptr<icu::BreakIterator> bi = [] {
      UErrorCode e = U_ZERO_ERROR;
      std::unique_ptr<icu::BreakIterator> it(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), e));
      if (U_FAILURE(e) || !it) SLUICE_THROW("ICU: no character break iterator: ", u_errorName(e));
      return it;
    }();
    return bi.get();
  }

  std::vector<uint32_t> units_;
  std::string strings_;
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j, const std::string& where) {
  const std::string map = string_field(j, "precompiled_charsmap", where, "");
  if (map.empty()) return nullptr;
  return std::make_unique<Precompiled>(map, where);
}

}  // namespace sluice::text::detail
