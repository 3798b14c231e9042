// Text inputs (io/text_source.cpp): JSONL, CSV, TSV and plain text as an encoded source of
// passages.  Records and their bytes, keys (--key-field, else the index), bad records with their
// reasons (ill-formed UTF-8, not JSON, no field, a record over --max-record-bytes, CSV field
// counts), RFC 4180 quoting (commas, doubled quotes and newlines inside quotes), reads split among
// 1, 2 and 3 readers covering every record exactly once with the same bytes, the sparse index
// across many records, compressed files refused with the command that decompresses them,
// detection, and the fingerprint.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

void put(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::unique_ptr<Source> open_text(const std::string& path, const std::string& format, const std::string& field = "text",
                                  const std::string& key_field = "", uint64_t max_record = kDefaultMaxRecordBytes,
                                  int64_t limit = 0) {
  TextOptions o;
  o.field = field;
  o.key_field = key_field;
  o.max_record_bytes = max_record;
  return open_text_source(path, format, o, limit);
}

// One read's result: each sample's passage, or "!" and its reason.
struct Read {
  std::vector<std::string> text;
  std::vector<std::string> keys;
};

Read read_range(Source& s, int64_t first, int64_t count) {
  std::vector<uint8_t> area(s.max_encoded_bytes(count) + 1);
  std::vector<EncodedSample> out(static_cast<std::size_t>(count));
  s.read_encoded(first, count, area.data(), area.size() - 1, out.data());
  Read r;
  for (int64_t k = 0; k < count; ++k) {
    const EncodedSample& e = out[static_cast<std::size_t>(k)];
    r.text.push_back(e.error.empty() ? std::string(reinterpret_cast<const char*>(area.data() + e.offset), e.size)
                                     : "!" + e.error);
    r.keys.push_back(s.key(first + k));
  }
  return r;
}

Read read_all(Source& s) { return read_range(s, 0, s.size()); }

TEST(TextInput, JsonlRecordsKeysAndBlankLines) {
  TempDir dir;
  const std::string p = dir.file("c.jsonl");
  put(p, "{\"text\": \"hello world\", \"id\": \"a\"}\n"
         "\n"
         "   \t\n"
         "{\"id\": 7, \"text\": \"caf\\u00e9 \\\"q\\\" \\n x\"}\r\n"
         "{\"text\": \"\\ud83d\\ude00 emoji\", \"id\": 1.5e3, \"more\": {\"text\": \"nested, not this\"}}\n"
         "{\"text\": \"last, no line end\", \"id\": \"z\"}");
  auto s = open_text(p, "jsonl");
  ASSERT_EQ(s->size(), 4);
  EXPECT_TRUE(s->encoded());
  EXPECT_TRUE(s->text());
  Read r = read_all(*s);
  EXPECT_EQ(r.text, (std::vector<std::string>{"hello world", "caf\xC3\xA9 \"q\" \n x", "\xF0\x9F\x98\x80 emoji",
                                              "last, no line end"}));
  EXPECT_EQ(r.keys, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(s->key_bytes(), 1u);
  EXPECT_NE(s->describe().find("4 records"), std::string::npos) << s->describe();
  EXPECT_NE(s->describe().find("field 'text'"), std::string::npos) << s->describe();

  auto k = open_text(p, "jsonl", "text", "id");
  r = read_all(*k);
  EXPECT_EQ(r.keys, (std::vector<std::string>{"a", "7", "1.5e3", "z"}));
  EXPECT_EQ(k->key_bytes(), 5u);
  // key() without a read before it reads the record itself.
  auto k2 = open_text(p, "jsonl", "text", "id");
  EXPECT_EQ(k2->key(2), "1.5e3");
  EXPECT_EQ(k2->key(0), "a");
}

// The open pass sizes the keys from a quick scan of each line: nested fields of the same name,
// brackets and quotes inside strings, escapes and duplicate fields do not fool it.
TEST(TextInput, KeyWidthCoversEveryKey) {
  TempDir dir;
  const std::string p = dir.file("w.jsonl");
  put(p, "{\"meta\": {\"id\": \"a nested id, much longer than any key\"}, \"id\": \"k1\", \"text\": \"{[\\\"}\"}\n"
         "{\"text\": \"x\", \"list\": [1, {\"id\": \"another long nested one\"}, \"]\"], \"id\": 12345}\n"
         "{\"id\": \"first\", \"text\": \"dup\", \"id\": \"second-longest\"}\n"
         "{ \"id\" : \"caf\\u00e9\" , \"text\" : \"spaced\" }\n");
  auto s = open_text(p, "jsonl", "text", "id");
  const Read r = read_all(*s);
  EXPECT_EQ(r.text, (std::vector<std::string>{"{[\"}", "x", "dup", "spaced"}));
  EXPECT_EQ(r.keys, (std::vector<std::string>{"k1", "12345", "second-longest", "caf\xC3\xA9"}));
  EXPECT_EQ(s->key_bytes(), std::string("second-longest").size());
}

// A lone surrogate escape reads as U+FFFD (as text/passages.h has it), a pair as its character.
TEST(TextInput, JsonlLoneSurrogatesReadAsReplacementCharacters) {
  TempDir dir;
  const std::string p = dir.file("s.jsonl");
  put(p, "{\"text\": \"a\\ud83dz\"}\n"
         "{\"text\": \"pair \\ud83d\\ude00 lone low \\udc00 end\"}\n"
         "{\"text\": \"escaped backslash \\\\ud800 is text\"}\n"
         "{\"text\": \"high at the end \\uD800\"}\n");
  auto s = open_text(p, "jsonl");
  EXPECT_EQ(read_all(*s).text,
            (std::vector<std::string>{"a\xEF\xBF\xBDz", "pair \xF0\x9F\x98\x80 lone low \xEF\xBF\xBD end",
                                      "escaped backslash \\ud800 is text", "high at the end \xEF\xBF\xBD"}));
}

TEST(TextInput, JsonlBadRecordsHaveReasons) {
  TempDir dir;
  const std::string p = dir.file("bad.jsonl");
  put(p, "{\"text\": \"ok\", \"id\": \"k0\"}\n"
         "not json at all\n"
         "{\"body\": \"no text field\", \"id\": \"k2\"}\n"
         "{\"text\": 42, \"id\": \"k3\"}\n"
         "[\"an\", \"array\"]\n"
         "{\"text\": \"bad \xC3\x28 utf8\", \"id\": \"k5\"}\n"
         "{\"text\": \"truncated\n"
         "{\"text\": \"no key\"}\n"
         "{\"text\": \"object key\", \"id\": {}}\n"
         "{\"text\": \"ok again\", \"id\": \"k9\"}\n");
  auto s = open_text(p, "jsonl", "text", "id");
  ASSERT_EQ(s->size(), 10);
  const Read r = read_all(*s);
  EXPECT_EQ(r.text[0], "ok");
  EXPECT_EQ(r.text[9], "ok again");
  auto has = [&](int i, const std::string& what) {
    EXPECT_EQ(r.text[i].rfind("!", 0), 0u) << i << ": " << r.text[i];
    EXPECT_NE(r.text[i].find(what), std::string::npos) << i << ": " << r.text[i];
  };
  has(1, "line 2: not JSON");
  has(2, "no field 'text'");
  has(3, "is a number, not a string");
  has(4, "not a JSON object (an array)");
  has(5, "not valid UTF-8 (at byte 14");
  has(6, "not JSON");
  has(7, "no field 'id' (--key-field)");
  has(8, "is an object, not a string or number");
  // Bad records keep their index as the key; the others their field.
  EXPECT_EQ(r.keys, (std::vector<std::string>{"k0", "1", "2", "3", "4", "5", "6", "7", "8", "k9"}));
}

TEST(TextInput, OversizedRecordIsABadSampleAndBoundsTheSlots) {
  TempDir dir;
  const std::string p = dir.file("big.jsonl");
  {
    std::ofstream f(p, std::ios::binary);
    f << "{\"text\": \"short\"}\n";
    f << "{\"text\": \"" << std::string(3 << 20, 'x') << "\"}\n";  // 3 MiB, over a 64 KiB bound
    f << "{\"text\": \"" << std::string(1000, 'y') << "\"}\n";
    f << "{\"text\": \"after\"}\n";
  }
  auto s = open_text(p, "jsonl", "text", "", 64 << 10);
  ASSERT_EQ(s->size(), 4);
  EXPECT_LE(s->max_encoded_bytes(4), 2000u);  // the 3 MiB record takes no room
  EXPECT_NE(s->describe().find("1 record over --max-record-bytes"), std::string::npos) << s->describe();
  const Read r = read_all(*s);
  EXPECT_EQ(r.text[0], "short");
  EXPECT_EQ(r.text[1].rfind("!line 2: ", 0), 0u) << r.text[1];
  EXPECT_NE(r.text[1].find("more than --max-record-bytes 65536; not read"), std::string::npos) << r.text[1];
  EXPECT_EQ(r.text[2], std::string(1000, 'y'));
  EXPECT_EQ(r.text[3], "after");
  // Reading from past it, and the record alone.
  EXPECT_EQ(read_range(*s, 2, 2).text[1], "after");
  EXPECT_EQ(read_range(*s, 1, 1).text[0].substr(0, 1), "!");
}

// A 100 MB line under the default bound (1 MiB): counted at open, a bad sample, never held.
TEST(TextInput, HundredMegabyteLine) {
  TempDir dir;
  const std::string p = dir.file("huge.jsonl");
  {
    std::ofstream f(p, std::ios::binary);
    f << "{\"text\": \"before\"}\n{\"text\": \"";
    const std::string block(1 << 20, 'z');
    for (int i = 0; i < 100; ++i) f << block;
    f << "\"}\n{\"text\": \"after\"}\n";
  }
  auto s = open_text(p, "jsonl");
  ASSERT_EQ(s->size(), 3);
  EXPECT_LE(s->max_encoded_bytes(3), 64u);
  const Read r = read_all(*s);
  EXPECT_EQ(r.text[0], "before");
  EXPECT_EQ(r.text[1].rfind("!line 2: 104857612 bytes, more than --max-record-bytes 1048576; not read", 0), 0u) << r.text[1];
  EXPECT_EQ(r.text[2], "after");
  EXPECT_EQ(read_range(*s, 2, 1).text[0], "after");
}

TEST(TextInput, CsvQuotingAndHeader) {
  TempDir dir;
  const std::string p = dir.file("c.csv");
  put(p, "\xEF\xBB\xBFid,text,extra\r\n"
         "a,plain,1\r\n"
         "b,\"with, comma\",2\r\n"
         "c,\"doubled \"\"quotes\"\"\",3\r\n"
         "\"d\",\"line one\r\nline two\nline three\",4\r\n"
         "\r\n"
         "e,,5\r\n"
         "f,too,many,fields\r\n"
         "g,\"text\"after,7\r\n"
         "h,\"last\",8");
  auto s = open_text(p, "csv", "text", "id");
  ASSERT_EQ(s->size(), 8);
  EXPECT_NE(s->describe().find("column 'text' of 3"), std::string::npos) << s->describe();
  const Read r = read_all(*s);
  EXPECT_EQ(r.text[0], "plain");
  EXPECT_EQ(r.text[1], "with, comma");
  EXPECT_EQ(r.text[2], "doubled \"quotes\"");
  EXPECT_EQ(r.text[3], "line one\r\nline two\nline three");
  EXPECT_EQ(r.text[4], "");
  EXPECT_EQ(r.text[5], "!line 10: 4 fields, the header has 3");  // the quoted newlines count as lines
  EXPECT_NE(r.text[6].find("text after its closing quote"), std::string::npos) << r.text[6];
  EXPECT_EQ(r.text[7], "last");
  EXPECT_EQ(r.keys, (std::vector<std::string>{"a", "b", "c", "d", "e", "5", "6", "h"}));

  EXPECT_NE(input_error_of([&] { open_text(p, "csv", "body"); }).find("no column 'body' (--text-field)"),
            std::string::npos);
  const std::string open_quote = dir.file("q.csv");
  put(open_quote, "text\nfine\n\"never closed\nstill inside\n");
  auto q = open_text(open_quote, "csv");
  ASSERT_EQ(q->size(), 2);
  const Read rq = read_all(*q);
  EXPECT_EQ(rq.text[0], "fine");
  EXPECT_NE(rq.text[1].find("without its closing quote"), std::string::npos) << rq.text[1];
}

TEST(TextInput, TsvAndPlainText) {
  TempDir dir;
  const std::string tsv = dir.file("c.tsv");
  put(tsv, "text\tid\nsome, commas\t1\n\"a\ttab\"\t2\n");
  auto t = open_text(tsv, "tsv", "text", "id");
  const Read rt = read_all(*t);
  EXPECT_EQ(rt.text, (std::vector<std::string>{"some, commas", "a\ttab"}));
  EXPECT_EQ(rt.keys, (std::vector<std::string>{"1", "2"}));

  const std::string txt = dir.file("p.txt");
  put(txt, "first passage\r\n\n  second, indented\n{\"not\": \"parsed\"}\nbad \xFF byte\n");
  auto s = open_text(txt, "text");
  const Read r = read_all(*s);
  ASSERT_EQ(s->size(), 4);
  EXPECT_EQ(r.text[0], "first passage");
  EXPECT_EQ(r.text[1], "  second, indented");
  EXPECT_EQ(r.text[2], "{\"not\": \"parsed\"}");
  EXPECT_EQ(r.text[3], "!line 5: not valid UTF-8 (at byte 4 of the record)");
  EXPECT_THROW(open_text(txt, "text", "text", "id"), UsageError);
}

// A corpus of n records, some blank lines and bad records among them, in `format`.
std::string corpus(int64_t n, const std::string& format) {
  std::string s = format == "csv" ? "key,text\n" : "";
  for (int64_t i = 0; i < n; ++i) {
    if (i % 97 == 5) s += "\n";
    const std::string body = "passage " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 13), '.');
    if (format == "jsonl")
      s += i % 101 == 7 ? "{broken\n" : "{\"k\": \"r" + std::to_string(i) + "\", \"text\": \"" + body + "\"}\n";
    else if (format == "csv")
      s += "r" + std::to_string(i) + "," + (i % 3 == 0 ? "\"" + body + ",\n\"\"x\"\"\"" : body) + "\n";
    else
      s += body + "\n";
  }
  return s;
}

