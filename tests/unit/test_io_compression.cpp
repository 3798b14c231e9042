// Compressed rank files written from chunks that other threads encoded (ChunkEncoder and
// RankFile::append with a RowBatch's encoded chunks): the bytes are exactly HDF5's shuffle + deflate, the rows read back
// exactly through HDF5, the file is smaller, and a kill -9 while encoded chunks are being stored
// loses no committed chunk.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "io/hdf5_util.h"
#include "io/rank_file.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

// logits and half compressed at level 4, argmax raw; the file's chunk rows are 8.
std::vector<DatasetSpec> mixed_specs(int level = 4) {
  return {DatasetSpec{"logits", DType::F32, {3, 4}, level}, DatasetSpec{"half", DType::F16, {2}, level},
          DatasetSpec{"argmax", DType::U8, {4}}};
}

// One batch's rows and, for each output the file lets callers encode, its chunks encoded on
// `threads` threads at once (chunk u on thread u % threads), as the pipeline's writer threads do.
struct EncodedBatch {
  std::vector<std::vector<unsigned char>> raw, bytes;
  std::vector<std::vector<std::size_t>> sizes;
  std::vector<EncodedRows> encoded;
  std::vector<const void*> data;
  std::vector<int64_t> index;
  RowBatch batch() const {
    RowBatch b;
    b.rows = static_cast<int64_t>(index.size());
    b.sample_index = index.data();
    b.data = data;
    b.encoded = &encoded;
    return b;
  }
};

EncodedBatch encode_batch(const RankFile& f, const std::vector<DatasetSpec>& specs, int64_t first, int64_t rows,
                          int threads) {
  EncodedBatch b;
  std::vector<std::pair<std::size_t, int64_t>> units;  // (output, chunk)
  std::size_t largest = 1;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    b.raw.push_back(make_rows(specs[i], first, rows));
    const ChunkLayout L = f.chunk_layout(i);
    const int64_t n = L.deflate > 0 && rows % L.rows == 0 ? rows / L.rows : 0;
    const std::size_t stride = n > 0 ? ChunkEncoder::bound(L.chunk_bytes()) : 0;
    b.bytes.emplace_back(static_cast<std::size_t>(n) * stride);
    b.sizes.emplace_back(static_cast<std::size_t>(n));
    for (int64_t k = 0; k < n; ++k) units.emplace_back(i, k);
    if (n > 0) largest = std::max(largest, L.chunk_bytes());
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ChunkEncoder enc(largest);
      for (std::size_t u = static_cast<std::size_t>(t); u < units.size(); u += static_cast<std::size_t>(threads)) {
        const auto [i, k] = units[u];
        const ChunkLayout L = f.chunk_layout(i);
        const std::size_t stride = b.bytes[i].size() / b.sizes[i].size();
        b.sizes[i][static_cast<std::size_t>(k)] =
            enc.encode(L, b.raw[i].data() + static_cast<std::size_t>(k) * L.chunk_bytes(),
                       b.bytes[i].data() + static_cast<std::size_t>(k) * stride, stride);
      }
    });
  for (auto& t : pool) t.join();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EncodedRows e;
    e.chunks = static_cast<int64_t>(b.sizes[i].size());
    e.data = b.bytes[i].data();
    e.sizes = b.sizes[i].data();
    e.stride = e.chunks > 0 ? b.bytes[i].size() / b.sizes[i].size() : 0;
    b.encoded.push_back(e);
    b.data.push_back(b.raw[i].data());
  }
  for (int64_t r = 0; r < rows; ++r) b.index.push_back(first + r);
  return b;
}

// write_chunk (test_io_util.h) with encoded chunks; returns the chunks stored as encoded.
int64_t write_chunk_encoded(RankFile& f, const std::vector<DatasetSpec>& specs, int64_t chunk_id, int64_t first,
                            int64_t count, int64_t batch, int threads, bool commit = true) {
  int64_t stored = 0;
  for (int64_t b = first; b < first + count; b += batch) {
    const int64_t rows = std::min(batch, first + count - b);
    EncodedBatch e = encode_batch(f, specs, b, rows, threads);
    stored += f.append(e.batch());
  }
  if (commit) f.commit(ChunkRecord{chunk_id, first, count, -1});
  return stored;
}

