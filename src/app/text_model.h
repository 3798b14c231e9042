#pragma once
// A text job's model folder: what sentence-transformers writes beside an encoder, read as job
// options, for those neither the command line nor the job file set.
//  - modules.json: the Pooling module's folder (its config.json: pooling_mode, or the older
//    pooling_mode_*_tokens flags; include_prompt) and whether a Normalize module follows;
//  - sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length
//    (sentence-transformers 5 and later keep it there), capped by config.json's
//    max_position_embeddings;
//  - config_sentence_transformers.json's prompts and default_prompt_name (--prompt-name picks one);
//  - the tokenizer.json (--tokenizer's default) and config.json's pad_token_id.
// The folder is the model file's, or the one above it when the model lies in an onnx/ folder (the
// layout sentence-transformers' ONNX backend writes).  Without such files: mean pooling, the
// options' defaults.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/job.h"

namespace sluice {

struct TextModelFrom {
  std::string folder;  // where the files were found ("" : none)
  // The job options it set, as {option name, value as text}, and the files read.
  std::vector<std::pair<std::string, std::string>> chosen;
  std::vector<std::string> files;
  std::vector<std::string> warnings;   // what sentence-transformers would do that Sluice does not
  std::optional<int32_t> pad_token_id;  // config.json's
};

// For a job whose input is text: fills job.tokenizer, max_length, pooling, normalize and prompt
// from the model's folder, except those named in `given` (long option names).  UsageError (exit 2)
// for a file it cannot read or a setting it cannot honour, saying what to pass instead.
TextModelFrom apply_text_model(JobConfig& job, const std::vector<std::string>& given);

// "pooling mean, normalized, 64 tokens, no prompt" for the set-up line.
std::string text_model_summary(const JobConfig& job, const TextModelFrom& t);

// Whether the job's input is a text corpus (by --input-kind, or the path's extension).
bool text_input_job(const JobConfig& job);

}  // namespace sluice
