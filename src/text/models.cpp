// Models: WordPiece, BPE (byte-level or not, merges by rank, byte fallback), Unigram (Viterbi,
// byte fallback, unk), WordLevel.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "text/components.h"
#include "text/unicode.h"

namespace sluice::text::detail {

using nlohmann::json;

namespace {

uint64_t next_serial() {
  static std::atomic<uint64_t> serial{0};
  return ++serial;
}

// A vocabulary {"token": id, ...}.
void read_vocab(const json& v, const std::string& where, StrMap& map, std::size_t& size) {
  if (!v.is_object()) throw InputError(str(where, ": \"vocab\" is not an object of token: id"));
  map.reserve(v.size());
  size = 0;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      throw InputError(str(where, ": the id of \"", it.key(), "\" is not an id"));
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    map.insert(it.key(), id);
    size = std::max<std::size_t>(size, static_cast<std::size_t>(id) + 1);
  }
}

int32_t unk_id_of(const StrMap& vocab, const std::string& unk, const std::string& where) {
  if (unk.empty()) return -1;
  const int32_t* id = vocab.find(unk);
  if (!id) throw InputError(str(where, ": the unk token \"", unk, "\" is not in the vocabulary"));
  return *id;
}

// The ids of <0x00> ... <0xFF> (-1 where absent).
std::array<int32_t, 256> byte_tokens(const StrMap& vocab) {
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const int32_t* id = vocab.find(name);
    ids[b] = id ? *id : -1;
  }
  return ids;
}

// Appends the byte tokens of s; false (nothing appended) when one is missing.
bool append_bytes(const std::array<int32_t, 256>& bytes, std::string_view s, std::vector<int32_t>& ids) {
  for (char ch : s)
    if (bytes[static_cast<uint8_t>(ch)] < 0) return false;
  for (char ch : s) ids.push_back(bytes[static_cast<uint8_t>(ch)]);
  return true;
}

