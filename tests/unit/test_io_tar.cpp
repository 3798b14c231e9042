// Tar shards in the WebDataset layout: brace ranges and globs of shards, samples grouped by key,
// the image member picked, ustar prefixes, GNU long names and pax paths, members read by offset,
// clear errors for missing, truncated or foreign shards; and shards written by Python's tarfile
// (an independent writer) in its three formats.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

// Writes tar archives member by member: ustar headers, a GNU 'L' record or a pax 'x' header first
// when asked (or when the name does not fit).
class TarWriter {
 public:
  explicit TarWriter(const std::string& path) : out_(path, std::ios::binary) {}
  ~TarWriter() { finish(); }

  enum class LongNames { Gnu, Pax, UstarPrefix };

  void add(const std::string& name, const std::string& data, LongNames how = LongNames::Gnu, char type = '0') {
    std::string short_name = name, prefix;
    if (name.size() > 100) {
      if (how == LongNames::Gnu) {
        record('L', "././@LongLink", name + '\0', "");
        short_name = name.substr(0, 100);
      } else if (how == LongNames::Pax) {
        std::string rec = " path=" + name + "\n";
        std::string len = std::to_string(rec.size() + 1);
        if (std::to_string(rec.size() + len.size()).size() != len.size()) len = std::to_string(rec.size() + len.size() + 1);
        else len = std::to_string(rec.size() + len.size());
        record('x', "PaxHeader", len + rec, "");
        short_name = name.substr(name.size() - 100);
      } else {
        const std::size_t cut = name.rfind('/', 155);
        prefix = name.substr(0, cut);
        short_name = name.substr(cut + 1);
      }
    }
    record(type, short_name, data, prefix);
  }

  void raw(const std::string& bytes) { out_ << bytes; }

  void finish() {
    if (!out_.is_open()) return;
    out_ << std::string(1024, '\0');
    out_.close();
  }

 private:
  void record(char type, const std::string& name, const std::string& data, const std::string& prefix) {
    char h[512] = {0};
    std::memcpy(h, name.data(), std::min<std::size_t>(name.size(), 100));
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011zo", data.size());
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memcpy(h + 345, prefix.data(), std::min<std::size_t>(prefix.size(), 155));
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.write(h, 512);
    out_ << data << std::string((512 - data.size() % 512) % 512, '\0');
  }

  std::ofstream out_;
};

std::vector<std::string> keys_of(const Source& s) {
  std::vector<std::string> k;
  for (int64_t i = 0; i < s.size(); ++i) k.push_back(s.key(i));
  return k;
}

std::vector<std::string> bytes_of(Source& s) {
  std::vector<uint8_t> area(s.max_encoded_bytes(s.size()));
  std::vector<EncodedSample> out(static_cast<std::size_t>(s.size()));
  s.read_encoded(0, s.size(), area.data(), area.size(), out.data());
  std::vector<std::string> b;
  for (const EncodedSample& e : out) b.push_back(e.error.empty() ? std::string(reinterpret_cast<const char*>(area.data() + e.offset), e.size) : "ERROR " + e.error);
  return b;
}


// Three shards of a WebDataset: each sample an image plus a class and a json member.
void write_shards(const TempDir& dir) {
  int n = 0;
  for (int s = 0; s < 3; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "/train-%06d.tar", s);
    TarWriter w(dir.path() + name);
    for (int i = 0; i < 4; ++i, ++n) {
      const std::string key = str("s", s, "/sample", n);
      w.add(key + ".cls", std::to_string(n % 10));
      w.add(key + (n % 2 ? ".png" : ".jpg"), str("image ", n, std::string(static_cast<std::size_t>(n * 37), '*')));
      w.add(key + ".json", "{}");
    }
  }
}

}  // namespace

