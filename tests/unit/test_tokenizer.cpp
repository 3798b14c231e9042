// The native tokenizer (src/text/): its parts on small tokenizer.json files whose ids come from
// Hugging Face's `tokenizers` (the reference; tests/python/test_tokenize.py compares the two on
// trained tokenizers and a hostile corpus), the UTF-8 and JSON-escape handling, the regex
// translation, errors, and encoding from many threads at once.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "text/components.h"
#include "text/passages.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace sluice::text {
namespace {

using Ids = std::vector<int32_t>;

constexpr const char* kBpe = R"J({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null, "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false, "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6}, "merges": [["b", "c"], ["a", "b"], ["ab", "c"]]}})J";
constexpr const char* kWordpiece = R"J({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]}, "decoder": null, "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 5, "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "un": 3, "##aff": 4, "##able": 5, "a": 6, "##a": 7, "aff": 8}}})J";
constexpr const char* kUnigram = R"J({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}, "post_processor": null, "decoder": null, "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0.0], ["▁", -1.0], ["a", -2.0], ["b", -2.5], ["ab", -3.0], ["▁ab", -4.0]]}})J";
constexpr const char* kUnigramUnk = R"J({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}, "post_processor": null, "decoder": null, "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false, "vocab": [["<unk>", 0.0], ["▁", -1.0], ["a", -2.0], ["b", -2.5], ["ab", -3.0], ["▁ab", -4.0]]}})J";
constexpr const char* kAdded = R"J({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [{"id": 4, "content": "<m>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true}, {"id": 5, "content": "hi", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false}, {"id": 6, "content": "BYE", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false}], "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null, "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, " ": 3, "<m>": 4}}})J";

// The Unigram vocabulary with <0x00>..<0xFF> appended (score -10), byte_fallback on.
std::string unigram_with_bytes() {
  auto j = nlohmann::json::parse(kUnigram);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    j["model"]["vocab"].push_back({name, -10.0});
  }
  j["model"]["byte_fallback"] = true;
  return j.dump();
}

std::vector<Ids> encode_all(const Tokenizer& t, const std::vector<std::string>& texts) {
  std::vector<Ids> out;
  for (const auto& s : texts) out.push_back(t.encode(s));
  return out;
}

TEST(Tokenizer, BpeMergesByRankWithFusedUnk) {
  auto t = Tokenizer::from_json(kBpe);
  EXPECT_EQ(encode_all(*t, {"abc", "ab abc", "aabcc", "xyz abx", "abab"}),
            (std::vector<Ids>{{1, 5}, {4, 1, 5}, {1, 1, 5, 3}, {0, 4, 0}, {4, 4}}));
}

TEST(Tokenizer, WordPieceWithBertNormalizerAndMaxChars) {
  auto t = Tokenizer::from_json(kWordpiece);
  EXPECT_EQ(encode_all(*t, {"Unaffable", "UNÄFFABLE aaaaa aaaaaa", "un,aff", "", std::string("x\0a\xCC\x81", 5)}),
            (std::vector<Ids>{{1, 0, 2}, {1, 0, 6, 7, 7, 7, 7, 0, 2}, {1, 3, 0, 8, 2}, {1, 2}, {1, 0, 2}}));
  EXPECT_EQ(t->special_tokens_added(), 2u);
}

TEST(Tokenizer, UnigramViterbiByteFallbackAndUnk) {
  auto t = Tokenizer::from_json(unigram_with_bytes());
  EXPECT_EQ(encode_all(*t, {"ab", "abab ba", "a\xC3\xA9", "xyz"}),
            (std::vector<Ids>{{5}, {5, 4, 1, 3, 2}, {1, 2, 201, 175}, {1, 126, 127, 128}}));
  auto u = Tokenizer::from_json(kUnigramUnk);  // no byte tokens: unknown characters fused into one unk
  EXPECT_EQ(encode_all(*u, {"a\xC3\xA9", "xyz ab", "xyzab"}), (std::vector<Ids>{{1, 2, 0}, {1, 0, 5}, {1, 0, 4}}));
}

TEST(Tokenizer, AddedTokensBeforeAndAfterNormalization) {
  auto t = Tokenizer::from_json(kAdded);
  EXPECT_EQ(encode_all(*t, {"hello <m> world", "hello<m>world", "hi there", "hithere", "say hi", "bye BYE", "hello   <m>   "}),
            (std::vector<Ids>{{1, 4, 2}, {1, 4, 2}, {5, 0}, {0}, {0, 5}, {6, 6}, {1, 4}}));
  EXPECT_EQ(t->token_to_id("<m>"), 4);
  EXPECT_EQ(t->token_to_id("world"), 2);
  EXPECT_FALSE(t->token_to_id("nope").has_value());
}

TEST(Tokenizer, TruncationKeepsRoomForSpecialTokens) {
  auto t = Tokenizer::from_json(kWordpiece);
  EncodeOptions o;
  o.max_length = 4;
  Encoding e;
  t->encode("a a a a a a", e, o);
  EXPECT_EQ(e.ids, (Ids{1, 6, 6, 2}));
  EXPECT_EQ(e.attention_mask, (std::vector<uint8_t>{1, 1, 1, 1}));
  o.add_special_tokens = false;
  t->encode("a a a a a a", e, o);
  EXPECT_EQ(e.ids, (Ids{6, 6, 6, 6}));
  o.add_special_tokens = true;
  o.max_length = 1;
  EXPECT_THROW(t->encode("a", e, o), UsageError);
}

