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
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/source.h"
#include "pipeline/batch_input.h"
#include "text/tokenizer.h"

namespace sluice {

struct TextInputOptions {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::vector<std::string> planes;  // the prepared graph's input_planes
  int64_t length = 0;               // L: tokens a passage may have, special tokens included
  std::string prompt;               // put in front of every passage before tokenizing ("query: ")
  int32_t pad_id = 0;               // input_ids of the padding
};

// UsageError when a plane is none of kTokenPlanes or L leaves no room beside the special tokens.
std::unique_ptr<BatchInput> make_text_input(Source& source, int64_t batch, const TextInputOptions& options);

}  // namespace sluice