// The filters of a dataset as the HDF5 C API reports them: (shuffle element size, deflate level),
// 0 for a filter that is absent.
std::pair<unsigned, unsigned> filters_of(const std::string& path, const char* dataset) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  hid_t dcpl = H5Dget_create_plist(d);
  std::pair<unsigned, unsigned> out{0, 0};
  unsigned flags = 0, cd[4] = {0}, config = 0;
  std::size_t ncd = 4;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Pget_filter_by_id2(dcpl, H5Z_FILTER_SHUFFLE, &flags, &ncd, cd, 0, nullptr, &config) >= 0) out.first = cd[0];
  ncd = 4;
  if (H5Pget_filter_by_id2(dcpl, H5Z_FILTER_DEFLATE, &flags, &ncd, cd, 0, nullptr, &config) >= 0) out.second = cd[0];
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

}  // namespace

TEST(ChunkEncoder, OutputInflatesToTheShuffledRowsAtEveryLevelAndElementSize) {
  std::mt19937 rng(5);
  ChunkEncoder enc(4096);
  for (std::size_t es : {1u, 2u, 4u, 8u})
    for (int level : {1, 9, 4}) {
      SCOPED_TRACE(str("element size ", es, ", level ", level));
      const ChunkLayout L{level, 16, 8 * es, es};  // 16 rows of 8 elements
      std::vector<unsigned char> raw(L.chunk_bytes());
      for (std::size_t b = 0; b < raw.size(); ++b) raw[b] = static_cast<unsigned char>(b % es == 0 ? rng() % 4 : b / es);
      std::vector<unsigned char> out(ChunkEncoder::bound(raw.size()));
      const std::size_t n = enc.encode(L, raw.data(), out.data(), out.size());
      ASSERT_GT(n, 0u);
      std::vector<unsigned char> shuffled(raw.size());
      uLongf got = static_cast<uLongf>(shuffled.size());
      ASSERT_EQ(uncompress(shuffled.data(), &got, out.data(), static_cast<uLong>(n)), Z_OK);
      ASSERT_EQ(got, raw.size());
      // Byte j of element e sits at j * elements + e (one-byte elements stay in place).
      const std::size_t elements = raw.size() / es;
      int64_t bad = 0;
      for (std::size_t e = 0; e < elements; ++e)
        for (std::size_t j = 0; j < es; ++j) bad += shuffled[j * elements + e] != raw[e * es + j];
      EXPECT_EQ(bad, 0);
      // The stream is reset between chunks: the same chunk encodes to the same bytes again.
      std::vector<unsigned char> again(out.size());
      ASSERT_EQ(enc.encode(L, raw.data(), again.data(), again.size()), n);
      EXPECT_EQ(0, std::memcmp(out.data(), again.data(), n));
    }
  const ChunkLayout too_big{1, 2048, 4, 4};
  std::vector<unsigned char> raw(too_big.chunk_bytes()), out(ChunkEncoder::bound(raw.size()));
  EXPECT_THROW(enc.encode(too_big, raw.data(), out.data(), out.size()), Error);  // more than its 4096 bytes
}

TEST(RankFileCompression, LayoutNamesTheChunkingAndFiltersOfEachOutput) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  auto specs = mixed_specs();
  specs.push_back(DatasetSpec{"wide", DType::F32, {5 << 20}, 2});  // 20 MB rows: 1 row per 32 MB chunk
  auto f = open_rank_file(path, specs, 8, test_meta(), false);
  const ChunkLayout logits = f->chunk_layout(0), half = f->chunk_layout(1), argmax = f->chunk_layout(2),
                    wide = f->chunk_layout(3);
  EXPECT_EQ(logits.deflate, 4);
  EXPECT_EQ(logits.rows, 8);
  EXPECT_EQ(logits.row_bytes, 48u);
  EXPECT_EQ(logits.element_bytes, 4u);
  EXPECT_EQ(half.deflate, 4);
  EXPECT_EQ(half.element_bytes, 2u);
  EXPECT_EQ(argmax.deflate, 0);  // stored raw: nothing for callers to encode
  EXPECT_EQ(wide.deflate, 2);
  EXPECT_EQ(wide.rows, 1);
  EXPECT_THROW(f->chunk_layout(4), Error);
  f->close();
  // A resumed file keeps its level, whatever the resuming job asks for.
  for (DatasetSpec& s : specs) s.deflate = 0;
  auto g = open_rank_file(path, specs, 8, test_meta(), true);
  EXPECT_EQ(g->chunk_layout(0).deflate, 4);
  EXPECT_EQ(g->chunk_layout(2).deflate, 0);
  g->close();
}