TEST(Tokenizer, EncodesFromManyThreadsAtOnce) {
  auto t = Tokenizer::from_json(unigram_with_bytes());
  const std::vector<std::string> texts = {"ab", "abab ba", "a\xC3\xA9", "xyz", "", "b a b a b a b a"};
  const auto expected = encode_all(*t, texts);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      Encoding e;
      for (int round = 0; round < 500; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i) {
          t->encode(texts[i], e);
          if (e.ids != expected[i]) ++failures[k];
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, (std::vector<int>{0, 0, 0, 0}));
}

TEST(Tokenizer, RefusesWhatItDoesNotSupportByName) {
  auto j = nlohmann::json::parse(kBpe);
  j["normalizer"] = {{"type", "NFKC_Casefold"}};
  try {
    Tokenizer::from_json(j.dump(), "t.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: normalizer: the normalizer type \"NFKC_Casefold\" is not supported"), std::string::npos)
        << e.what();
  }
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};  // 3 bytes: no room for a trie
  EXPECT_THROW(Tokenizer::from_json(j.dump()), InputError);
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "EAAAAAAAAAAA"}};  // a 16-byte trie in 9 bytes
  EXPECT_THROW(Tokenizer::from_json(j.dump()), InputError);
  j = nlohmann::json::parse(kBpe);
  j["model"]["merges"].push_back({"a", "zz"});
  EXPECT_THROW(Tokenizer::from_json(j.dump()), InputError);
  EXPECT_THROW(Tokenizer::from_json("{\"model\": 5"), InputError);
  EXPECT_THROW(Tokenizer::from_json("[]"), InputError);
}

TEST(TokenizerUnicode, ByteLevelAlphabet) {
  EXPECT_EQ(detail::byte_char(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(detail::byte_char('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(detail::byte_char(0), "\xC4\x80");     // Ā
  EXPECT_EQ(detail::byte_char(0xAD), "\xC5\x83");  // Ń
  EXPECT_EQ(detail::byte_char('a'), "a");
  EXPECT_EQ(detail::byte_char(0xFF), "\xC3\xBF");  // ÿ
}

TEST(TokenizerUnicode, IllFormedUtf8BecomesOneReplacementPerMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80x"), r + r + r + "x");  // a surrogate: three subparts
  EXPECT_EQ(sanitize_utf8("ok \xE2\x82 !"), "ok " + r + " !");
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), r);
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), r + r);  // overlong
  EXPECT_EQ(sanitize_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));
}

TEST(TokenizerUnicode, LoneSurrogateEscapesReadAsReplacement) {
  std::string s = R"({"t": "\ud800 \\ud800 \ud83d\ude00 \udc00 \ud83dx"})";
  replace_lone_surrogate_escapes(s);
  EXPECT_EQ(s, R"({"t": "\uFFFD \\ud800 \ud83d\ude00 \uFFFD \uFFFDx"})");
  EXPECT_EQ(nlohmann::json::parse(s)["t"].get<std::string>(), "\xEF\xBF\xBD \\ud800 \xF0\x9F\x98\x80 \xEF\xBF\xBD \xEF\xBF\xBDx");
}

TEST(TokenizerUnicode, PropertiesOfTheReferenceVersions) {
  EXPECT_TRUE(is_whitespace(0x85));
  EXPECT_FALSE(is_whitespace(0x180E));
  EXPECT_FALSE(is_whitespace(0x1C));
  EXPECT_TRUE(is_bert_punctuation('$'));
  EXPECT_TRUE(is_bert_punctuation(0x2E3C));   // Unicode 7.0
  EXPECT_FALSE(is_bert_punctuation(0x2E43));  // Unicode 9.0: not in 8.0's tables
  EXPECT_TRUE(is_bert_control(0x00AD));
  EXPECT_FALSE(is_bert_control('\t'));
  EXPECT_FALSE(is_bert_control(0x0378));  // unassigned stays
  EXPECT_TRUE(is_chinese_char(0x2B920));
  EXPECT_FALSE(is_chinese_char(0x2B820));
  std::string out;
  normalize(NormalForm::NFKC, "\xEF\xAC\x81 \xF0\x9F\x88\xBB \xF0\x9F\xAF\xB1", out);  // ﬁ, U+1F23B (9.0), U+1FBF1 (13.0)
  EXPECT_EQ(out, "fi \xE9\x85\x8D \xF0\x9F\xAF\xB1");
  out.clear();
  append_lowercase(out, 0x130);
  EXPECT_EQ(out, "i\xCC\x87");
  out.clear();
  append_lowercase(out, 0x3A3);  // Σ alone: σ, never the final ς
  EXPECT_EQ(out, "\xCF\x83");
}

TEST(TokenizerRegex, OnigurumaClassesSpelledForPcre2) {
  EXPECT_EQ(pcre2_pattern_of(R"(\s+)"), R"([\p{White_Space}]+)");
  EXPECT_EQ(pcre2_pattern_of(R"([^\s\p{L}])"), R"([^\p{White_Space}\p{L}])");
  EXPECT_EQ(pcre2_pattern_of(R"(\h)"), "[0-9A-Fa-f]");
  EXPECT_EQ(pcre2_pattern_of(R"(\\s)"), R"(\\s)");
  Regex word(R"(\w+)", "test");
  std::vector<std::pair<std::size_t, std::size_t>> m;
  word.for_each_match("a\xCC\x81" "b \xE2\x93\x90x", [&](std::size_t s, std::size_t e) { m.emplace_back(s, e); });
  EXPECT_EQ(m, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 4}, {5, 9}}));  // marks and Ⓐ-like letters are \w
  m.clear();
  Regex empty("x*", "test");
  empty.for_each_match("axx", [&](std::size_t s, std::size_t e) { m.emplace_back(s, e); });
  EXPECT_EQ(m, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 0}, {1, 3}, {3, 3}}));
  EXPECT_THROW(Regex("(unclosed", "test"), InputError);
}

}  // namespace
}  // namespace sluice::text