class WordPiece : public Model {
 public:
  WordPiece(const json& j, const std::string& where) {
    read_vocab(field(j, "vocab", where), where, vocab_, size_);
    unk_ = unk_id_of(vocab_, string_field(j, "unk_token", where, "[UNK]"), where);
    prefix_ = string_field(j, "continuing_subword_prefix", where, "##");
    if (j.contains("max_input_chars_per_word") && j["max_input_chars_per_word"].is_number_unsigned())
      max_chars_ = j["max_input_chars_per_word"].get<std::size_t>();
  }
  void tokenize(std::string_view w, std::vector<int32_t>& ids, Scratch& sc) const override {
    std::size_t chars = 0;
    for (std::size_t i = 0; i < w.size() && chars <= max_chars_; i += char_length(static_cast<unsigned char>(w[i]))) ++chars;
    if (chars > max_chars_) {
      push_unk(ids);
      return;
    }
    const std::size_t mark = ids.size();
    std::size_t start = 0;
    while (start < w.size()) {
      std::size_t end = w.size();
      const int32_t* found = nullptr;
      while (start < end) {
        std::string_view sub = w.substr(start, end - start);
        if (start > 0) {
          sc.word.assign(prefix_);
          sc.word.append(sub);
          sub = sc.word;
        }
        found = vocab_.find(sub);
        if (found) break;
        prev_char(w, end);
      }
      if (!found) {  // a word with a piece out of the vocabulary is one unk
        ids.resize(mark);
        push_unk(ids);
        return;
      }
      ids.push_back(*found);
      start = end;
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override {
    const int32_t* id = vocab_.find(t);
    return id ? std::optional<int32_t>(*id) : std::nullopt;
  }
  std::size_t size() const override { return size_; }
  std::string name() const override { return "WordPiece"; }

 private:
  void push_unk(std::vector<int32_t>& ids) const {
    if (unk_ < 0) throw Error("WordPiece: a word is out of the vocabulary and the tokenizer has no unk token");
    ids.push_back(unk_);
  }
  StrMap vocab_;
  std::size_t size_ = 0;
  int32_t unk_ = -1;
  std::string prefix_;
  std::size_t max_chars_ = 100;
};

class WordLevel : public Model {
 public:
  WordLevel(const json& j, const std::string& where) {
    read_vocab(field(j, "vocab", where), where, vocab_, size_);
    unk_ = unk_id_of(vocab_, string_field(j, "unk_token", where, ""), where);
  }
  void tokenize(std::string_view w, std::vector<int32_t>& ids, Scratch&) const override {
    const int32_t* id = vocab_.find(w);
    if (id) {
      ids.push_back(*id);
    } else {
      if (unk_ < 0) throw Error("WordLevel: a word is out of the vocabulary and the tokenizer has no unk token");
      ids.push_back(unk_);
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override {
    const int32_t* id = vocab_.find(t);
    return id ? std::optional<int32_t>(*id) : std::nullopt;
  }
  std::size_t size() const override { return size_; }
  std::string name() const override { return "WordLevel"; }

 private:
  StrMap vocab_;
  std::size_t size_ = 0;
  int32_t unk_ = -1;
};

class Bpe : public Model {
 public:
  Bpe(const json& j, const std::string& where) {
    read_vocab(field(j, "vocab", where), where, vocab_, size_);
    unk_ = unk_id_of(vocab_, string_field(j, "unk_token", where, ""), where);
    prefix_ = string_field(j, "continuing_subword_prefix", where, "");
    suffix_ = string_field(j, "end_of_word_suffix", where, "");
    fuse_unk_ = bool_field(j, "fuse_unk", where, false);
    byte_fallback_ = bool_field(j, "byte_fallback", where, false);
    ignore_merges_ = bool_field(j, "ignore_merges", where, false);
    if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() > 0)
      throw InputError(str(where, ": BPE dropout is random, and Sluice tokenizes the same way every time"),
                       "set \"dropout\" to null in tokenizer.json (dropout is for training)");
    bytes_ = byte_tokens(vocab_);
    const json& merges = field(j, "merges", where);
    if (!merges.is_array()) throw InputError(str(where, ": \"merges\" is not a list"));
    std::string a, b;
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      if (m.is_string()) {  // "a b"
        const std::string s = m.get<std::string>();
        const std::size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          throw InputError(str(where, ": merge ", rank, " \"", s, "\" is not two tokens separated by a space"));
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        throw InputError(str(where, ": merge ", rank, " is ", m.dump(), ", neither \"a b\" nor [\"a\", \"b\"]"));
      }
      const int32_t* ia = vocab_.find(a);
      const int32_t* ib = vocab_.find(b);
      if (!ia || !ib) throw InputError(str(where, ": merge ", rank, " names \"", ia ? b : a, "\", which is not in the vocabulary"));
      std::string merged = a + (prefix_.size() <= b.size() ? b.substr(prefix_.size()) : std::string());
      const int32_t* im = vocab_.find(merged);
      if (!im) throw InputError(str(where, ": merge ", rank, " makes \"", merged, "\", which is not in the vocabulary"));
      merges_.insert(key(*ia, *ib), (static_cast<int64_t>(rank) << 32) | static_cast<uint32_t>(*im));
    }
  }

  static constexpr std::size_t kWordCacheSize = 20000, kCachedWordBytes = 64;

  void tokenize(std::string_view w, std::vector<int32_t>& ids, Scratch& sc) const override {
    Scratch::WordCache& cache = sc.bpe_cache;
    if (cache.owner != serial_ || cache.spans.size() >= kWordCacheSize) {
      cache.owner = serial_;
      cache.words.clear();
      cache.spans.clear();
      cache.ids.clear();
    }
    const bool cacheable = w.size() <= kCachedWordBytes;
    if (cacheable) {
      if (const int32_t* at = cache.words.find(w)) {
        const auto [off, n] = cache.spans[static_cast<std::size_t>(*at)];
        ids.insert(ids.end(), cache.ids.begin() + off, cache.ids.begin() + off + n);
        return;
      }
    }
    const std::size_t first = ids.size();
    merge_word(w, ids, sc);
    if (cacheable) {
      cache.words.insert(std::string(w), static_cast<int32_t>(cache.spans.size()));
      cache.spans.emplace_back(static_cast<uint32_t>(cache.ids.size()), static_cast<uint32_t>(ids.size() - first));
      cache.ids.insert(cache.ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end());
    }
  }

  void merge_word(std::string_view w, std::vector<int32_t>& ids, Scratch& sc) const {
    if (ignore_merges_) {
      if (const int32_t* id = vocab_.find(w)) {
        ids.push_back(*id);
        return;
      }
    }
    auto& sym = sc.symbols;
    sym.clear();
    bool last_unk = false;
    for (std::size_t i = 0; i < w.size();) {
      const std::size_t n = char_length(static_cast<unsigned char>(w[i]));
      const bool first = i == 0, last = i + n == w.size();
      std::string_view piece = w.substr(i, n);
      if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
        sc.word.clear();
        if (!first) sc.word += prefix_;
        sc.word.append(piece);
        if (last) sc.word += suffix_;
        piece = sc.word;
      }
      if (const int32_t* id = vocab_.find(piece)) {
        sym.push_back({*id, -1, -1, static_cast<uint32_t>(n)});
        last_unk = false;
      } else if (byte_fallback_ && std::all_of(w.begin() + static_cast<std::ptrdiff_t>(i), w.begin() + static_cast<std::ptrdiff_t>(i + n),
                                               [&](char ch) { return bytes_[static_cast<uint8_t>(ch)] >= 0; })) {
        for (std::size_t k = i; k < i + n; ++k) sym.push_back({bytes_[static_cast<uint8_t>(w[k])], -1, -1, 1});
        last_unk = false;
      } else if (unk_ >= 0) {
        if (fuse_unk_ && last_unk) {
          sym.back().len += static_cast<uint32_t>(n);
        } else {
          sym.push_back({unk_, -1, -1, static_cast<uint32_t>(n)});
        }
        last_unk = true;
      }  // no unk token: the character is dropped, as the reference does
      i += n;
    }
    const auto count = static_cast<int32_t>(sym.size());
    for (int32_t k = 0; k < count; ++k) {
      sym[k].prev = k - 1;
      sym[k].next = k + 1 < count ? k + 1 : -1;
    }
    // Merge the pair of the lowest rank, the leftmost of equal ranks, until none is left.
    auto& heap = sc.heap;
    heap.clear();
    const auto later = [](const BpeMerge& x, const BpeMerge& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
    const auto push = [&](int32_t pos) {
      const int32_t next = sym[pos].next;
      if (next < 0) return;
      if (const int64_t* m = merges_.find(key(sym[pos].id, sym[next].id))) {
        heap.push_back({static_cast<int32_t>(*m >> 32), pos, static_cast<int32_t>(*m & 0xFFFFFFFF)});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    };
    for (int32_t k = 0; k + 1 < count; ++k) push(k);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const BpeMerge top = heap.back();
      heap.pop_back();
      BpeSymbol& left = sym[top.pos];
      if (left.len == 0 || left.next < 0) continue;
      BpeSymbol& right = sym[left.next];
      const int64_t* m = merges_.find(key(left.id, right.id));
      if (!m || static_cast<int32_t>(*m & 0xFFFFFFFF) != top.new_id) continue;  // stale: a neighbour merged first
      left.id = top.new_id;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) sym[right.next].prev = top.pos;
      if (left.prev >= 0) push(left.prev);
      push(top.pos);
    }
    for (const BpeSymbol& s : sym)
      if (s.len) ids.push_back(s.id);
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override {
    const int32_t* id = vocab_.find(t);
    return id ? std::optional<int32_t>(*id) : std::nullopt;
  }
  std::size_t size() const override { return size_; }
  std::string name() const override { return "BPE"; }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  StrMap vocab_;
  std::size_t size_ = 0;
  U64Map merges_;
  int32_t unk_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> bytes_{};
  const uint64_t serial_ = next_serial();
};

class Unigram : public Model {
 public:
  Unigram(const json& j, const std::string& where) {
    const json& v = field(j, "vocab", where);
    if (!v.is_array()) throw InputError(str(where, ": \"vocab\" is not a list of [piece, score]"));
    vocab_.reserve(v.size());
    scores_.reserve(v.size());
    double min_score = std::numeric_limits<double>::infinity();
    nodes_.push_back({-1});
    for (std::size_t i = 0; i < v.size(); ++i) {
      const json& e = v[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        throw InputError(str(where, ": vocab entry ", i, " is ", e.dump().substr(0, 80), ", not [piece, score]"));
      const std::string piece = e[0].get<std::string>();
      const double score = e[1].get<double>();
      vocab_.insert(piece, static_cast<int32_t>(i));
      scores_.push_back(score);
      min_score = std::min(min_score, score);
      // The trie of the pieces' bytes.
      int32_t node = 0;
      for (char ch : piece) {
        const uint64_t k = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
        if (const int64_t* child = trie_.find(k)) {
          node = static_cast<int32_t>(*child);
        } else {
          nodes_.push_back({-1});
          trie_.insert(k, static_cast<int64_t>(nodes_.size() - 1));
          node = static_cast<int32_t>(nodes_.size() - 1);
        }
      }
      if (!piece.empty() && nodes_[node].id < 0) nodes_[node].id = static_cast<int32_t>(i);
    }
    unk_score_ = min_score - 10.0;  // SentencePiece's penalty for an unknown character
    if (j.contains("unk_id") && j["unk_id"].is_number_integer()) {
      unk_ = j["unk_id"].get<int32_t>();
      if (unk_ < 0 || static_cast<std::size_t>(unk_) >= v.size()) throw InputError(str(where, ": unk_id ", unk_, " is not in the vocabulary"));
    }
    byte_fallback_ = bool_field(j, "byte_fallback", where, false);
    bytes_ = byte_tokens(vocab_);
  }

  void tokenize(std::string_view w, std::vector<int32_t>& ids, Scratch& sc) const override {
    const std::size_t n = w.size();
    auto& best = sc.scores;
    auto& from = sc.starts;
    auto& node_id = sc.node_ids;
    best.assign(n + 1, 0.0);
    from.assign(n + 1, -1);
    node_id.assign(n + 1, -1);
    const auto offer = [&](std::size_t end, std::size_t start, double score, int32_t id) {
      // The first candidate, or a strictly better one (ties keep the earlier).
      if (from[end] < 0 || score > best[end]) {
        best[end] = score;
        from[end] = static_cast<int32_t>(start);
        node_id[end] = id;
      }
    };
    for (std::size_t start = 0; start < n;) {
      const std::size_t clen = char_length(static_cast<unsigned char>(w[start]));
      const double here = best[start];
      bool single = false;
      int32_t node = 0;
      for (std::size_t k = start; k < n; ++k) {
        const int64_t* child = trie_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(w[k]));
        if (!child) break;
        node = static_cast<int32_t>(*child);
        const int32_t id = nodes_[node].id;
        if (id < 0) continue;
        offer(k + 1, start, here + scores_[id], id);
        if (k + 1 - start == clen) single = true;
      }
      if (!single) {
        if (unk_ < 0) throw Error("Unigram: a character is out of the vocabulary and the tokenizer has no unk_id");
        offer(start + clen, start, here + unk_score_, unk_);
      }
      start += clen;
    }
    // Back from the end, unknown pieces next to each other fused into one.
    auto& spans = sc.spans;
    spans.clear();
    std::size_t end = n;
    bool in_unk = false;
    while (end > 0) {
      const auto start = static_cast<std::size_t>(from[end]);
      const bool unk = node_id[end] == unk_;
      if (unk && in_unk) {
        spans.back().first = static_cast<uint32_t>(start);
      } else {
        spans.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end)});
      }
      in_unk = unk;
      end = start;
    }
    for (std::size_t k = spans.size(); k-- > 0;) {
      const std::string_view piece = w.substr(spans[k].first, spans[k].second - spans[k].first);
      if (const int32_t* id = vocab_.find(piece)) {
        ids.push_back(*id);
      } else if (!(byte_fallback_ && append_bytes(bytes_, piece, ids))) {
        ids.push_back(unk_);
      }
    }
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override {
    const int32_t* id = vocab_.find(t);
    return id ? std::optional<int32_t>(*id) : std::nullopt;
  }
  std::size_t size() const override { return scores_.size(); }
  std::string name() const override { return "Unigram"; }

