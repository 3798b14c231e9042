// `sluice tokenize --tokenizer PATH --input FILE [--text-field F] [--max-length N]`: the token ids
// of every passage of FILE, one JSON array a line, in input order (docs/text.md).
#include <CLI/CLI.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.h"
#include "core/error.h"
#include "text/passages.h"
#include "text/tokenizer.h"

namespace sluice {

namespace {

struct TokenizeOptions {
  std::string tokenizer, input, text_field = "text", format = "auto";
  std::size_t max_length = 0;
  bool no_special = false, timing = false;
};

void tokenize_command(const TokenizeOptions& o) {
  const auto tok = text::Tokenizer::load(o.tokenizer);
  const text::PassageFormat format = o.format == "jsonl"  ? text::PassageFormat::Jsonl
                                     : o.format == "text" ? text::PassageFormat::Text
                                                          : text::PassageFormat::Auto;
  text::EncodeOptions eo;
  eo.max_length = o.max_length;
  eo.add_special_tokens = !o.no_special;
  if (eo.max_length && eo.add_special_tokens && eo.max_length < tok->special_tokens_added())
    throw UsageError(str("--max-length ", eo.max_length, " leaves no room for the ", tok->special_tokens_added(),
                         " special tokens the tokenizer adds"),
                     str("give --max-length ", tok->special_tokens_added() + 1, " or more, or --no-special-tokens"));
  text::PassageReader reader(o.input, format, o.text_field);
  std::string passage, line;
  text::Encoding enc;
  std::size_t passages = 0, tokens = 0;
  double encode_s = 0;
  std::vector<char> out;
  out.reserve(1 << 20);
  const auto flush = [&] {
    if (!out.empty() && std::fwrite(out.data(), 1, out.size(), stdout) != out.size())
      throw Error("tokenize: cannot write the ids to the standard output");
    out.clear();
  };
  while (reader.next(passage)) {
    const auto t0 = std::chrono::steady_clock::now();
    tok->encode(passage, enc, eo);
    encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++passages;
    tokens += enc.ids.size();
    out.push_back('[');
    for (std::size_t i = 0; i < enc.ids.size(); ++i) {
      if (i) out.push_back(',');
      char num[16];
      const auto r = std::to_chars(num, num + sizeof num, enc.ids[i]);
      out.insert(out.end(), num, r.ptr);
    }
    out.push_back(']');
    out.push_back('\n');
    if (out.size() > (1 << 20)) flush();
  }
  flush();
  std::fflush(stdout);
  if (o.timing)
    std::fprintf(stderr, "tokenize: %s\ntokenize: %zu passages, %zu tokens; encoding took %.3f s: %.0f passages/s, %.0f tokens/s (one thread)\n",
                 tok->describe().c_str(), passages, tokens, encode_s, encode_s > 0 ? passages / encode_s : 0.0, encode_s > 0 ? tokens / encode_s : 0.0);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of each passage of a file, one JSON array a line, with a "
                                                 "tokenizer.json (Hugging Face's format)");
  sub->add_option("--tokenizer", o->tokenizer, "a tokenizer.json, or a model folder holding one")->required();
  sub->add_option("--input", o->input, "JSONL (.jsonl, .ndjson, .json: one object a line) or plain text (one passage a line)")->required();
  sub->add_option("--text-field", o->text_field, "the JSONL field that holds the passage")->default_str("text");
  sub->add_option("--max-length", o->max_length, "truncate each passage to N ids, special tokens included (0: the tokenizer's own)");
  sub->add_option("--format", o->format, "auto (by the file's extension), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))
      ->default_str("auto");
  sub->add_flag("--no-special-tokens", o->no_special, "leave out the post-processor's special tokens ([CLS], </s>, ...)");
  sub->add_flag("--timing", o->timing, "print the passages and tokens per second of encoding to the standard error");
  sub->callback([o] { tokenize_command(*o); });
}

}  // namespace sluice
