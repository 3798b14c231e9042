// Parquet inputs (io/parquet_source.cpp), on files pyarrow writes (python3 with the wheel; the
// tests skip without it, or in a build without Parquet): text columns give the samples a JSONL
// source gives (bytes, keys, text()), images from {bytes, path} structs and binary columns, arrays
// from fixed-size lists and fixed_shape_tensor, rows across row groups and files read by 1, 2 and 3
// readers the same, --samples, max_encoded_bytes bounding every window, bad rows (nulls, bad keys,
// over --max-record-bytes, a corrupt row group) as bad samples naming the file and row group, a
// corrupt footer or a missing column as one InputError, a file changed after opening, the
// fingerprint, and detection.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/file_identity.h"
#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

// Runs `body` (Python, with pa = pyarrow, pq = pyarrow.parquet, D = the folder) in python3.
void python(const TempDir& dir, const std::string& body) {
  const std::string script = dir.file("make.py");
  std::ofstream(script) << "import sys, json\nimport pyarrow as pa, pyarrow.parquet as pq\nD = sys.argv[1]\n" << body;
  ASSERT_EQ(std::system(("python3 " + script + " " + dir.path()).c_str()), 0) << body;
}

bool skip_reason(std::string* why) {
  if (!parquet_available()) *why = "a build without Parquet (no pyarrow wheel at configure time)";
  else if (std::system("python3 -c 'import pyarrow.parquet' 2>/dev/null") != 0) *why = "python3 without pyarrow";
  return !why->empty();
}

#define SKIP_WITHOUT_PARQUET()                  \
  do {                                          \
    std::string why;                            \
    if (skip_reason(&why)) GTEST_SKIP() << why; \
  } while (0)

std::unique_ptr<Source> open_pq(const std::string& path, const std::string& image_field = "",
                                const std::string& text_field = "text", const std::string& key_field = "",
                                int64_t limit = 0, uint64_t max_record = kDefaultMaxRecordBytes) {
  TextOptions t;
  t.field = text_field;
  t.key_field = key_field;
  t.max_record_bytes = max_record;
  return open_parquet_source(path, image_field, t, limit);
}

// Each sample's bytes, or "!" and its reason; read in reads of `step` samples.
std::vector<std::string> samples(Source& s, int64_t step = 0) {
  if (step <= 0) step = s.size();
  std::vector<std::string> out;
  for (int64_t first = 0; first < s.size(); first += step) {
    const int64_t count = std::min(step, s.size() - first);
    std::vector<uint8_t> area(s.max_encoded_bytes(count) + 1);
    std::vector<EncodedSample> where(static_cast<std::size_t>(count));
    s.read_encoded(first, count, area.data(), area.size() - 1, where.data());
    for (const EncodedSample& e : where)
      out.push_back(e.error.empty() ? std::string(reinterpret_cast<const char*>(area.data() + e.offset), e.size)
                                    : "!" + e.error);
  }
  return out;
}

std::vector<std::string> keys(const Source& s) {
  std::vector<std::string> k;
  for (int64_t i = 0; i < s.size(); ++i) k.push_back(s.key(i));
  return k;
}

// Records of a corpus, written as JSONL and as Parquet (row groups of 7 rows, two files).
constexpr const char* kCorpus = R"(
recs = [{"id": f"doc-{i}", "text": f"passage {i} " + "word " * (i % 5)} for i in range(40)]
recs[3]["text"] = "unicode: \u00e9\u4e2d\U0001F600, \"quotes\", commas, and\nnewlines"
recs[4]["text"] = ""
with open(D + "/c.jsonl", "w") as f:
    for r in recs: f.write(json.dumps(r) + "\n")