TEST(TarSource, BraceRangeShardsGroupMembersByKeyAndReadTheImageByOffset) {
  TempDir dir;
  write_shards(dir);
  auto s = open_tar_source(dir.file("train-{000000..000002}.tar"));
  EXPECT_TRUE(s->encoded());
  ASSERT_EQ(s->size(), 12);
  EXPECT_EQ(s->key(0), "s0/sample0");
  EXPECT_EQ(s->key(11), "s2/sample11");
  EXPECT_EQ(s->key_bytes(), std::string("s2/sample10").size());
  const std::vector<std::string> b = bytes_of(*s);
  for (int n = 0; n < 12; ++n)
    EXPECT_EQ(b[static_cast<std::size_t>(n)], str("image ", n, std::string(static_cast<std::size_t>(n * 37), '*')));
  EXPECT_EQ(s->max_encoded_bytes(1), str("image 11", std::string(11 * 37, '*')).size());
  EXPECT_NE(s->describe().find("12 samples in 3 shards"), std::string::npos) << s->describe();
  // A glob of the same shards, a single shard, and --samples across a shard boundary.
  EXPECT_EQ(keys_of(*open_tar_source(dir.file("train-*.tar"))), keys_of(*s));
  EXPECT_EQ(open_tar_source(dir.file("train-000001.tar"))->key(0), "s1/sample4");
  auto first6 = open_tar_source(dir.file("train-{000000..000002}.tar"), 6);
  EXPECT_EQ(first6->size(), 6);
  EXPECT_EQ(first6->key(5), "s1/sample5");
  InputOptions o;
  o.path = dir.file("train-{000000..000002}.tar");
  o.samples = 5;
  EXPECT_EQ(open_input(o)->size(), 5);
}

TEST(TarSource, KeysFollowWebDatasetAndThePlainImageExtensionWins) {
  TempDir dir;
  {
    TarWriter w(dir.file("a.tar"));
    w.add("dir.v2/x.seg.png", "mask x");    // key dir.v2/x: the first dot of the file name
    w.add("dir.v2/x.JPG", "image x");       // a plain image extension (any case) beats seg.png
    w.add("y.seg.png", "mask y");           // only an image-ending extension: taken
    w.add("y.txt", "text");
    w.add("noext", "skipped: no extension");
    w.add(".hidden.jpg", "skipped: no key");
    w.add("z.json", "{}");                  // a sample without an image: skipped, counted
    w.add("folder/", "", TarWriter::LongNames::Gnu, '5');
    w.add("w.jpeg", "image w");
  }
  auto s = open_tar_source(dir.file("a.tar"));
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"dir.v2/x", "y", "w"}));
  EXPECT_EQ(bytes_of(*s), (std::vector<std::string>{"image x", "mask y", "image w"}));
  EXPECT_NE(s->describe().find("1 sample without an image skipped"), std::string::npos) << s->describe();
}

TEST(TarSource, LongNamesInGnuPaxAndUstarPrefixForm) {
  TempDir dir;
  const std::string deep = std::string(60, 'd') + "/" + std::string(70, 'e') + "/";
  {
    TarWriter w(dir.file("long.tar"));
    w.add(deep + "gnu.jpg", "G", TarWriter::LongNames::Gnu);
    w.add(deep + "pax.jpg", "P", TarWriter::LongNames::Pax);
    w.add(deep + "prefix.jpg", "U", TarWriter::LongNames::UstarPrefix);
  }
  auto s = open_tar_source(dir.file("long.tar"));
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{deep + "gnu", deep + "pax", deep + "prefix"}));
  EXPECT_EQ(bytes_of(*s), (std::vector<std::string>{"G", "P", "U"}));
}

