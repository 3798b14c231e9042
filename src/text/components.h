#pragma once
// The tokenizer's parts, as tokenizer.json names them: normalizers, pre-tokenizers, models and
// post-processors, each made from its JSON object.  Internal to text/; tokenizer.h is the API.
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace sluice::text::detail {

// A piece of the passage: text (id < 0: buf[off, off + len)) or an added token, already its id.
struct Piece {
  uint32_t off = 0, len = 0;
  int32_t id = -1;
};

struct Pieces {
  std::string buf;
  std::vector<Piece> items;
  std::string_view text(const Piece& p) const { return {buf.data() + p.off, p.len}; }
  void clear() {
    buf.clear();
    items.clear();
  }
  void add_text(std::string_view s) {
    if (s.empty()) return;  // the reference drops every empty piece
    items.push_back({static_cast<uint32_t>(buf.size()), static_cast<uint32_t>(s.size()), -1});
    buf.append(s);
  }
  void add_token(int32_t id) { items.push_back({0, 0, id}); }
};

// A stretch of a piece, as a pattern sees it: a match or the text between two.
struct Seg {
  uint32_t start, end;
  bool match;
};

struct BpeSymbol {
  int32_t id;
  int32_t prev, next;
  uint32_t len;
};
struct BpeMerge {
  int32_t rank, pos, new_id;
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
Behavior behavior_of(const nlohmann::json& j, const std::string& where);
// The pieces of text (a piece of buf at `base`) that the segments make under the behaviour.
void split_by(const std::vector<Seg>& segs, uint32_t base, Behavior b, std::vector<Piece>& out);

// string_view -> int32, open addressing (no allocation to look up, unlike std::unordered_map<std::string>).
class StrMap {
 public:
  void reserve(std::size_t n);
  bool insert(std::string key, int32_t value);  // false when the key is already there
  const int32_t* find(std::string_view key) const;
  std::size_t size() const { return keys_.size(); }
  void clear();  // keeps the slots' memory

 private:
  static uint64_t hash(std::string_view s);
  void grow();
  std::vector<std::string> keys_;
  std::vector<int32_t> values_;
  std::vector<uint32_t> slots_;  // index + 1; 0: empty
};

// uint64 -> int64, open addressing.
class U64Map {
 public:
  void insert(uint64_t key, int64_t value);  // keeps the first value of a key
  const int64_t* find(uint64_t key) const;
  std::size_t size() const { return count_; }

 private:
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<int64_t> values_;
  std::vector<uint8_t> used_;
  std::size_t count_ = 0;
};

// Every buffer one encode needs; one per thread, reused, so encoding stops allocating once they grow.
struct Scratch {
  std::string norm, norm2, norm3, word;
  Pieces pieces, pieces2;
  std::vector<Piece> items;
  std::vector<Seg> segs, segs2;
  std::vector<int32_t> ids, ids2;
  std::vector<BpeSymbol> symbols;
  std::vector<BpeMerge> heap;
  std::vector<double> scores;
  std::vector<int32_t> starts, node_ids;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  std::vector<Seg> matches, matches2;  // added tokens found: start, end, and (in the match flag) whether one
  std::vector<int32_t> match_tokens, match_tokens2;
  std::string text;
  // Words already tokenized by a BPE model (`owner`: its serial number, never reused), up to a bound.
  struct WordCache {
    uint64_t owner = 0;
    StrMap words;  // -> index in spans
    std::vector<std::pair<uint32_t, uint32_t>> spans;  // offset and count in ids
    std::vector<int32_t> ids;
  } bpe_cache;
};

// Byte-level BPE's alphabet: each byte as the character that stands for it (GPT-2's map).
const std::string& byte_char(uint8_t b);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s, Scratch& sc) const = 0;  // in place
  virtual std::string name() const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(Pieces& p, Scratch& sc) const = 0;  // in place; added tokens are left alone
  virtual std::string name() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-token (not empty).
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids, Scratch& sc) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::size_t size() const = 0;
  virtual std::string name() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::size_t added() const = 0;  // special tokens added to one sequence
  virtual void apply(std::vector<int32_t>& ids, Scratch& sc) const = 0;
  virtual std::string name() const = 0;
};

// Each throws InputError naming `where` ("tokenizer.json: normalizer") and the unsupported type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
// SentencePiece's precompiled character map; null for an empty one.
std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Model> make_model(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& where);

// {"String": "x"} (the literal, no regex) or {"Regex": "x"} (the compiled expression).
std::pair<std::string, std::unique_ptr<Regex>> pattern_of(const nlohmann::json& j, const std::string& where);

// JSON helpers that say where a field is wrong.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where);
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where, const std::string& fallback);
bool bool_field(const nlohmann::json& j, const char* key, const std::string& where, bool fallback);

}  // namespace sluice::text::detail
