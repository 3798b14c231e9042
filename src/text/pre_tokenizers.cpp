// Pre-tokenizers: BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, ByteLevel, Punctuation,
// Digits, Split, CharDelimiterSplit, Sequence.
#include <utility>

#include "core/error.h"
#include "text/components.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace sluice::text::detail {

using nlohmann::json;

namespace {

// Each character for which pred holds is one match.
template <typename Pred>
void split_chars(Pieces& p, Scratch& sc, Pred pred, Behavior b) {
  sc.items.clear();
  for (const Piece& piece : p.items) {
    if (piece.id >= 0) {
      sc.items.push_back(piece);
      continue;
    }
    const std::string_view t = p.text(piece);
    sc.segs.clear();
    uint32_t last = 0;
    for (std::size_t i = 0; i < t.size();) {
      const auto at = static_cast<uint32_t>(i);
      const char32_t c = next_char(t, i);
      if (pred(c)) {
        if (last < at) sc.segs.push_back({last, at, false});
        sc.segs.push_back({at, static_cast<uint32_t>(i), true});
        last = static_cast<uint32_t>(i);
      }
    }
    if (last < t.size()) sc.segs.push_back({last, static_cast<uint32_t>(t.size()), false});
    split_by(sc.segs, piece.off, b, sc.items);
  }
  p.items.swap(sc.items);
}

// The matches and the stretches between them of a pattern (a regex, or a literal when re is null).
void pattern_segments(std::string_view t, const Regex* re, const std::string& literal, bool invert, std::vector<Seg>& segs) {
  segs.clear();
  std::size_t prev = 0;
  const auto add = [&](std::size_t start, std::size_t end) {
    if (prev != start) segs.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(start), invert});
    segs.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end), !invert});
    prev = end;
  };
  if (re) {
    re->for_each_match(t, add);
  } else if (!literal.empty()) {
    for (std::size_t at = t.find(literal); at != std::string_view::npos; at = t.find(literal, prev)) add(at, at + literal.size());
  }
  if (prev != t.size()) segs.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(t.size()), invert});
}

class BertPre : public PreTokenizer {
 public:
  void apply(Pieces& p, Scratch& sc) const override {
    split_chars(p, sc, is_whitespace, Behavior::Removed);
    split_chars(p, sc, is_bert_punctuation, Behavior::Isolated);
  }
  std::string name() const override { return "BertPreTokenizer"; }
};

// \w+|[^\w\s]+: runs of word characters and runs of other non-space characters.
class WhitespacePre : public PreTokenizer {
 public:
  void apply(Pieces& p, Scratch& sc) const override {
    sc.items.clear();
    for (const Piece& piece : p.items) {
      if (piece.id >= 0) {
        sc.items.push_back(piece);
        continue;
      }
      const std::string_view t = p.text(piece);
      int run = 0;  // 0: none or space, 1: word, 2: other
      uint32_t run_start = 0;
      for (std::size_t i = 0; i < t.size();) {
        const auto at = static_cast<uint32_t>(i);
        const char32_t c = next_char(t, i);
        const int kind = is_word_char(c) ? 1 : is_whitespace(c) ? 0 : 2;
        if (kind != run) {
          if (run) sc.items.push_back({piece.off + run_start, at - run_start, -1});
          run = kind;
          run_start = at;
        }
      }
      if (run) sc.items.push_back({piece.off + run_start, static_cast<uint32_t>(t.size()) - run_start, -1});
    }
    p.items.swap(sc.items);
  }
  std::string name() const override { return "Whitespace"; }
};

class WhitespaceSplitPre : public PreTokenizer {
 public:
  void apply(Pieces& p, Scratch& sc) const override { split_chars(p, sc, is_whitespace, Behavior::Removed); }
  std::string name() const override { return "WhitespaceSplit"; }
};

class CharDelimiterPre : public PreTokenizer {
 public:
  explicit CharDelimiterPre(char32_t d) : d_(d) {}
  void apply(Pieces& p, Scratch& sc) const override {
    split_chars(p, sc, [this](char32_t c) { return c == d_; }, Behavior::Removed);
  }
  std::string name() const override { return "CharDelimiterSplit"; }