std::string expected_text(int64_t i, const std::string& format) {
  const std::string body = "passage " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 13), '.');
  if (format == "jsonl" && i % 101 == 7) return "!";
  if (format == "csv" && i % 3 == 0) return body + ",\n\"x\"";
  return body;
}

// 1, 2 and 3 readers, each taking its share in batches on its own thread (as ranks and reader
// threads do), see every record exactly once, with the bytes a single reader sees.
TEST(TextInput, ShardedReadsCoverEveryRecordOnce) {
  TempDir dir;
  const int64_t n = 5000;  // several entries of the sparse index
  for (const std::string format : {"jsonl", "csv", "text"}) {
    const std::string p = dir.file("s." + format);
    put(p, corpus(n, format));
    const std::string key = format == "text" ? "" : format == "csv" ? "key" : "k";
    auto s = open_text(p, format, "text", key);
    ASSERT_EQ(s->size(), n) << format;
    const Read whole = read_all(*s);
    for (int64_t i = 0; i < n; ++i) {
      const std::string want = expected_text(i, format);
      if (want == "!") EXPECT_EQ(whole.text[i].substr(0, 1), "!") << format << " " << i;
      else ASSERT_EQ(whole.text[i], want) << format << " " << i;
      if (!key.empty() && want != "!") ASSERT_EQ(whole.keys[i], "r" + std::to_string(i)) << format << " " << i;
    }
    for (int readers : {1, 2, 3}) {
      auto src = open_text(p, format, "text", key);  // a fresh source: no reads remembered
      std::vector<std::vector<std::pair<int64_t, std::string>>> seen(static_cast<std::size_t>(readers));
      std::vector<std::thread> pool;
      for (int r = 0; r < readers; ++r)
        pool.emplace_back([&, r] {
          const int64_t lo = n * r / readers, hi = n * (r + 1) / readers, batch = 37;
          for (int64_t b = lo; b < hi; b += batch) {
            const Read got = read_range(*src, b, std::min(batch, hi - b));
            for (std::size_t k = 0; k < got.text.size(); ++k)
              seen[static_cast<std::size_t>(r)].emplace_back(b + static_cast<int64_t>(k), got.text[k] + "|" + got.keys[k]);
          }
        });
      for (std::thread& t : pool) t.join();
      std::vector<int> times(static_cast<std::size_t>(n), 0);
      for (const auto& part : seen)
        for (const auto& [i, text] : part) {
          ++times[static_cast<std::size_t>(i)];
          EXPECT_EQ(text, whole.text[static_cast<std::size_t>(i)] + "|" + whole.keys[static_cast<std::size_t>(i)])
              << format << " readers " << readers << " record " << i;
        }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(times[static_cast<std::size_t>(i)], 1) << format << " record " << i;
    }
    // Backwards and scattered single reads agree too (each from the sparse index).
    auto back = open_text(p, format, "text", key);
    for (int64_t i = n - 1; i >= 0; i -= 611) EXPECT_EQ(read_range(*back, i, 1).text[0], whole.text[i]) << format << " " << i;
  }
}

