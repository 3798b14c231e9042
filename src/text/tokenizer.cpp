// Tokenizer: tokenizer.json read, and one passage encoded: added tokens split out (before the
// normalizer, and after it for the normalized ones), normalizer, pre-tokenizer, model, truncation,
// post-processor.
#include "text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "core/error.h"
#include "text/components.h"
#include "text/unicode.h"

namespace sluice::text {

using nlohmann::json;
using namespace detail;

namespace {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Leftmost-longest matching of a set of strings (what the reference's Aho-Corasick automaton finds).
class Matcher {
 public:
  bool empty() const { return nodes_.size() <= 1; }
  void add(std::string_view s, int32_t token) {
    if (s.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    first_[static_cast<uint8_t>(s[0])] = true;
    int32_t node = 0;
    for (char ch : s) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        nodes_.emplace_back();
        next = static_cast<int32_t>(nodes_.size() - 1);
        nodes_[node].kids.emplace_back(b, next);
      }
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = token;
  }
  // The leftmost match at or after `from`, the longest there.
  bool find(std::string_view s, std::size_t from, std::size_t& start, std::size_t& end, int32_t& token) const {
    if (empty()) return false;
    for (std::size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<uint8_t>(s[i])]) continue;
      int32_t node = 0, found = -1;
      std::size_t found_end = 0;
      for (std::size_t k = i; k < s.size(); ++k) {
        node = child(node, static_cast<uint8_t>(s[k]));
        if (node < 0) break;
        if (nodes_[node].token >= 0) {
          found = nodes_[node].token;
          found_end = k + 1;
        }
      }
      if (found >= 0) {
        start = i;
        end = found_end;
        token = found;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;
    int32_t token = -1;
  };
  int32_t child(int32_t node, uint8_t b) const {
    for (const auto& [k, n] : nodes_[node].kids)
      if (k == b) return n;
    return -1;
  }
  std::vector<Node> nodes_;
  std::array<bool, 256> first_{};
};

Scratch& thread_scratch() {
  static thread_local Scratch scratch;
  return scratch;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str("cannot read the tokenizer ", path), kPathsHint);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post;
  std::vector<AddedToken> added;
  Matcher raw, normalized;  // tokens matched before normalization, and after it
  std::size_t max_length = 0;
  bool truncate_left = false;
  std::optional<int32_t> pad_id;  // tokenizer.json's padding section

  // The added tokens of s (raw or normalized): (start, end, token) with token < 0 for the text between.
  void find_added(std::string_view s, const Matcher& m, std::vector<Seg>& spans, std::vector<int32_t>& tokens) const {
    spans.clear();
    tokens.clear();
    std::size_t start_offset = 0, from = 0, start = 0, end = 0;
    int32_t t = -1;
    while (m.find(s, from, start, end, t)) {
      from = end;
      const AddedToken& a = added[static_cast<std::size_t>(t)];
      if (a.single_word) {
        std::size_t p = start;
        const bool space_before = start == 0 || !is_word_char(prev_char(s, p));
        std::size_t q = end;
        const bool space_after = end == s.size() || !is_word_char(next_char(s, q));
        if (!space_before || !space_after) continue;
      }
      if (a.lstrip) {
        std::size_t p = start;
        while (p > 0) {
          std::size_t e = p;
          if (!is_whitespace(prev_char(s, e))) break;
          p = e;
        }
        start = std::max(p, start_offset);
      }
      if (a.rstrip) {
        while (end < s.size()) {
          std::size_t q = end;
          if (!is_whitespace(next_char(s, q))) break;
          end = q;
        }
      }
      if (start_offset < start) {
        spans.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start), false});
        tokens.push_back(-1);
      }
      spans.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end), true});
      tokens.push_back(a.id);
      start_offset = end;
    }
    if (start_offset < s.size()) {
      spans.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(s.size()), false});
      tokens.push_back(-1);
    }
  }

  void encode(std::string_view text, Encoding& out, const EncodeOptions& options) const {
    Scratch& sc = thread_scratch();
    if (!is_valid_utf8(text)) {
      sc.text = sanitize_utf8(text);
      text = sc.text;
    }
    Pieces& pieces = sc.pieces;
    pieces.clear();
    find_added(text, raw, sc.matches, sc.match_tokens);
    for (std::size_t k = 0; k < sc.matches.size(); ++k) {
      if (sc.match_tokens[k] >= 0) {
        pieces.add_token(sc.match_tokens[k]);
        continue;
      }
      sc.norm.assign(text.substr(sc.matches[k].start, sc.matches[k].end - sc.matches[k].start));
      if (normalizer) normalizer->normalize(sc.norm, sc);
      if (normalized.empty()) {
        pieces.add_text(sc.norm);
        continue;
      }
      find_added(sc.norm, normalized, sc.matches2, sc.match_tokens2);
      for (std::size_t i = 0; i < sc.matches2.size(); ++i) {
        if (sc.match_tokens2[i] >= 0)
          pieces.add_token(sc.match_tokens2[i]);
        else
          pieces.add_text(std::string_view(sc.norm).substr(sc.matches2[i].start, sc.matches2[i].end - sc.matches2[i].start));
      }
    }
    if (pre) pre->apply(pieces, sc);
    std::vector<int32_t>& ids = out.ids;
    ids.clear();
    for (const Piece& p : sc.pieces.items) {
      if (p.id >= 0)
        ids.push_back(p.id);
      else if (p.len)
        model->tokenize(sc.pieces.text(p), ids, sc);
    }
    const std::size_t specials = options.add_special_tokens && post ? post->added() : 0;
    const std::size_t limit = options.max_length ? options.max_length : max_length;
    if (limit) {
      if (limit < specials)
        throw UsageError(str("a maximum length of ", limit, " leaves no room for the ", specials, " special tokens of the tokenizer"),
                         str("give a maximum length of at least ", specials + 1));
      const std::size_t keep = limit - specials;
      if (ids.size() > keep) {
        if (truncate_left)
          ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
        else
          ids.resize(keep);
      }
    }
    if (options.add_special_tokens && post) post->apply(ids, sc);
    out.attention_mask.assign(ids.size(), 1);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(str("no such tokenizer: ", path), kPathsHint);
  std::string file = path;
  if (S_ISDIR(st.st_mode)) {
    file = path + (path.empty() || path.back() == '/' ? "" : "/") + "tokenizer.json";
    if (::stat(file.c_str(), &st) != 0)
      throw InputError(str("the folder ", path, " holds no tokenizer.json"), "give the tokenizer.json itself, or the model folder that holds it");
  }
  return from_json(read_file(file), file);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json(std::string_view text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw InputError(str(origin, ": not JSON (", e.what(), ")"), "give a tokenizer.json of Hugging Face's format");
  }
  if (!j.is_object() || !j.contains("model"))
    throw InputError(str(origin, ": not a tokenizer.json (no \"model\")"), "give a tokenizer.json of Hugging Face's format");
  auto impl = std::make_unique<Impl>();
  const auto part = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* n = part("normalizer")) impl->normalizer = make_normalizer(*n, origin + ": normalizer");
  if (const json* p = part("pre_tokenizer")) impl->pre = make_pre_tokenizer(*p, origin + ": pre_tokenizer");
  impl->model = make_model(j["model"], origin + ": model");
  if (const json* p = part("post_processor")) impl->post = make_post_processor(*p, origin + ": post_processor");
  if (const json* t = part("truncation")) {
    const std::string where = origin + ": truncation";
    if (t->contains("max_length") && (*t)["max_length"].is_number_unsigned()) impl->max_length = (*t)["max_length"].get<std::size_t>();
    impl->truncate_left = string_field(*t, "direction", where, "Right") == "Left";
  }
  if (const json* p = part("padding")) {
    if (p->is_object() && p->contains("pad_id") && (*p)["pad_id"].is_number_integer()) impl->pad_id = (*p)["pad_id"].get<int32_t>();
  }
  if (const json* a = part("added_tokens")) {
    if (!a->is_array()) throw InputError(str(origin, ": \"added_tokens\" is not a list"));
    Scratch sc;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& e = (*a)[i];
      const std::string where = str(origin, ": added_tokens[", i, "]");
      if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || e["id"].get<int64_t>() < 0)
        throw InputError(str(where, " has no id"));
      AddedToken t;
      t.content = string_field(e, "content", where, "");
      if (t.content.empty()) throw InputError(str(where, " has no content"));
      if (!is_valid_utf8(t.content)) throw InputError(str(where, ": its content is not UTF-8"));
      t.id = e["id"].get<int32_t>();
      t.special = bool_field(e, "special", where, false);
      t.single_word = bool_field(e, "single_word", where, false);
      t.lstrip = bool_field(e, "lstrip", where, false);
      t.rstrip = bool_field(e, "rstrip", where, false);
      t.normalized = bool_field(e, "normalized", where, !t.special);
      impl->added.push_back(t);
    }
    for (std::size_t i = 0; i < impl->added.size(); ++i) {
      const AddedToken& t = impl->added[i];
      if (!t.normalized) {
        impl->raw.add(t.content, static_cast<int32_t>(i));
      } else {
        sc.norm = t.content;
        if (impl->normalizer) impl->normalizer->normalize(sc.norm, sc);
        impl->normalized.add(sc.norm, static_cast<int32_t>(i));
      }
    }
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

void Tokenizer::encode(std::string_view text, Encoding& out, const EncodeOptions& options) const { impl_->encode(text, out, options); }

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  Encoding e;
  impl_->encode(text, e, options);
  return std::move(e.ids);
}

std::optional<int32_t> Tokenizer::pad_id() const {
  if (impl_->pad_id) return impl_->pad_id;
  for (const char* t : {"[PAD]", "<pad>", "<|endoftext|>"})
    if (auto id = token_to_id(t)) return id;
  return std::nullopt;
}

std::size_t Tokenizer::truncation_length() const { return impl_->max_length; }

std::size_t Tokenizer::special_tokens_added() const { return impl_->post ? impl_->post->added() : 0; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::describe() const {
  std::string s;
  if (impl_->normalizer) s += impl_->normalizer->name() + ", ";
  if (impl_->pre) s += impl_->pre->name() + ", ";
  s += str(impl_->model->name(), " (", impl_->model->size(), " tokens");
  if (!impl_->added.empty()) s += str(", ", impl_->added.size(), " added");
  s += ")";
  if (impl_->post) s += ", " + impl_->post->name();
  return s;
}

}  // namespace sluice::text