TEST(TarSource, MissingTruncatedAndForeignShardsFailAtOpen) {
  TempDir dir;
  write_shards(dir);
  std::string e = input_error_of([&] { open_tar_source(dir.file("train-{000000..000004}.tar")); });
  EXPECT_NE(e.find("2 of its 5 shards do not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("train-000003.tar"), std::string::npos) << e;
  std::filesystem::copy_file(dir.file("train-000000.tar"), dir.file("cut.tar"));
  std::filesystem::resize_file(dir.file("cut.tar"), 512 * 5 + 100);
  e = input_error_of([&] { open_tar_source(dir.file("cut.tar")); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::ofstream(dir.file("text.tar")) << std::string(2048, 'x');
  e = input_error_of([&] { open_tar_source(dir.file("text.tar")); });
  EXPECT_NE(e.find("not a tar file"), std::string::npos) << e;
  { TarWriter w(dir.file("empty.tar")); }
  e = input_error_of([&] { open_tar_source(dir.file("empty.tar")); });
  EXPECT_NE(e.find("no samples with an image member"), std::string::npos) << e;
  EXPECT_THROW(open_tar_source(dir.file("train-{a..c}.tar")), UsageError);
  EXPECT_THROW(open_tar_source(dir.file("train-{0..2}}.tar")), UsageError);
}

TEST(TarSource, AShardReplacedMidRunMakesItsSamplesBadNotTheJobFailed) {
  TempDir dir;
  write_shards(dir);
  auto s = open_tar_source(dir.file("train-{000000..000002}.tar"));
  const std::string before = s->fingerprint();
  std::filesystem::remove(dir.file("train-000001.tar"));
  const std::vector<std::string> b = bytes_of(*s);
  for (int n = 0; n < 12; ++n) {
    if (n >= 4 && n < 8) EXPECT_NE(b[static_cast<std::size_t>(n)].find("ERROR"), std::string::npos) << n;
    else EXPECT_EQ(b[static_cast<std::size_t>(n)].rfind("image ", 0), 0u) << b[static_cast<std::size_t>(n)];
  }
  write_shards(dir);
  { TarWriter w(dir.file("train-000002.tar")); w.add("other.jpg", "changed"); }
  EXPECT_NE(open_tar_source(dir.file("train-{000000..000002}.tar"))->fingerprint(), before);
}

TEST(BraceExpansion, RangesKeepTheirZeroPaddingAndListsExpand) {
  TempDir dir;
  for (const char* n : {"a-08.tar", "a-09.tar", "a-10.tar", "b-x.tar", "b-y.tar"}) {
    TarWriter w(dir.file(n));
    w.add(std::string(n) + ".jpg", n);
  }
  EXPECT_EQ(open_tar_source(dir.file("a-{08..10}.tar"))->size(), 3);
  EXPECT_EQ(open_tar_source(dir.file("{a-{09..10},b-{x,y}}.tar"))->size(), 4);
  EXPECT_EQ(open_tar_source(dir.file("a-{10..08}.tar"))->key(0), "a-10");
}

TEST(TarSource, ShardsWrittenByPythonTarfileInEachFormat) {
  if (std::system("python3 -c 'import tarfile' 2>/dev/null") != 0) GTEST_SKIP() << "no python3";
  TempDir dir;
  const std::string script = dir.file("make.py");
  std::ofstream(script) << R"(import io, sys, tarfile
deep = "d" * 90 + "/" + "e" * 80 + "/"
for fmt, name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")):
    with tarfile.open(sys.argv[1] + "/" + name + ".tar", "w", format=fmt) as t:
        for i, key in enumerate(["a/one", deep + "two", "b/three"]):
            if fmt == tarfile.USTAR_FORMAT and len(key) > 150:
                key = "x/two"
            for ext, data in (("cls", b"%d" % i), ("jpg", b"jpeg bytes %d " % i + bytes(range(256)) * i)):
                info = tarfile.TarInfo(key + "." + ext)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
)";
  ASSERT_EQ(std::system(("python3 " + script + " " + dir.path()).c_str()), 0);
  const std::string deep = std::string(90, 'd') + "/" + std::string(80, 'e') + "/";
  for (const char* fmt : {"ustar", "gnu", "pax"}) {
    auto s = open_tar_source(dir.file(str(fmt, ".tar")));
    const std::string two = std::string(fmt) == "ustar" ? "x/two" : deep + "two";
    EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"a/one", two, "b/three"})) << fmt;
    const std::vector<std::string> b = bytes_of(*s);
    for (int i = 0; i < 3; ++i) {
      std::string want = str("jpeg bytes ", i, " ");
      for (int r = 0; r < i; ++r)
        for (int c = 0; c < 256; ++c) want += static_cast<char>(c);
      EXPECT_EQ(b[static_cast<std::size_t>(i)], want) << fmt << " sample " << i;
    }
  }
}