TEST(TextInput, SamplesLimitAndSlotBound) {
  TempDir dir;
  const std::string p = dir.file("l.jsonl");
  put(p, corpus(300, "jsonl"));
  auto s = open_text(p, "jsonl", "text", "", kDefaultMaxRecordBytes, 10);
  EXPECT_EQ(s->size(), 10);
  EXPECT_NE(s->describe().find("--samples"), std::string::npos) << s->describe();
  const Read r = read_all(*s);
  EXPECT_EQ(r.text[9], expected_text(9, "jsonl"));
  // max_encoded_bytes bounds any `count` consecutive passages.
  auto all = open_text(p, "jsonl");
  for (int64_t first = 0; first + 32 <= all->size(); first += 32) {
    std::vector<uint8_t> area(all->max_encoded_bytes(32));
    std::vector<EncodedSample> out(32);
    all->read_encoded(first, 32, area.data(), area.size(), out.data());
  }
  EXPECT_LE(all->max_encoded_bytes(32), 32u * 64u);
}

TEST(TextInput, RefusesCompressedEmptyAndBinaryFiles) {
  TempDir dir;
  const std::string gz = dir.file("c.jsonl.gz");
  put(gz, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8) + "zzzz");
  EXPECT_EQ(detect_input_kind(gz), "jsonl");
  InputOptions o;
  o.path = gz;
  const std::string e = input_error_of([&] { open_input(o); });
  EXPECT_NE(e.find("gzip-compressed"), std::string::npos) << e;
  EXPECT_NE(e.find("gunzip -k " + gz), std::string::npos) << e;
  // The same bytes under a plain name, read as text.
  const std::string plain = dir.file("c.csv");
  put(plain, std::string("\x1f\x8b\x08\x00", 4));
  EXPECT_NE(input_error_of([&] { open_text(plain, "csv"); }).find("gzip-compressed"), std::string::npos);

  const std::string empty = dir.file("e.jsonl");
  put(empty, "\n\n  \n");
  EXPECT_NE(input_error_of([&] { open_text(empty, "jsonl"); }).find("no records"), std::string::npos);
  const std::string header_only = dir.file("h.csv");
  put(header_only, "text,id\n");
  EXPECT_NE(input_error_of([&] { open_text(header_only, "csv"); }).find("a header line only"), std::string::npos);
  const std::string binary = dir.file("b.jsonl");
  put(binary, std::string("{\"text\": \"x\"}\n\0\0\0", 17));
  EXPECT_NE(input_error_of([&] { open_text(binary, "jsonl"); }).find("not a text file"), std::string::npos);
  EXPECT_NE(input_error_of([&] { open_text(dir.file("missing.jsonl"), "jsonl"); }).find("no such file"), std::string::npos);
  const std::string fifo = dir.file("f.jsonl");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(input_error_of([&] { open_text(fifo, "jsonl"); }).find("FIFO"), std::string::npos);
}