t = pa.table({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs], "n": list(range(40))})
pq.write_table(t, D + "/c.parquet", row_group_size=7)
import os; os.makedirs(D + "/two", exist_ok=True)
pq.write_table(t.slice(0, 25), D + "/two/part-0.parquet", row_group_size=7)
pq.write_table(t.slice(25), D + "/two/part-1.parquet", row_group_size=4)
pq.write_table(t.slice(0, 3), D + "/two/_ignored.parquet")
open(D + "/two/_SUCCESS", "w").close()
)";

}  // namespace

TEST(ParquetInput, TextColumnGivesTheSamplesAJsonlSourceGives) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, kCorpus);
  TextOptions o;
  o.key_field = "id";
  auto jsonl = open_text_source(dir.file("c.jsonl"), "jsonl", o);
  for (const std::string path : {dir.file("c.parquet"), dir.file("two")}) {
    auto pq = open_pq(path, "", "text", "id");
    EXPECT_TRUE(pq->encoded() && pq->text()) << pq->describe();
    EXPECT_EQ(pq->size(), 40);
    EXPECT_EQ(samples(*pq), samples(*jsonl)) << path;
    EXPECT_EQ(keys(*pq), keys(*jsonl)) << path;
    // Reads cut anywhere (across row groups and files) give the same bytes.
    for (int64_t step : {1, 3, 8}) EXPECT_EQ(samples(*pq, step), samples(*jsonl)) << path << " step " << step;
    EXPECT_NE(pq->describe().find("40 records, passages from column 'text'"), std::string::npos) << pq->describe();
    EXPECT_NE(pq->describe().find("keys from column 'id'"), std::string::npos) << pq->describe();
  }
  EXPECT_NE(open_pq(dir.file("two"))->describe().find("2 files, 8 row groups"), std::string::npos)
      << open_pq(dir.file("two"))->describe();
  // Integer keys; the index without --key-field.
  auto by_n = open_pq(dir.file("c.parquet"), "", "text", "n");
  EXPECT_EQ(by_n->key(39), "39");
  EXPECT_EQ(by_n->key_bytes(), 2u);  // from the column's statistics
  EXPECT_EQ(open_pq(dir.file("c.parquet"))->key(12), "12");
}

TEST(ParquetInput, ReadersSplittingTheRowsCoverEachOnceWithTheSameBytes) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, kCorpus);
  auto pq = open_pq(dir.file("two"), "", "text", "id");
  const std::vector<std::string> all = samples(*pq);
  for (int readers : {2, 3}) {
    std::vector<std::vector<std::string>> got(static_cast<std::size_t>(readers));
    std::vector<std::thread> threads;
    for (int r = 0; r < readers; ++r)
      threads.emplace_back([&, r] {
        for (int64_t first = r * 3; first < pq->size(); first += readers * 3) {
          const int64_t count = std::min<int64_t>(3, pq->size() - first);
          std::vector<uint8_t> area(pq->max_encoded_bytes(count));
          std::vector<EncodedSample> where(static_cast<std::size_t>(count));
          pq->read_encoded(first, count, area.data(), area.size(), where.data());
          for (int64_t k = 0; k < count; ++k)
            got[static_cast<std::size_t>(r)].push_back(
                std::string(reinterpret_cast<const char*>(area.data() + where[k].offset), where[k].size));
        }
      });
    for (auto& t : threads) t.join();
    std::vector<std::string> merged(all.size());
    for (int r = 0; r < readers; ++r) {
      std::size_t k = 0;
      for (int64_t first = r * 3; first < pq->size(); first += readers * 3)
        for (int64_t i = first; i < std::min<int64_t>(first + 3, pq->size()); ++i) merged[static_cast<std::size_t>(i)] = got[static_cast<std::size_t>(r)][k++];
    }
    EXPECT_EQ(merged, all) << readers << " readers";
  }
}

