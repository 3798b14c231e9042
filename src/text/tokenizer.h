#pragma once
// Tokenizers from tokenizer.json (Hugging Face's format), natively: text in, token ids out, with
// the ids that Hugging Face's `tokenizers` gives (docs/text.md says what is supported and where the
// two may still differ).
//
//   auto tok = text::Tokenizer::load("models/bert");     // a tokenizer.json, or a folder with one
//   text::Encoding enc;
//   tok->encode("Hello world", enc);                     // enc.ids, enc.attention_mask
//
// A Tokenizer is immutable once loaded: encode() may be called from many threads at once.  Each
// thread keeps its own scratch buffers (and the Encoding it passes in), so encoding allocates
// nothing once those have grown; regular expressions are compiled once, at load.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::text {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<uint8_t> attention_mask;  // 1 for every id: the output is never padded
};

struct EncodeOptions {
  // The most ids of a passage, special tokens included; 0: tokenizer.json's own truncation, if any.
  std::size_t max_length = 0;
  bool add_special_tokens = true;  // the post-processor's ([CLS] ... [SEP], <s> ... </s>)
};

class Tokenizer {
 public:
  // A tokenizer.json, or a folder that holds one.  Throws InputError (exit 3) for a file that is not
  // one, or that uses what is not supported, saying which.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  // From the text of a tokenizer.json; `origin` names it in errors.
  static std::shared_ptr<const Tokenizer> from_json(std::string_view json, const std::string& origin = "tokenizer.json");

  ~Tokenizer();

  // The ids of one passage (UTF-8; ill-formed sequences read as U+FFFD).  Thread-safe.  Throws
  // UsageError when max_length leaves no room beside the special tokens.
  void encode(std::string_view text, Encoding& out, const EncodeOptions& options = {}) const;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // The number of special tokens the post-processor adds to one passage.
  std::size_t special_tokens_added() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The id padding takes: tokenizer.json's padding section, else the id of [PAD], <pad> or
  // <|endoftext|>; none when the tokenizer has neither.
  std::optional<int32_t> pad_id() const;
  // tokenizer.json's truncation max_length (0: none).
  std::size_t truncation_length() const;
  // "BertNormalizer, BertPreTokenizer, WordPiece (30522 tokens), TemplateProcessing"
  std::string describe() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::text
