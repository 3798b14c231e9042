// Normalizers: BertNormalizer, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend,
// Nmt, ByteLevel, Sequence.
#include <utility>

#include "core/error.h"
#include "text/components.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace sluice::text::detail {

using nlohmann::json;

const std::string& byte_char(uint8_t b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    // Printable bytes stand for themselves; the others, in order, for U+0100 and up.
    char32_t next = 256;
    for (int v = 0; v < 256; ++v) {
      const bool printable = (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || (v >= 174 && v <= 255);
      append_utf8(t[v], printable ? static_cast<char32_t>(v) : next++);
    }
    return t;
  }();
  return table[b];
}

namespace {

void lowercase_into(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size();) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++i;
      continue;
    }
    append_lowercase(out, next_char(in, i));
  }
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower) : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(std::string& s, Scratch& sc) const override {
    std::string& a = sc.norm2;
    a.clear();
    for (std::size_t i = 0; i < s.size();) {
      const char32_t c = next_char(s, i);
      if (clean_) {
        if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
        if (is_whitespace(c)) {
          a.push_back(' ');
          continue;
        }
      }
      if (chinese_ && is_chinese_char(c)) {
        a.push_back(' ');
        append_utf8(a, c);
        a.push_back(' ');
      } else {
        append_utf8(a, c);
      }
    }
    if (strip_) {
      text::normalize(NormalForm::NFD, a, sc.norm3);
      a.clear();
      for (std::size_t i = 0; i < sc.norm3.size();) {
        const std::size_t at = i;
        const char32_t c = next_char(sc.norm3, i);
        if (!is_nonspacing_mark_v8(c)) a.append(sc.norm3, at, i - at);
      }
    }
    if (lower_) {
      lowercase_into(a, s);
    } else {
      s.swap(a);
    }
  }
  std::string name() const override { return "BertNormalizer"; }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class UnicodeForm : public Normalizer {
 public:
  UnicodeForm(NormalForm f, std::string name) : form_(f), name_(std::move(name)) {}
  void normalize(std::string& s, Scratch& sc) const override {
    text::normalize(form_, s, sc.norm2);
    s.swap(sc.norm2);
  }
  std::string name() const override { return name_; }

 private:
  NormalForm form_;
  std::string name_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s, Scratch& sc) const override {
    lowercase_into(s, sc.norm2);
    s.swap(sc.norm2);
  }
  std::string name() const override { return "Lowercase"; }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s, Scratch&) const override {
    std::size_t end = s.size();
    if (right_)
      while (end > 0) {
        std::size_t e = end;
        if (!is_whitespace(prev_char(s, e))) break;
        end = e;
      }
    s.resize(end);
    std::size_t start = 0;
    if (left_)
      while (start < s.size()) {
        std::size_t p = start;
        if (!is_whitespace(next_char(s, p))) break;
        start = p;
      }
    s.erase(0, start);
  }
  std::string name() const override { return "Strip"; }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& s, Scratch& sc) const override {
    std::string& a = sc.norm2;
    a.clear();
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t at = i;
      const char32_t c = next_char(s, i);
      if (!is_mark_v9(c)) a.append(s, at, i - at);
    }
    s.swap(a);
  }
  std::string name() const override { return "StripAccents"; }
};

class Replace : public Normalizer {
 public:
  Replace(std::string literal, std::unique_ptr<Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& s, Scratch& sc) const override {
    std::string& a = sc.norm2;
    a.clear();
    std::size_t last = 0;
    if (re_) {
      re_->for_each_match(s, [&](std::size_t start, std::size_t end) {
        a.append(s, last, start - last);
        a += content_;
        last = end;
      });
    } else if (!literal_.empty()) {
      for (std::size_t at = s.find(literal_); at != std::string::npos; at = s.find(literal_, last)) {
        a.append(s, last, at - last);
        a += content_;
        last = at + literal_.size();
      }
    }
    a.append(s, last, std::string::npos);
    s.swap(a);
  }
  std::string name() const override { return "Replace"; }

 private:
  std::string literal_;
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s, Scratch&) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }
  std::string name() const override { return "Prepend"; }

 private:
  std::string prepend_;
};

// SentencePiece's nmt_nfkc rules without the NFKC: some controls dropped, some characters to a space.
class Nmt : public Normalizer {
 public:
  void normalize(std::string& s, Scratch& sc) const override {
    std::string& a = sc.norm2;
    a.clear();
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t at = i;
      const char32_t c = next_char(s, i);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F) continue;
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) || c == 0x2028 ||
          c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD) {
        a.push_back(' ');
        continue;
      }
      a.append(s, at, i - at);
    }
    s.swap(a);
  }
  std::string name() const override { return "Nmt"; }
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& s, Scratch& sc) const override {
    sc.norm2.clear();
    for (char ch : s) sc.norm2 += byte_char(static_cast<uint8_t>(ch));
    s.swap(sc.norm2);
  }
  std::string name() const override { return "ByteLevel"; }
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s, Scratch& sc) const override {
    for (const auto& p : parts_) p->normalize(s, sc);
  }
  std::string name() const override {
    std::string n = "Sequence[";
    for (std::size_t i = 0; i < parts_.size(); ++i) n += (i ? ", " : "") + parts_[i]->name();
    return n + "]";
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

// {"String": "x"} or {"Regex": "x"}: the literal, or the compiled expression.
std::pair<std::string, std::unique_ptr<Regex>> pattern_of(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) return {j["String"].get<std::string>(), nullptr};
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string())
    return {"", std::make_unique<Regex>(j["Regex"].get<std::string>(), where)};
  throw InputError(str(where, ": pattern ", j.dump(), " is neither {\"String\": ...} nor {\"Regex\": ...}"));
}

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(str(where, " is not an object"));
  const std::string type = string_field(j, "type", where, "");
  const std::string at = str(where, " ", type);
  if (type == "BertNormalizer") {
    const bool lower = bool_field(j, "lowercase", at, true);
    return std::make_unique<BertNormalizer>(bool_field(j, "clean_text", at, true), bool_field(j, "handle_chinese_chars", at, true),
                                            bool_field(j, "strip_accents", at, lower), lower);
  }
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalForm::NFC, type);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalForm::NFD, type);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalForm::NFKC, type);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalForm::NFKD, type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(bool_field(j, "strip_left", at, true), bool_field(j, "strip_right", at, true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") {
    auto [literal, re] = pattern_of(field(j, "pattern", at), at);
    return std::make_unique<Replace>(literal, std::move(re), string_field(j, "content", at, ""));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(j, "prepend", at, ""));
  if (type == "Nmt") return std::make_unique<Nmt>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    const json& list = field(j, "normalizers", at);
    if (!list.is_array()) throw InputError(str(at, ": \"normalizers\" is not a list"));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) parts.push_back(make_normalizer(list[i], str(at, "[", i, "]")));
    return std::make_unique<Sequence>(std::move(parts));
  }
  if (type == "Precompiled") {
    if (auto p = make_precompiled(j, at)) return p;
    return std::make_unique<Sequence>(std::vector<std::unique_ptr<Normalizer>>{});  // an empty map: nothing to do
  }
  throw InputError(str(where, ": the normalizer type \"", type, "\" is not supported"),
                   "supported: BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Nmt, "
                   "ByteLevel, Precompiled, Sequence");
}

}  // namespace sluice::text::detail