TEST(ParquetInput, BadRowsAreBadSamplesWithTheirReason) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, R"(
text = pa.array(["fine", None, "x" * 100, "ok"]).cast(pa.string())
bad = pa.array([b"ok", b"\xff\xfe bad", b"fine", b"ok"], pa.binary()).view(pa.string())
ids = pa.array(["a", "b", None, "d" * 300])
pq.write_table(pa.table({"text": text, "bad": bad, "id": ids}), D + "/t.parquet")
)");
  auto s = open_pq(dir.file("t.parquet"), "", "text", "", 0, 50);
  std::vector<std::string> got = samples(*s);
  EXPECT_EQ(got[0], "fine");
  EXPECT_NE(got[1].find("t.parquet row 1: its text (column 'text') is null"), std::string::npos) << got[1];
  EXPECT_NE(got[2].find("100 bytes, more than --max-record-bytes 50"), std::string::npos) << got[2];
  got = samples(*open_pq(dir.file("t.parquet"), "", "bad"));
  EXPECT_NE(got[1].find("not valid UTF-8"), std::string::npos) << got[1];
  auto keyed = open_pq(dir.file("t.parquet"), "", "text", "id");
  got = samples(*keyed);
  EXPECT_NE(got[2].find("its key (--key-field) is null"), std::string::npos) << got[2];
  EXPECT_NE(got[3].find("its key (--key-field) has 300 bytes, more than 256"), std::string::npos) << got[3];
  EXPECT_EQ(keyed->key(0), "a");
  EXPECT_EQ(keyed->key(3), "3");  // a bad key: the index
  EXPECT_EQ(keyed->key_bytes(), 256u);
}

TEST(ParquetInput, ImagesFromHuggingFaceStructsAndBinaryColumns) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, R"(
img = pa.StructArray.from_arrays([pa.array([b"\x89PNG one", None, b"\xff\xd8\xff three"], pa.binary()),
                                  pa.array(["a/one.png", "two.png", "three.jpg"])], names=["bytes", "path"])
img = pa.StructArray.from_arrays(img.flatten(), names=["bytes", "path"], mask=pa.array([False, False, True]))
pq.write_table(pa.table({"image": img, "label": [1, 2, 3]}), D + "/hf.parquet")
pq.write_table(pa.table({"jpg": pa.array([b"a", b"bb"], pa.large_binary()), "png": [b"c", b"d"]}), D + "/two.parquet")
)");
  auto s = open_pq(dir.file("hf.parquet"), "", "text", "image.path");
  EXPECT_TRUE(s->encoded() && !s->text());
  std::vector<std::string> got = samples(*s);
  EXPECT_EQ(got[0], "\x89PNG one");
  EXPECT_NE(got[1].find("its image (column 'image') is null"), std::string::npos) << got[1];
  EXPECT_NE(got[2].find("is null"), std::string::npos) << got[2];  // the struct itself is null
  EXPECT_EQ(s->key(0), "a/one.png");
  EXPECT_EQ(s->key(1), "two.png");
  EXPECT_NE(s->describe().find("images from column 'image'"), std::string::npos) << s->describe();
  // Two binary columns: --image-field chooses.
  const std::string e = input_error_of([&] { open_pq(dir.file("two.parquet")); });
  EXPECT_NE(e.find("several columns could hold the samples ('jpg', 'png'); --image-field names one"), std::string::npos) << e;
  EXPECT_EQ(samples(*open_pq(dir.file("two.parquet"), "jpg")), (std::vector<std::string>{"a", "bb"}));
  EXPECT_NE(input_error_of([&] { open_pq(dir.file("two.parquet"), "nope"); }).find("no column 'nope' (--image-field)"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { open_pq(dir.file("hf.parquet"), "label"); }).find("not images"), std::string::npos);
}