TEST(TextInput, DetectionAndOpenInput) {
  TempDir dir;
  for (const char* name : {"a.jsonl", "a.NDJSON", "a.csv", "a.tsv", "a.txt"}) put(dir.file(name), "text\nx\n");
  EXPECT_EQ(detect_input_kind(dir.file("a.jsonl")), "jsonl");
  EXPECT_EQ(detect_input_kind(dir.file("a.NDJSON")), "jsonl");
  EXPECT_EQ(detect_input_kind(dir.file("a.csv")), "csv");
  EXPECT_EQ(detect_input_kind(dir.file("a.tsv")), "tsv");
  EXPECT_EQ(detect_input_kind(dir.file("a.txt")), "list");  // a list of image paths, as before
  EXPECT_EQ(detect_input_kind(dir.file("a.csv.zst")), "csv");
  InputOptions o;
  o.path = dir.file("a.txt");
  o.kind = "text";
  auto s = open_input(o);
  EXPECT_EQ(s->size(), 2);
  EXPECT_TRUE(s->text());
  o.path = dir.file("a.csv");
  o.kind = "auto";
  o.text.key_field = "nope";
  EXPECT_NE(input_error_of([&] { open_input(o); }).find("no column 'nope' (--key-field)"), std::string::npos);
  o.path = "synthetic";
  EXPECT_THROW(open_input(o), UsageError);  // --key-field on a non-text input
}

