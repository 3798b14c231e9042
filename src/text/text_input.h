#pragma once
// A text corpus (io/text_source.cpp) as a text model's input: the reader threads read each batch's
// passages and tokenize them straight into the pinned slot, one int64 tensor [B, planes, L]
// (model/prepare.h, TokenInputs: input_ids, attention_mask, token_type_ids, position_ids in the
// order the prepared graph's input_planes name them); the driver copies it to the device in one
// piece.  Passages are truncated to L tokens (special tokens included, as Hugging Face's
// truncation=True, max_length=L does) and padded on the right with the pad id and mask 0.
//
// A record the source could not give (ill-formed, too long, missing field) is a bad row with its
// reason, fed as the empty passage so that every row holds a valid sequence; the padding rows of a
// short last batch are the empty passage too.
//
// Batches by length (--max-tokens-per-batch T, docs/text.md): the batch stays the unit of work,
// but its rows are sorted by token count (stable) and cut into pieces, each padded only to its
// bucket's length and run by that bucket's engine (TokenBuckets).  The slot then holds the pieces
// one after another, [rows, planes, L_b] each (actual rows only: a short last batch computes no
// padding rows), and BatchRows::pieces and ::order say where each row went.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/source.h"
#include "pipeline/batch_input.h"
#include "text/tokenizer.h"

namespace sluice {

// The lengths a batch cut by length is padded to, and the most rows a piece of each may have:
// lengths multiples of 16 up to 128, of 32 up to 256, then of 64, the last one L itself;
// cap_b = min(B, max(1, T / L_b)).
struct TokenBuckets {
  std::vector<int64_t> lengths, caps;   // ascending lengths
  int64_t max_tokens = 0;               // T
  bool empty() const { return lengths.empty(); }
  // The bucket of a passage of `tokens` tokens (<= L): the shortest length that holds it.
  int bucket_of(int64_t tokens) const;
  // "16x64 32x32 48x21 64x16" (length x cap), for the log and the report.
  std::string describe() const;
};
// Empty when `max_tokens` is 0 (no cutting).  UsageError for a negative T.
TokenBuckets plan_token_buckets(int64_t length, int64_t batch, int64_t max_tokens);

struct TextInputOptions {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::vector<std::string> planes;  // the prepared graph's input_planes
  int64_t length = 0;               // L: tokens a passage may have, special tokens included
  std::string prompt;               // put in front of every passage before tokenizing ("query: ")
  int32_t pad_id = 0;               // input_ids of the padding
  TokenBuckets buckets;             // --max-tokens-per-batch: cut batches by length (empty: one [B, planes, L] tensor)
};

// UsageError when a plane is none of kTokenPlanes or L leaves no room beside the special tokens.
std::unique_ptr<BatchInput> make_text_input(Source& source, int64_t batch, const TextInputOptions& options);

}  // namespace sluice
