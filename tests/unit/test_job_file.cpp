// The job-file reader (app/job_file.h): the TOML subset it accepts, what it refuses and where it
// says the problem is; typed values through apply_job_file.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <fstream>

#include "app/job_file.h"
#include "app/job_options.h"
#include "core/error.h"

using namespace sluice;

namespace {

using Kind = JobScalar::Kind;

// The UsageError text of parsing `text`, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_job_text(text, "t.toml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// The UsageError text of applying `text` to the options of sluice run, or "".
std::string apply_error(const std::string& text, JobConfig* out = nullptr) {
  JobConfig job;
  CLI::App app{"test"};
  CLI::App* run = app.add_subcommand("run");
  add_job_options(*run, job);
  app.parse(std::vector<std::string>{"run"});
  try {
    apply_job_text(*run, text, "t.toml");
  } catch (const UsageError& e) {
    return e.what();
  }
  if (out) *out = job;
  return "";
}

}  // namespace

TEST(JobFile, ReadsStringsNumbersBooleansAndArrays) {
  const auto e = parse_job_text(
      "\xEF\xBB\xBF# header\n"
      "a = \"q\\\"\\\\ \\t\\u00e9\\U0001F600\"  # comment\r\n"
      "b = 'C:\\path'\n"
      "c = -1_000\n"
      "d = 0x2A\n"
      "e = 6.5e-1\n"
      "f = -inf\n"
      "g = true\n"
      "h = [\n  1,  # one\n  2.5,\n]\n"
      "i = []\n",
      "t.toml");
  ASSERT_EQ(e.size(), 9u);
  EXPECT_EQ(e[0].key, "a");
  EXPECT_EQ(e[0].values[0].text, "q\"\\ \t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(e[1].values[0].text, "C:\\path");
  EXPECT_EQ(e[2].values[0].kind, Kind::Integer);
  EXPECT_EQ(e[2].values[0].text, "-1000");
  EXPECT_EQ(e[3].values[0].text, "42");
  EXPECT_EQ(e[4].values[0].kind, Kind::Float);
  EXPECT_EQ(e[4].values[0].text, "6.5e-1");
  EXPECT_EQ(e[5].values[0].text, "-inf");
  EXPECT_EQ(e[6].values[0].kind, Kind::Bool);
  EXPECT_TRUE(e[7].is_array);
  ASSERT_EQ(e[7].values.size(), 2u);
  EXPECT_EQ(e[7].values[1].text, "2.5");
  EXPECT_EQ(e[7].values[1].line, 11);
  EXPECT_EQ(e[7].values[1].column, 3);
  EXPECT_TRUE(e[8].is_array);
  EXPECT_TRUE(e[8].values.empty());
}

TEST(JobFile, RefusesWhatJobFilesDoNotUseWithLineAndColumn) {
  const std::pair<const char*, const char*> cases[] = {
      {"[run]\n", "line 1, column 1: tables"},
      {"a = 1\n[[x]]\n", "line 2, column 1: tables"},
      {"a = [1, [2]]\n", "line 1, column 9: arrays of arrays"},
      {"a = {x = 1}\n", "line 1, column 5: inline tables"},
      {"a.b = 1\n", "line 1, column 2: dotted keys"},
      {"\"a\" = 1\n", "quoted keys"},
      {"a = \"\"\"x\"\"\"\n", "multi-line strings"},
      {"a = 1\na = 2\n", "line 2, column 1: 'a' is set twice (first on line 1)"},
      {"a = \"open\n", "line 1, column 5: the string opened here is not closed"},
      {"a = [1,\n2\n", "line 1, column 5: the array opened here is not closed"},
      {"a = [1 2]\n", "line 1, column 8: expected ',' or ']'"},
      {"a = 1 2\n", "line 1, column 7: unexpected text"},
      {"a =\n", "has no value"},
      {"just words\n", "expected '=' after the key 'just'"},
      {"a = 1979-05-27\n", "'1979-05-27' is not a value"},
      {"a = 012\n", "leading zeros"},
      {"a = 1__0\n", "is not a value"},
      {"a = 18446744073709551616\n", "does not fit in 64 bits"},
      {"a = -9223372036854775809\n", "does not fit in 64 bits"},
      {"a = 0x1_0000_0000_0000_0000\n", "does not fit in 64 bits"},
      {"a = \"\\q\"\n", "unknown escape"},
      {"a = \"\\uD800\"\n", "not a Unicode scalar value"},
      {"a = [1, \"x\"]\n", "mixes an integer and a string"},
  };
  for (const auto& [text, want] : cases) {
    const std::string err = parse_error(text);
    EXPECT_NE(err.find(want), std::string::npos) << text << " -> " << err;
    EXPECT_EQ(err.rfind("job file t.toml line ", 0), 0u) << err;
  }
  EXPECT_EQ(parse_error("a = -9223372036854775808\nb = 18_446_744_073_709_551_615\nc = 0xFFFF_FFFF_FFFF_FFFF\n"), "");
}

TEST(JobFile, NoLineLengthOrNestingExhaustsTheReader) {
  // Both overflowed the stack of the std::regex check this reader replaced.
  const std::string long_value = "name = \"" + std::string(200000, 'x') + "\"\n";
  EXPECT_EQ(parse_error(long_value), "");
  EXPECT_NE(parse_error("mean = " + std::string(100000, '[') + "\n").find("column 9: arrays of arrays"), std::string::npos);
  EXPECT_NE(parse_error(std::string(100000, '[')).find("tables"), std::string::npos);
}

TEST(JobFile, ValuesMustHaveTheOptionsType) {
  const std::pair<const char*, const char*> cases[] = {
      {"batch-size = \"16\"\n", "line 1, column 14: batch-size takes an integer, not the string \"16\" (write it without quotes)"},
      {"batch-size = 16.5\n", "batch-size takes an integer, not 16.5"},
      {"name = 5\n", "name takes a string, not 5 (write it in quotes)"},
      {"quiet = 1\n", "quiet takes true or false, not 1"},
      {"seed = -1\n", "seed takes a non-negative integer"},
      {"prefetch = 3000000000\n", "prefetch takes an integer from -2147483648 to 2147483647"},
      {"batch-size = 9223372036854775808\n", "to 9223372036854775807, not 9223372036854775808"},
      {"sample-shape = [3, \"64\"]\n", "mixes an integer and a string"},
      {"sample-shape = \"3,64,64\"\n", "sample-shape takes an integer or [a list of them], not the string"},
      {"model = [\"a.onnx\"]\n", "model takes a string, not a list"},
      {"batch-size = 0\n", "line 1, column 1: --batch-size: must be at least 1"},
      {"batchsize = 4\n", "line 1, column 1: unknown key 'batchsize'"},
      {"config = \"x.toml\"\n", "unknown key 'config'"},
  };
  for (const auto& [text, want] : cases) {
    const std::string err = apply_error(text);
    EXPECT_NE(err.find(want), std::string::npos) << text << " -> " << err;
  }
  JobConfig j;
  ASSERT_EQ(apply_error("scale = 1\nmean = 0.5\noutputs = \"logits,argmax\"\nsample-shape = [1, 2, 3,]\nstd = []\n", &j), "");
  EXPECT_FLOAT_EQ(j.scale, 1.f);  // an integer is a number
  EXPECT_EQ(j.mean, std::vector<float>{0.5f});
  EXPECT_EQ(j.outputs, (std::vector<std::string>{"logits", "argmax"}));
  EXPECT_EQ(j.sample_shape, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(apply_error("seed = 18446744073709551615\n", &j), "");  // a uint64 takes its whole range
  EXPECT_EQ(j.seed, UINT64_MAX);
}

TEST(JobFile, EchoOfAwkwardValuesReadsBack) {
  JobConfig a;
  a.name = "tab\there \"q\" back\\slash \x01";
  a.scale = 0.00392156862745098f;
  a.mean = {0.485f, 0.456f, 0.406f};
  JobConfig b;
  ASSERT_EQ(apply_error(job_to_toml(a), &b), "");
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.scale, a.scale);  // bit-identical: the echo has enough digits
  EXPECT_EQ(b.mean, a.mean);
  EXPECT_EQ(job_to_toml(b), job_to_toml(a));
}

TEST(JobFile, AFolderOrAHugeFileIsNotAJobFile) {
  EXPECT_THROW(read_job_file(::testing::TempDir()), UsageError);
  const std::string big = ::testing::TempDir() + "big.toml";
  std::ofstream(big) << "# " << std::string(2 << 20, 'x') << "\n";
  try {
    read_job_file(big);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 1 MiB"), std::string::npos) << e.what();
  }
}