TEST(ParquetInput, ArraysFromFixedSizeListsAndTensors) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, R"(
import numpy as np
x = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)
inner = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 3)
outer = pa.FixedSizeListArray.from_arrays(inner, 2, mask=pa.array([False, False, True, False, False]))
pq.write_table(pa.table({"x": outer}), D + "/lists.parquet", row_group_size=2)
u = np.arange(3 * 4, dtype=np.uint8).reshape(3, 2, 2)
t = pa.FixedShapeTensorArray.from_numpy_ndarray(u)
pq.write_table(pa.table({"t": t, "id": ["p", "q", "r"]}), D + "/tensor.parquet")
pq.write_table(pa.table({"d": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0]), 2)}), D + "/f64.parquet")
)");
  auto s = open_pq(dir.file("lists.parquet"));
  EXPECT_FALSE(s->encoded());
  EXPECT_EQ(s->sample_shape(), (Shape{2, 3}));
  EXPECT_EQ(s->dtype(), DType::F32);
  std::vector<float> v(5 * 6);
  s->read(0, 5, v.data());
  for (int i = 0; i < 30; ++i)
    if (i / 6 == 2) EXPECT_TRUE(std::isnan(v[static_cast<std::size_t>(i)])) << i;  // a null row
    else EXPECT_EQ(v[static_cast<std::size_t>(i)], static_cast<float>(i)) << i;
  std::vector<float> one(6);
  s->read(3, 1, one.data());  // a read that starts inside a row group
  EXPECT_EQ(one[0], 18.0f);
  auto t = open_pq(dir.file("tensor.parquet"), "t", "text", "id");
  EXPECT_EQ(t->sample_shape(), (Shape{2, 2}));
  EXPECT_EQ(t->dtype(), DType::U8);
  std::vector<uint8_t> u(12);
  t->read(0, 3, u.data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(u[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(t->key(2), "r");
  const std::string e = input_error_of([&] { open_pq(dir.file("f64.parquet")); });
  EXPECT_NE(e.find("arrays of double; Sluice reads float32 or uint8"), std::string::npos) << e;
}

TEST(ParquetInput, MaxEncodedBytesBoundsEveryRunOfRows) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, R"(
import random
random.seed(1)
vals = [b"v" * random.choice([1, 10, 1000, 5000]) for _ in range(200)]
vals[50:90] = [b"R" * 4000] * 40   # repeats: dictionary-encoded
t = pa.table({"b": pa.array(vals, pa.binary())})
pq.write_table(t, D + "/stats.parquet", row_group_size=16)
pq.write_table(t, D + "/plain.parquet", row_group_size=16, use_dictionary=False)
)");
  for (const char* name : {"stats.parquet", "plain.parquet"}) {
    auto s = open_pq(dir.file(name));
    const std::vector<std::string> all = samples(*s);
    for (int64_t count : {1, 3, 16, 40}) {
      std::size_t most = 0;
      for (int64_t first = 0; first + count <= s->size(); ++first) {
        std::size_t sum = 0;
        for (int64_t k = 0; k < count; ++k) sum += all[static_cast<std::size_t>(first + k)].size();
        most = std::max(most, sum);
      }
      EXPECT_GE(s->max_encoded_bytes(count), most) << name << " count " << count;
      EXPECT_LE(s->max_encoded_bytes(count), 200u * 5000u) << name;
    }
  }
}

TEST(ParquetInput, SamplesLimitAndFileSelection) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, kCorpus);
  auto s = open_pq(dir.file("two"), "", "text", "id", 27);
  EXPECT_EQ(s->size(), 27);
  EXPECT_EQ(s->key(26), "doc-26");  // the second file's third row
  EXPECT_NE(s->describe().find("(the first ones: --samples)"), std::string::npos) << s->describe();
  EXPECT_EQ(open_pq(dir.file("two/*.parquet"))->size(), 43);  // a glob takes what it matches, _ignored too
  EXPECT_EQ(open_pq(dir.file("two/part-*.parquet"))->size(), 40);
  EXPECT_NE(input_error_of([&] { open_pq(dir.file("nowhere.parquet")); }).find("no such file or folder"), std::string::npos);
  std::filesystem::create_directory(dir.file("empty"));
  EXPECT_NE(input_error_of([&] { open_pq(dir.file("empty")); }).find("no Parquet files"), std::string::npos);
}