TEST(TextInput, FingerprintChangesWithTheFile) {
  TempDir dir;
  const std::string p = dir.file("f.jsonl");
  put(p, corpus(50, "jsonl"));
  const std::string a = open_text(p, "jsonl")->fingerprint();
  EXPECT_EQ(a, open_text(p, "jsonl")->fingerprint());
  EXPECT_EQ(a.rfind("jsonl /", 0), 0u) << a;
  EXPECT_NE(a, open_text(p, "jsonl", "body")->fingerprint());
  std::string text = corpus(50, "jsonl");
  text[text.size() / 2] = text[text.size() / 2] == 'a' ? 'b' : 'a';  // same size
  put(p, text);
  EXPECT_NE(a, open_text(p, "jsonl")->fingerprint());
}

TEST(TextInput, ChangedDuringTheRunEndsIt) {
  TempDir dir;
  const std::string p = dir.file("c.jsonl");
  put(p, corpus(100, "jsonl"));
  auto s = open_text(p, "jsonl");
  read_range(*s, 0, 10);
  put(p, corpus(100, "jsonl") + "{\"text\": \"appended\"}\n");
  EXPECT_NE(input_error_of([&] { read_range(*s, 10, 10); }).find("changed during the run"), std::string::npos);
}

// The open pass over a generated corpus: SLUICE_BENCH=1 prints its cost (never asserted: machines
// differ).
TEST(TextInput, OpenPassCost) {
  if (!std::getenv("SLUICE_BENCH")) GTEST_SKIP() << "SLUICE_BENCH=1 measures the open pass over 1e6 records";
  TempDir dir;
  const std::string p = dir.file("m.jsonl");
  {
    std::ofstream f(p, std::ios::binary);
    std::string line;
    for (int i = 0; i < 1000000; ++i) {
      line = "{\"id\": \"doc-" + std::to_string(i) + "\", \"text\": \"";
      for (int w = 0; w < 20 + i % 17; ++w) line += "word" + std::to_string(w) + " ";
      line += "\"}\n";
      f << line;
    }
  }
  const std::string csv = dir.file("m.csv");
  {
    std::ofstream f(csv, std::ios::binary);
    f << "id,text\n";
    for (int i = 0; i < 1000000; ++i) {
      f << "doc-" << i << ",\"";
      for (int w = 0; w < 20 + i % 17; ++w) f << "word" << w << (w % 5 == 4 ? ", " : " ");
      f << "\"\n";
    }
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = open_text(csv, "csv", "text", "id");
    std::printf("open pass: %lld CSV records (quoted), %.1f MB, --key-field id: %.3f s\n", static_cast<long long>(s->size()),
                std::filesystem::file_size(csv) / 1e6,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto bytes = std::filesystem::file_size(p);
  for (const char* key : {"", "id"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = open_text(p, "jsonl", "text", key);
    const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto t1 = std::chrono::steady_clock::now();
    const std::string fp = s->fingerprint();
    const double fp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("open pass: %lld records, %.1f MB, --key-field '%s': %.3f s (%.0f MB/s); fingerprint %.4f s\n",
                static_cast<long long>(s->size()), bytes / 1e6, key, open_s, bytes / 1e6 / open_s, fp_s);
    const auto t2 = std::chrono::steady_clock::now();
    for (int64_t b = 0; b < s->size(); b += 256) read_range(*s, b, std::min<int64_t>(256, s->size() - b));
    std::printf("  read all in batches of 256: %.3f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count());
  }
}

}  // namespace