 private:
  struct Node {
    int32_t id;
  };
  StrMap vocab_;
  std::vector<double> scores_;
  std::vector<Node> nodes_;
  U64Map trie_;  // (node << 8 | byte) -> child
  double unk_score_ = 0;
  int32_t unk_ = -1;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> bytes_{};
};

}  // namespace

std::unique_ptr<Model> make_model(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(str(where, " is not an object"));
  std::string type = string_field(j, "type", where, "");
  if (type.empty()) {  // older files name no type: tell by the fields
    if (j.contains("merges"))
      type = "BPE";
    else if (j.contains("vocab") && j["vocab"].is_array())
      type = "Unigram";
    else if (j.contains("max_input_chars_per_word") || j.contains("continuing_subword_prefix"))
      type = "WordPiece";
    else
      type = "WordLevel";
  }
  const std::string at = str(where, " ", type);
  if (type == "WordPiece") return std::make_unique<WordPiece>(j, at);
  if (type == "BPE") return std::make_unique<Bpe>(j, at);
  if (type == "Unigram") return std::make_unique<Unigram>(j, at);
  if (type == "WordLevel") return std::make_unique<WordLevel>(j, at);
  throw InputError(str(where, ": the model type \"", type, "\" is not supported"), "supported: WordPiece, BPE, Unigram, WordLevel");
}

}  // namespace sluice::text::detail