TEST(ParquetInput, CorruptRowGroupIsBadSamplesAndCorruptFooterOneError) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, R"(
t = pa.table({"text": [f"passage number {i} " * 20 for i in range(30)]})
pq.write_table(t, D + "/c.parquet", row_group_size=10, compression="snappy")
cc = pq.ParquetFile(D + "/c.parquet").metadata.row_group(1).column(0)
start = cc.dictionary_page_offset or cc.data_page_offset
data = bytearray(open(D + "/c.parquet", "rb").read())
for k in range(start + 20, start + cc.total_compressed_size - 4):
    data[k] ^= 0x5a
open(D + "/c.parquet", "wb").write(bytes(data))
open(D + "/footer.parquet", "wb").write(b"PAR1" + b"\0" * 64 + b"PAR1")
)");
  auto s = open_pq(dir.file("c.parquet"));
  const std::vector<std::string> got = samples(*s);
  for (int i = 0; i < 30; ++i) {
    if (i >= 10 && i < 20)
      EXPECT_NE(got[static_cast<std::size_t>(i)].find("c.parquet row " + std::to_string(i) +
                                                      ": row group 1 of c.parquet cannot be read"),
                std::string::npos) << got[static_cast<std::size_t>(i)];
    else EXPECT_EQ(got[static_cast<std::size_t>(i)].rfind("passage number " + std::to_string(i) + " ", 0), 0u) << i;
  }
  const std::string e = input_error_of([&] { open_pq(dir.file("footer.parquet")); });
  EXPECT_NE(e.find("footer.parquet is not a readable Parquet file"), std::string::npos) << e;
}

TEST(ParquetInput, FingerprintAndAFileChangedAfterOpening) {
  SKIP_WITHOUT_PARQUET();
  TempDir dir;
  python(dir, kCorpus);
  const std::string a = open_pq(dir.file("two"), "", "text", "id")->fingerprint();
  EXPECT_EQ(a, open_pq(dir.file("two"), "", "text", "id")->fingerprint());
  EXPECT_EQ(a.rfind("parquet ", 0), 0u) << a;
  EXPECT_NE(a, open_pq(dir.file("two"), "", "text", "")->fingerprint());
  auto s = open_pq(dir.file("two"), "", "text", "id");
  python(dir, "t = pq.read_table(D + '/two/part-1.parquet')\npq.write_table(t, D + '/two/part-1.parquet', row_group_size=2)\n");
  const std::string e = input_error_of([&] { samples(*s); });
  EXPECT_NE(e.find("changed during the run"), std::string::npos) << e;
  const std::string b = open_pq(dir.file("two"), "", "text", "id")->fingerprint();
  EXPECT_NE(fingerprint_difference(a, b), "") << a << "\n" << b;
}

TEST(ParquetInput, DetectedByExtensionFolderGlobMagicAndUrl) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("hf/data"));
  std::ofstream(dir.file("hf/README.md")) << "x";
  std::ofstream(dir.file("hf/data/train-00000-of-00001.parquet")) << "PAR1";
  std::ofstream(dir.file("noext")) << "PAR1 and more";
  std::filesystem::create_directories(dir.file("photos/a"));
  std::ofstream(dir.file("photos/a/x.jpg")) << "x";
  EXPECT_EQ(detect_input_kind(dir.file("hf")), "parquet");
  EXPECT_EQ(detect_input_kind(dir.file("photos")), "folder");
  EXPECT_EQ(detect_input_kind(dir.file("hf/data/*.parquet")), "parquet");
  EXPECT_EQ(detect_input_kind(dir.file("x.parquet")), "parquet");
  EXPECT_EQ(detect_input_kind(dir.file("noext")), "parquet");
  EXPECT_EQ(detect_input_kind("s3://bucket/prefix/"), "parquet");
}