 private:
  char32_t d_;
};

class PunctuationPre : public PreTokenizer {
 public:
  explicit PunctuationPre(Behavior b) : b_(b) {}
  void apply(Pieces& p, Scratch& sc) const override { split_chars(p, sc, is_bert_punctuation, b_); }
  std::string name() const override { return "Punctuation"; }

 private:
  Behavior b_;
};

class DigitsPre : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void apply(Pieces& p, Scratch& sc) const override {
    split_chars(p, sc, is_numeric, individual_ ? Behavior::Isolated : Behavior::Contiguous);
  }
  std::string name() const override { return "Digits"; }

 private:
  bool individual_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(std::string literal, std::unique_ptr<Regex> re, Behavior b, bool invert)
      : literal_(std::move(literal)), re_(std::move(re)), b_(b), invert_(invert) {}
  void apply(Pieces& p, Scratch& sc) const override {
    sc.items.clear();
    for (const Piece& piece : p.items) {
      if (piece.id >= 0) {
        sc.items.push_back(piece);
        continue;
      }
      pattern_segments(p.text(piece), re_.get(), literal_, invert_, sc.segs);
      split_by(sc.segs, piece.off, b_, sc.items);
    }
    p.items.swap(sc.items);
  }
  std::string name() const override { return "Split"; }

 private:
  std::string literal_;
  std::unique_ptr<Regex> re_;
  Behavior b_;
  bool invert_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(char32_t replacement, PrependScheme scheme, bool split) : scheme_(scheme), split_(split), replacement_(replacement) {
    append_utf8(rep_, replacement);
  }
  void apply(Pieces& p, Scratch& sc) const override {
    Pieces& out = sc.pieces2;
    out.clear();
    for (std::size_t index = 0; index < p.items.size(); ++index) {
      const Piece& piece = p.items[index];
      if (piece.id >= 0) {
        out.items.push_back(piece);
        continue;
      }
      const std::string_view t = p.text(piece);
      const auto base = static_cast<uint32_t>(out.buf.size());
      const bool starts = t.compare(0, rep_.size(), rep_) == 0 || (t[0] == ' ');  // ' ' becomes the replacement
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && index == 0))) out.buf += rep_;
      for (char ch : t) {
        if (ch == ' ')
          out.buf += rep_;
        else
          out.buf.push_back(ch);
      }
      const std::string_view n(out.buf.data() + base, out.buf.size() - base);
      if (!split_) {
        out.items.push_back({base, static_cast<uint32_t>(n.size()), -1});
        continue;
      }
      sc.segs.clear();
      uint32_t last = 0;
      for (std::size_t i = 0; i < n.size();) {
        const auto at = static_cast<uint32_t>(i);
        const char32_t c = next_char(n, i);
        if (c == replacement_) {
          if (last < at) sc.segs.push_back({last, at, false});
          sc.segs.push_back({at, static_cast<uint32_t>(i), true});
          last = static_cast<uint32_t>(i);
        }
      }
      if (last < n.size()) sc.segs.push_back({last, static_cast<uint32_t>(n.size()), false});
      split_by(sc.segs, base, Behavior::MergedWithNext, out.items);
    }
    std::swap(p, out);
  }
  std::string name() const override { return "Metaspace"; }

 private:
  PrependScheme scheme_;
  bool split_;
  char32_t replacement_;
  std::string rep_;
};

constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool prefix, bool use_regex, const std::string& where) : prefix_(prefix) {
    if (use_regex) re_ = std::make_unique<Regex>(kGpt2Split, where);
  }
  void apply(Pieces& p, Scratch& sc) const override {
    Pieces& out = sc.pieces2;
    out.clear();
    for (const Piece& piece : p.items) {
      if (piece.id >= 0) {
        out.items.push_back(piece);
        continue;
      }
      std::string_view t = p.text(piece);
      if (prefix_ && t[0] != ' ') {
        sc.word.assign(1, ' ');
        sc.word.append(t);
        t = sc.word;
      }
      const auto emit = [&](std::size_t start, std::size_t end) {
        if (start == end) return;
        const auto base = static_cast<uint32_t>(out.buf.size());
        for (std::size_t i = start; i < end; ++i) out.buf += byte_char(static_cast<uint8_t>(t[i]));
        out.items.push_back({base, static_cast<uint32_t>(out.buf.size()) - base, -1});
      };
      if (re_) {
        // Isolated: the matches and what lies between them, each a piece.
        std::size_t prev = 0;
        re_->for_each_match(t, [&](std::size_t start, std::size_t end) {
          emit(prev, start);
          emit(start, end);
          prev = end;
        });
        emit(prev, t.size());
      } else {
        emit(0, t.size());
      }
    }
    std::swap(p, out);
  }
  std::string name() const override { return "ByteLevel"; }

 private:
  bool prefix_;
  std::unique_ptr<Regex> re_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(Pieces& p, Scratch& sc) const override {
    for (const auto& part : parts_) part->apply(p, sc);
  }
  std::string name() const override {
    std::string n = "Sequence[";
    for (std::size_t i = 0; i < parts_.size(); ++i) n += (i ? ", " : "") + parts_[i]->name();
    return n + "]";
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

char32_t one_char(const std::string& s, const std::string& where, const char* what) {
  std::size_t i = 0;
  if (s.empty() || !is_valid_utf8(s)) throw InputError(str(where, ": \"", what, "\" is not one character"));
  const char32_t c = next_char(s, i);
  if (i != s.size()) throw InputError(str(where, ": \"", what, "\" is \"", s, "\", not one character"));
  return c;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(str(where, " is not an object"));
  const std::string type = string_field(j, "type", where, "");
  const std::string at = str(where, " ", type);
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (type == "CharDelimiterSplit") return std::make_unique<CharDelimiterPre>(one_char(string_field(j, "delimiter", at, ""), at, "delimiter"));
  if (type == "Punctuation")
    return std::make_unique<PunctuationPre>(j.contains("behavior") ? behavior_of(j["behavior"], at) : Behavior::Isolated);
  if (type == "Digits") return std::make_unique<DigitsPre>(bool_field(j, "individual_digits", at, false));
  if (type == "Split") {
    auto [literal, re] = pattern_of(field(j, "pattern", at), at);
    return std::make_unique<SplitPre>(literal, std::move(re), behavior_of(field(j, "behavior", at), at), bool_field(j, "invert", at, false));
  }
  if (type == "Metaspace") {
    const std::string rep = string_field(j, "replacement", at, "\xE2\x96\x81");
    PrependScheme scheme = PrependScheme::Always;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = string_field(j, "prepend_scheme", at, "always");
      if (s == "always")
        scheme = PrependScheme::Always;
      else if (s == "first")
        scheme = PrependScheme::First;
      else if (s == "never")
        scheme = PrependScheme::Never;
      else
        throw InputError(str(at, ": prepend_scheme \"", s, "\" is not always, first or never"));
    } else if (!bool_field(j, "add_prefix_space", at, true)) {  // the older spelling
      scheme = PrependScheme::Never;
    }
    return std::make_unique<MetaspacePre>(one_char(rep, at, "replacement"), scheme, bool_field(j, "split", at, true));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelPre>(bool_field(j, "add_prefix_space", at, true), bool_field(j, "use_regex", at, true), at);
  if (type == "Sequence") {
    const json& list = field(j, "pretokenizers", at);
    if (!list.is_array()) throw InputError(str(at, ": \"pretokenizers\" is not a list"));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) parts.push_back(make_pre_tokenizer(list[i], str(at, "[", i, "]")));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  throw InputError(str(where, ": the pre-tokenizer type \"", type, "\" is not supported"),
                   "supported: BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, ByteLevel, Punctuation, Digits, Split, "
                   "CharDelimiterSplit, Sequence");
}

}  // namespace sluice::text::detail
