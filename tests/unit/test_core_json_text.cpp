// core/json_text.h: names that are not UTF-8 in JSON text, escaped reversibly.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/json_text.h"

namespace sluice {
namespace {

TEST(JsonText, ValidUtf8IsWrittenAsItIs) {
  for (const std::string s : {"", "plain.jpg", "caf\xc3\xa9.jpg", "a\\b", "\xf0\x9f\x90\x88.png", "\\x41"}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(escape_utf8(s), s);
    EXPECT_EQ(dump_json(nlohmann::json(s)), nlohmann::json(s).dump());
  }
}

TEST(JsonText, RejectsWhatRfc3629Forbids) {
  // A lone continuation byte, Latin-1, a truncated sequence, an overlong '/', a surrogate, past U+10FFFF.
  for (const std::string s : {"\x80", "caf\xe9", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    EXPECT_FALSE(is_valid_utf8(s)) << escape_utf8(s);
}

TEST(JsonText, LatinOneNameIsEscapedAndReadBack) {
  const std::string name = "caf\xe9\\x41.jpg";
  EXPECT_EQ(escape_utf8(name), "caf\\xe9\\\\x41.jpg");
  EXPECT_EQ(unescape_utf8(escape_utf8(name)), name);
  const nlohmann::json back = nlohmann::json::parse(dump_json({{"key", name}, {name, 1}}));
  EXPECT_EQ(unescape_utf8(back["key"].get<std::string>()), name);
  EXPECT_TRUE(back.contains(escape_utf8(name)));
}

TEST(JsonText, EveryByteStringGoesThroughJsonAndBack) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? '\\' : rng() % 256);
    const std::string text = dump_json(nlohmann::json(s));  // never throws
    const std::string read = nlohmann::json::parse(text).get<std::string>();
    EXPECT_EQ(is_valid_utf8(s) ? read : unescape_utf8(read), s) << text;
  }
}

}  // namespace
}  // namespace sluice