TEST(RankFileCompression, ChunksEncodedOnSeveralThreadsReadBackExactly) {
  TempDir dir;
  const std::string path = dir.file("rank-00000.h5");
  const auto specs = mixed_specs();
  auto f = open_rank_file(path, specs, 8, test_meta(), false);
  // Whole batches store their encoded chunks: 2 per batch (logits, half); argmax goes in raw.
  EXPECT_EQ(write_chunk_encoded(*f, specs, 0, 0, 24, 8, 3), 3 * 2);
  // Batches of 8, 8, 4: the last is half a chunk, written from its raw rows.
  EXPECT_EQ(write_chunk_encoded(*f, specs, 1, 100, 20, 8, 3), 2 * 2);
  // The next commit starts on a fresh chunk (row 48, not 44).
  EXPECT_EQ(write_chunk_encoded(*f, specs, 2, 40, 16, 8, 2), 2 * 2);
  // Encoded chunks that would not start on a chunk boundary (after a 3-row batch) fall back to the
  // raw rows too.
  write_chunk(*f, specs, 3, 60, 3, 3, /*commit=*/false);
  EncodedBatch late = encode_batch(*f, specs, 63, 8, 2);
  EXPECT_EQ(late.encoded[0].chunks, 1);
  EXPECT_EQ(f->append(late.batch()), 0);
  f->commit(ChunkRecord{3, 60, 11, -1});
  f->close();

  const RankFileInfo info = read_rank_file(path);
  ASSERT_EQ(info.chunks.size(), 4u);
  const int64_t first_rows[] = {0, 24, 48, 64};
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(info.chunks[k].first_row, first_rows[k]);
    EXPECT_EQ(check_chunk_rows(path, specs, info.chunks[k]), 0) << "chunk " << k;
  }
  EXPECT_EQ(info.datasets[0].deflate, 4);
  EXPECT_EQ(info.datasets[2].deflate, 0);
  // What any HDF5 reader sees: shuffle (element size) then deflate on the compressed outputs.
  EXPECT_EQ(filters_of(path, "/outputs/logits"), std::make_pair(4u, 4u));
  EXPECT_EQ(filters_of(path, "/outputs/half"), std::make_pair(2u, 4u));
  EXPECT_EQ(filters_of(path, "/outputs/argmax"), std::make_pair(0u, 0u));
  const auto pad = read_raw_rows(path, "/sample_index", 44, 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(reinterpret_cast<const int64_t*>(pad.data())[r], -1);
}

TEST(RankFileCompression, CompressibleRowsTakeLessSpace) {
  TempDir dir;
  std::uintmax_t size[2] = {0, 0};
  for (int level : {0, 1}) {
    const std::string path = dir.file(str("rank-", level, ".h5"));
    const std::vector<DatasetSpec> specs{{"logits", DType::F32, {256}, level}};
    auto f = open_rank_file(path, specs, 32, test_meta(), false);
    for (int64_t k = 0; k < 8; ++k) write_chunk_encoded(*f, specs, k, k * 64, 64, 32, 2);
    f->close();
    for (const ChunkRecord& c : read_rank_file(path).chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
    size[level] = std::filesystem::file_size(path);
  }
  std::printf("[ compression ] 512 rows of 1 KB: %ju bytes raw, %ju bytes at level 1\n", size[0], size[1]);
  EXPECT_GT(size[0], 512u * 1024u);
  EXPECT_LT(size[1] * 2, size[0]);
}

// A child stores encoded chunks (12 rows a commit, batches of 4 = one HDF5 chunk) and reports each
// commit; the parent kills it at a random moment.  The committed chunks must read back, recover and
// take a resume, like those of a file HDF5 compressed itself (test_io_crash.cpp).
TEST(RankFileCompression, KillNineWhileStoringEncodedChunksLosesNoCommittedChunk) {
  TempDir dir;
  std::mt19937 rng(77);
  const std::vector<DatasetSpec> specs{{"logits", DType::F32, {6, 8}, 3}, {"argmax", DType::U8, {3}}};
  auto first_of = [](int64_t k) { return (k * 131) % 400 * 12; };
  int mid_commit = 0;
  const int trials = trial_count(10);
  for (int trial = 0; trial < trials; ++trial) {
    const std::string path = dir.file(str("rank-", trial, ".h5"));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      try {
        RankFileMeta meta = test_meta();
        meta.total_samples = 400 * 12;
        auto f = open_rank_file(path, specs, 4, meta, false);
        for (int32_t k = 0; k < 400; ++k) {
          write_chunk_encoded(*f, specs, k, first_of(k), 12, 4, 2);
          const int32_t done = k + 1;
          if (::write(fds[1], &done, sizeof done) != sizeof done) _exit(6);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        _exit(3);
      }
      _exit(0);
    }
    ::close(fds[1]);
    const int wait_commits = std::uniform_int_distribution<int>(1, 40)(rng);
    int32_t reported = 0, v = 0;
    while (reported < wait_commits && ::read(fds[0], &v, sizeof v) == sizeof v) reported = v;
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 1500)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself, status " << status;
    while (::read(fds[0], &v, sizeof v) == sizeof v) reported = v;
    ::close(fds[0]);
    SCOPED_TRACE(str("trial ", trial, ": ", reported, " commits reported"));
    const KilledCopy killed(path, str("encoded-", getpid(), "-trial-", trial, ".h5"));

    const RankFileInfo crashed = read_rank_file(path);
    EXPECT_FALSE(crashed.closed_cleanly);
    ASSERT_GE(crashed.chunks.size(), static_cast<std::size_t>(reported));
    ASSERT_LE(crashed.chunks.size(), static_cast<std::size_t>(reported) + 1);
    mid_commit += crashed.chunks.size() == static_cast<std::size_t>(reported) + 1;
    for (std::size_t k = 0; k < crashed.chunks.size(); ++k) {
      EXPECT_EQ(crashed.chunks[k].first_index, first_of(static_cast<int64_t>(k)));
      EXPECT_EQ(check_chunk_rows(path, specs, crashed.chunks[k]), 0) << "chunk " << k;
    }
    // Resuming recovers the file, and the next encoded chunks land after the committed ones.
    // A throw names its trial (a SCOPED_TRACE does not reach gtest's report of an exception).  A
    // kill that cut a metadata write short is salvaged by the recovery: the commits before the
    // torn block's rows are kept (test_io_crash.cpp).
    std::string recovered;
    try {
      recovered = recover_rank_file(path);
    } catch (const std::exception& e) {
      FAIL() << "trial " << trial << ": recovery threw: " << e.what();
    }
    int64_t n = static_cast<int64_t>(crashed.chunks.size());
    if (recovered.find("fails its checksum") != std::string::npos) n = static_cast<int64_t>(read_rank_file(path).chunks.size());
    EXPECT_EQ(every_row_reads(path), "") << "trial " << trial << ": " << recovered;
    try {
      auto f = open_rank_file(path, specs, 4, test_meta(), true);
      EXPECT_EQ(write_chunk_encoded(*f, specs, n, first_of(n), 12, 4, 2), 3);
      f->close();
    } catch (const std::exception& e) {
      FAIL() << "trial " << trial << " (" << reported << " commits reported, " << n
             << " on disk): the resume threw: " << e.what();
    }
    const RankFileInfo resumed = read_rank_file(path);
    ASSERT_EQ(resumed.chunks.size(), static_cast<std::size_t>(n + 1));
    for (const ChunkRecord& c : resumed.chunks) EXPECT_EQ(check_chunk_rows(path, specs, c), 0);
    EXPECT_EQ(every_row_reads(path), "") << "trial " << trial << ", resumed";
    std::error_code ec;
    std::filesystem::remove(path, ec);  // a soak's thousands of trials would fill the folder
  }
  std::printf("[ crash trials ] encoded chunks: %d trials, %d with the in-flight commit on disk\n", trials, mid_commit);
}
