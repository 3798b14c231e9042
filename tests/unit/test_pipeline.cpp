// The per-rank pipeline on the host device: ordering, completeness, backpressure, stop and failure.
// The engine here is a small real Engine (a per-sample sum and a copy), so the test checks what the
// pipeline moves, not what a model computes; the mpi tests run the real model end to end.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "io/source.h"
#include "pipeline/pipeline.h"

using namespace sluice;

namespace {

// Output 0: per sample, the sum of its elements; output 1: its first element as int32.
class SumEngine final : public Engine {
 public:
  SumEngine(int64_t batch, Shape sample, int sets, int fail_at = -1)
      : batch_(batch), sample_(std::move(sample)), fail_at_(fail_at) {
    in_.name = "input";
    in_.dtype = DType::F32;
    in_.shape = {batch};
    in_.shape.insert(in_.shape.end(), sample_.begin(), sample_.end());
    outs_.push_back(ValueInfo{"sum", DType::F32, {batch}});
    outs_.push_back(ValueInfo{"first", DType::I32, {batch, 1}});
    for (int s = 0; s < sets; ++s) {
      inputs_.emplace_back(static_cast<std::size_t>(shape_numel(in_.shape)));
      sums_.emplace_back(static_cast<std::size_t>(batch));
      firsts_.emplace_back(static_cast<std::size_t>(batch));
    }
  }
  std::string describe() const override { return "sum"; }
  const ValueInfo& input() const override { return in_; }
  const std::vector<ValueInfo>& outputs() const override { return outs_; }
  int io_sets() const override { return static_cast<int>(inputs_.size()); }
  void* input_buffer(int s) override { return inputs_[static_cast<std::size_t>(s)].data(); }
  void* output_buffer(int s, int o) override {
    return o == 0 ? static_cast<void*>(sums_[static_cast<std::size_t>(s)].data())
                  : static_cast<void*>(firsts_[static_cast<std::size_t>(s)].data());
  }
  void forward(int s, void*) override {
    if (calls_++ == fail_at_) throw std::runtime_error("engine failure on purpose");
    const int64_t per = shape_numel(sample_);
    const float* x = inputs_[static_cast<std::size_t>(s)].data();
    for (int64_t b = 0; b < batch_; ++b) {
      float acc = 0;
      for (int64_t i = 0; i < per; ++i) acc += x[b * per + i];
      sums_[static_cast<std::size_t>(s)][static_cast<std::size_t>(b)] = acc;
      firsts_[static_cast<std::size_t>(s)][static_cast<std::size_t>(b)] = static_cast<int32_t>(x[b * per] * 1000);
    }
  }

 private:
  int64_t batch_;
  Shape sample_;
  int fail_at_;
  std::atomic<int> calls_{0};
  ValueInfo in_;
  std::vector<ValueInfo> outs_;
  std::vector<std::vector<float>> inputs_, sums_;
  std::vector<std::vector<int32_t>> firsts_;
};

// Keeps rows in memory; optionally slow, to exercise backpressure.
class MemoryFile : public RankFile {
 public:
  explicit MemoryFile(int delay_ms = 0) : delay_ms_(delay_ms) {}
  int64_t append(const RowBatch& b) override {
    store(b.rows, b.sample_index, b.data);
    // The keys travel in the batch, key_bytes_ each, NUL-padded.
    for (int64_t r = 0; key_bytes_ > 0 && r < b.rows; ++r) {
      EXPECT_NE(b.meta.keys, nullptr);
      if (!b.meta.keys) break;
      const char* k = b.meta.keys + static_cast<std::size_t>(r) * key_bytes_;
      rows_[b.sample_index[r]].key = std::string(k, std::find(k, k + key_bytes_, '\0'));
    }
    return 0;
  }
  void store(int64_t rows, const int64_t* index, const std::vector<const void*>& data) {
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    for (int64_t r = 0; r < rows; ++r) {
      Row row;
      row.sum = static_cast<const float*>(data[0])[r];
      row.first = static_cast<const int32_t*>(data[1])[r];
      row.committed = false;
      EXPECT_TRUE(rows_.emplace(index[r], row).second) << "index " << index[r] << " written twice";
      pending_.push_back(index[r]);
    }
  }
  void commit(ChunkRecord rec) override {
    EXPECT_EQ(static_cast<int64_t>(pending_.size()), rec.count);
    for (int64_t i : pending_) {
      EXPECT_GE(i, rec.first_index);
      EXPECT_LT(i, rec.first_index + rec.count);
      rows_[i].committed = true;
    }
    pending_.clear();
    chunks_.push_back(rec);
  }
  int64_t committed_rows() const override { return 0; }
  void close() override {}

  struct Row {
    float sum;
    int32_t first;
    bool committed;
    std::string key;
  };
  std::size_t key_bytes_ = 0;  // > 0: check and keep the keys each batch carries
  std::map<int64_t, Row> rows_;
  std::vector<int64_t> pending_;
  std::vector<ChunkRecord> chunks_;
  int delay_ms_;
};

// A MemoryFile that asks for its outputs deflated (as a compressed rank file does) and checks every
// encoded chunk it is handed: inflated and unshuffled, it must be the batch's raw rows.
class CodecFile final : public MemoryFile {
 public:
  explicit CodecFile(std::vector<ChunkLayout> layouts, int fail_at = -1, int delay_ms = 0)
      : MemoryFile(delay_ms), layouts_(std::move(layouts)), fail_at_(fail_at) {}
  std::size_t outputs() const override { return layouts_.size(); }
  ChunkLayout chunk_layout(std::size_t i) const override { return layouts_.at(i); }
  int64_t append(const RowBatch& b) override {
    if (appends_++ == fail_at_) throw std::runtime_error("file failure on purpose");
    const int64_t rows = b.rows;
    const int64_t* index = b.sample_index;
    const std::vector<const void*>& data = b.data;
    EXPECT_NE(b.encoded, nullptr);
    if (!b.encoded) return 0;
    const std::vector<EncodedRows>& encoded = *b.encoded;
    EXPECT_EQ(encoded.size(), layouts_.size());
    int64_t stored = 0;
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      const EncodedRows& e = encoded[i];
      const ChunkLayout& L = layouts_[i];
      buffers_.insert(e.data);
      if (e.chunks == 0) {
        ++raw_outputs_;
        continue;
      }
      EXPECT_EQ(e.chunks * L.rows, rows);
      for (int64_t k = 0; k < e.chunks; ++k) {
        const auto* raw = static_cast<const unsigned char*>(data[i]) + k * L.chunk_bytes();
        mismatches_ += decode_mismatches(L, e.data + k * e.stride, e.sizes[k], raw);
      }
      stored += e.chunks;
    }
    store(rows, index, data);
    first_rows_.push_back(index[0]);
    encoded_chunks_ += stored;
    return stored;
  }

  // Inflates one chunk, undoes the byte shuffle and counts bytes that differ from `raw`.
  static int64_t decode_mismatches(const ChunkLayout& L, const unsigned char* bytes, std::size_t size,
                                   const unsigned char* raw) {
    const std::size_t n = L.chunk_bytes();
    std::vector<unsigned char> shuffled(n), rows(n);
    uLongf got = static_cast<uLongf>(n);
    if (uncompress(shuffled.data(), &got, bytes, static_cast<uLong>(size)) != Z_OK || got != n)
      return static_cast<int64_t>(n);
    const std::size_t es = L.element_bytes, count = n / es;
    for (std::size_t j = 0; j < es; ++j)
      for (std::size_t e = 0; e < count; ++e) rows[e * es + j] = shuffled[j * count + e];
    int64_t bad = 0;
    for (std::size_t b = 0; b < n; ++b) bad += rows[b] != raw[b];
    return bad;
  }

  std::vector<ChunkLayout> layouts_;
  int fail_at_;
  int appends_ = 0;
  int64_t mismatches_ = 0, encoded_chunks_ = 0, raw_outputs_ = 0;
  std::set<const unsigned char*> buffers_;
  std::vector<int64_t> first_rows_;
};

// SumEngine's outputs deflated: `sum` in chunks of 4 rows (two per batch of 8), `first` in one.
std::vector<ChunkLayout> sum_layouts(int deflate = 1) {
  return {ChunkLayout{deflate, 4, 4, 4}, ChunkLayout{6, 8, 4, 4}};
}

// Hands out the samples in runs of `run` in order (the pipeline cuts them into batches), the way a
// rank works through its share.
class ListWork final : public WorkDistributor {
 public:
  ListWork(int64_t total, int64_t run) : total_(total) {
    for (int64_t first = 0; first < total; first += run) items_.push_back({first, std::min(run, total - first)});
  }
  std::optional<WorkItem> next() override {
    std::lock_guard<std::mutex> lock(m_);
    if (stop_ || items_.empty()) return std::nullopt;
    WorkItem w = items_.front();
    items_.pop_front();
    return w;
  }
  void committed(const WorkItem& w) override {
    done_ += w.count;
    std::lock_guard<std::mutex> lock(m_);
    commits_.push_back(w);
  }
  void request_stop() override { stop_ = true; }
  bool finish() override { return true; }
  int64_t job_committed() const override { return done_; }
  int64_t job_pending() const override { return total_; }

  int64_t total_;
  std::deque<WorkItem> items_;
  std::vector<WorkItem> commits_;
  std::mutex m_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> done_{0};
};

// Calls `stop` once the `at`-th batch is being stored: a stop at a known point of the run.
class StoppingFile final : public MemoryFile {
 public:
  StoppingFile(int at, std::function<void()> stop) : at_(at), stop_(std::move(stop)) {}
  int64_t append(const RowBatch& b) override {
    if (++appends_ == at_) stop_();
    return MemoryFile::append(b);
  }
  int at_, appends_ = 0;
  std::function<void()> stop_;
};

// Runs the pipeline with a stop request from another thread `ms` in: the run is then mid-way.
PipelineStats run_stopped_after(Pipeline& p, WorkDistributor& work, int ms) {
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    p.stop();
  });
  PipelineStats s = p.run(work);
  stopper.join();
  return s;
}

}  // namespace

TEST(Pipeline, WritesEverySampleOnceWithTheRightValuesAndKeys) {
  const Shape sample{2, 3};
  auto source = make_synthetic_source(203, sample, DType::F32, 11);  // 203: a short last batch
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  MemoryFile file;
  file.key_bytes_ = source->key_bytes();
  ASSERT_GT(file.key_bytes_, 0u);
  ListWork work(203, 16);
  PipelineOptions o;
  o.commit_batches = 2;
  o.prefetch = 3;
  o.egress_buffers = 2;
  o.reader_threads = 3;
  Pipeline p(*device, engine, *source, &file, o);
  PipelineStats s = p.run(work);

  EXPECT_EQ(s.samples, 203);
  EXPECT_EQ(s.batches, 26);  // 13 chunks of 2 batches; the last chunk's single batch has 11 samples
  EXPECT_EQ(s.chunks, 13);
  ASSERT_EQ(file.rows_.size(), 203u);
  std::vector<float> x(6);
  for (int64_t i = 0; i < 203; ++i) {
    source->read(i, 1, x.data());
    float sum = 0;
    for (float v : x) sum += v;
    const auto& row = file.rows_.at(i);
    EXPECT_EQ(row.sum, sum) << "sample " << i;
    EXPECT_EQ(row.first, static_cast<int32_t>(x[0] * 1000));
    EXPECT_TRUE(row.committed);
    EXPECT_EQ(row.key, source->key(i));  // read with the sample, carried to the file in its batch
  }
  EXPECT_EQ(p.committed_samples(), 203);
}

TEST(Pipeline, ASlowWriterStallsTheDriverInsteadOfGrowingMemory) {
  const Shape sample{4};
  auto source = make_synthetic_source(64, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2);
  MemoryFile slow(20);
  ListWork work(64, 8);
  PipelineOptions o;
  o.prefetch = 2;
  o.egress_buffers = 1;
  Pipeline p(*device, engine, *source, &slow, o);
  PipelineStats s = p.run(work);
  EXPECT_EQ(slow.rows_.size(), 64u);
  // 16 batches behind a 20 ms writer with one out-slot: the driver waits for it most of the time.
  EXPECT_GT(s.stall_output_s, 0.1);
  EXPECT_GT(s.write_s, 0.25);
}

TEST(Pipeline, StopFinishesTheBatchesInFlightAndCommitsThem) {
  const Shape sample{4};
  auto source = make_synthetic_source(4000, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2);
  MemoryFile slow(2);
  ListWork work(4000, 8);
  PipelineOptions o;
  o.commit_batches = 2;
  Pipeline p(*device, engine, *source, &slow, o);
  PipelineStats s = run_stopped_after(p, work, 60);
  EXPECT_LT(s.samples, 4000);
  EXPECT_GT(s.samples, 0);
  EXPECT_EQ(s.samples % 4, 0);  // whole batches
  EXPECT_TRUE(slow.pending_.empty());
  for (const auto& kv : slow.rows_) EXPECT_TRUE(kv.second.committed);
}

// A stop does not wait for the commit unit to fill up (a stop once drained a whole job):
// once the stop is seen, no new batch starts on the device; the batches already there are written
// and committed as a partial run, however many batches a commit would otherwise take.
TEST(Pipeline, AStopStartsNoNewBatchAndCommitsThePartialRun) {
  const Shape sample{4};
  auto source = make_synthetic_source(4000, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2);
  ListWork work(4000, 4000);
  PipelineOptions o;
  o.prefetch = 3;
  o.egress_buffers = 2;
  o.commit_batches = 1000;  // the whole job would be one commit
  Pipeline* pipeline = nullptr;
  StoppingFile file(/*at=*/5, [&] { pipeline->stop(); });
  Pipeline p(*device, engine, *source, &file, o);
  pipeline = &p;
  PipelineStats s = p.run(work);
  // Stopped while storing batch 5: at most the batches holding the other out-slots come after it.
  EXPECT_GE(s.batches, 5);
  EXPECT_LE(s.batches, 5 + o.egress_buffers);
  EXPECT_EQ(s.samples, s.batches * 4);
  ASSERT_EQ(file.chunks_.size(), 1u);  // one record: the partial run
  EXPECT_EQ(file.chunks_[0].first_index, 0);
  EXPECT_EQ(file.chunks_[0].count, s.samples);
  EXPECT_TRUE(file.pending_.empty());
  EXPECT_EQ(static_cast<int64_t>(file.rows_.size()), s.samples);
  ASSERT_EQ(work.commits_.size(), 1u);
  EXPECT_EQ(work.commits_[0].count, s.samples);
}

// Every --chunk-batches batches one record; a run that does not continue the previous one (a new
// range) starts a new record, so every record is contiguous in samples and in rows.
TEST(Pipeline, CommitsEveryCommitBatchesAndAtEachNewRange) {
  const Shape sample{2};
  auto source = make_synthetic_source(200, sample, DType::F32, 3);
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  MemoryFile file;
  ListWork work(200, 200);
  // Two ranges, out of order: samples [96, 200) first (13 batches, the last one short), then [0, 96).
  work.items_ = {WorkItem{96, 104}, WorkItem{0, 96}};
  PipelineOptions o;
  o.commit_batches = 5;
  Pipeline p(*device, engine, *source, &file, o);
  PipelineStats s = p.run(work);
  EXPECT_EQ(s.samples, 200);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const ChunkRecord& r : file.chunks_) got.emplace_back(r.first_index, r.count);
  const std::vector<std::pair<int64_t, int64_t>> want{{96, 40}, {136, 40}, {176, 24}, {0, 40}, {40, 40}, {80, 16}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.chunks, 6);
}

TEST(Pipeline, AStageFailureEndsTheRunWithItsError) {
  const Shape sample{4};
  auto source = make_synthetic_source(400, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2, /*fail_at=*/5);
  MemoryFile file;
  ListWork work(400, 8);
  PipelineOptions o;
  o.commit_batches = 2;
  Pipeline p(*device, engine, *source, &file, o);
  try {
    p.run(work);
    FAIL() << "run() should rethrow the engine's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "engine failure on purpose");
  }
  EXPECT_LT(file.chunks_.size(), 3u);
}

TEST(Pipeline, RejectsASourceThatDoesNotMatchTheModelInput) {
  auto source = make_synthetic_source(10, Shape{5}, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, Shape{4}, 2);
  EXPECT_THROW(Pipeline(*device, engine, *source, nullptr, PipelineOptions{}), InputError);
}

TEST(SyntheticSource, SampleDependsOnlyOnSeedAndIndex) {
  auto a = make_synthetic_source(100, Shape{3, 7}, DType::F32, 5);
  auto b = make_synthetic_source(100, Shape{3, 7}, DType::F32, 5);
  auto c = make_synthetic_source(100, Shape{3, 7}, DType::F32, 6);
  std::vector<float> batch(10 * 21), one(21), other(21);
  a->read(40, 10, batch.data());
  for (int k = 0; k < 10; ++k) {
    b->read(40 + k, 1, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + k * 21, 21 * sizeof(float)));
  }
  c->read(40, 1, other.data());
  EXPECT_NE(0, std::memcmp(other.data(), batch.data(), 21 * sizeof(float)));
  for (float v : batch) {
    EXPECT_GE(v, -1.f);
    EXPECT_LT(v, 1.f);
  }
}

TEST(Pipeline, WithoutCompressionExtraWriterThreadsChangeNothing) {
  const Shape sample{3};
  auto source = make_synthetic_source(100, sample, DType::F32, 4);
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  MemoryFile file;
  ListWork work(100, 16);
  PipelineOptions o;
  o.writer_threads = 3;
  Pipeline p(*device, engine, *source, &file, o);
  PipelineStats s = p.run(work);
  EXPECT_EQ(s.samples, 100);
  EXPECT_EQ(s.encode_s, 0.0);  // nothing to encode: the one writer thread appends
  ASSERT_EQ(file.rows_.size(), 100u);
  for (const auto& kv : file.rows_) EXPECT_TRUE(kv.second.committed);
}

TEST(Pipeline, WriterThreadsCompressWholeChunksAndTheWriterStoresThemInBatchOrder) {
  const Shape sample{2, 3};
  // 204 samples in chunks of 16: 12 full chunks, then one of 12 samples (batches of 8 and 4).
  for (auto [slots, threads] : {std::pair{1, 1}, std::pair{4, 3}}) {
    SCOPED_TRACE(str(slots, " out-slots, ", threads, " writer threads"));
    auto source = make_synthetic_source(204, sample, DType::F32, 9);
    auto device = create_host_device();
    SumEngine engine(8, sample, 2);
    CodecFile file(sum_layouts(), -1, slots == 1 ? 3 : 0);
    ListWork work(204, 16);
    PipelineOptions o;
    o.commit_batches = 2;
    o.prefetch = 3;
    o.egress_buffers = slots;
    o.writer_threads = threads;
    Pipeline p(*device, engine, *source, &file, o);
    PipelineStats s = p.run(work);

    EXPECT_EQ(s.samples, 204);
    EXPECT_EQ(s.chunks, 13);
    EXPECT_GT(s.encode_s, 0.0);
    EXPECT_EQ(file.mismatches_, 0);
    // 25 full batches: 2 chunks of `sum` + 1 of `first` each.  The last batch (4 rows) is one whole
    // chunk of `sum` but half a chunk of `first`, which the file writes from the raw rows.
    EXPECT_EQ(file.encoded_chunks_, 25 * 3 + 1);
    EXPECT_EQ(file.raw_outputs_, 1);
    // Batches reach the file in dispatch order, each out-slot's encoding buffers reused.
    ASSERT_EQ(file.first_rows_.size(), 26u);
    for (std::size_t b = 0; b < file.first_rows_.size(); ++b) EXPECT_EQ(file.first_rows_[b], static_cast<int64_t>(b) * 8);
    EXPECT_LE(file.buffers_.size(), static_cast<std::size_t>(slots) * 2);
    ASSERT_EQ(file.rows_.size(), 204u);
    std::vector<float> x(6);
    for (int64_t i = 0; i < 204; ++i) {
      source->read(i, 1, x.data());
      float sum = 0;
      for (float v : x) sum += v;
      EXPECT_EQ(file.rows_.at(i).sum, sum) << "sample " << i;
      EXPECT_TRUE(file.rows_.at(i).committed);
    }
  }
}

TEST(Pipeline, AFailingEncoderEndsTheRunWithItsError) {
  const Shape sample{4};
  auto source = make_synthetic_source(400, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  CodecFile file(sum_layouts(/*deflate=*/12));  // no such level: the encoder throws
  ListWork work(400, 16);
  PipelineOptions o;
  o.writer_threads = 2;
  Pipeline p(*device, engine, *source, &file, o);
  try {
    p.run(work);
    FAIL() << "run() should rethrow the encoder's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deflate level 12"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(file.chunks_.empty());
}

TEST(Pipeline, AFailingWriterStopsTheEncodersAndEndsTheRunWithItsError) {
  const Shape sample{4};
  auto source = make_synthetic_source(4000, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  CodecFile file(sum_layouts(), /*fail_at=*/5);
  ListWork work(4000, 16);
  PipelineOptions o;
  o.commit_batches = 2;
  o.writer_threads = 3;
  Pipeline p(*device, engine, *source, &file, o);
  try {
    p.run(work);
    FAIL() << "run() should rethrow the file's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "file failure on purpose");
  }
  EXPECT_EQ(file.chunks_.size(), 2u);  // batches 0..4 were stored: chunks 0 and 1 committed
  EXPECT_EQ(file.mismatches_, 0);
}

TEST(Pipeline, StopWithCompressionStoresAndCommitsTheChunksInFlight) {
  const Shape sample{4};
  auto source = make_synthetic_source(4000, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  CodecFile slow(sum_layouts(), -1, /*delay_ms=*/2);
  ListWork work(4000, 16);
  PipelineOptions o;
  o.commit_batches = 2;
  o.writer_threads = 2;
  Pipeline p(*device, engine, *source, &slow, o);
  PipelineStats s = run_stopped_after(p, work, 60);
  EXPECT_GT(s.samples, 0);
  EXPECT_LT(s.samples, 4000);
  EXPECT_EQ(s.samples % 8, 0);  // whole batches
  EXPECT_EQ(slow.encoded_chunks_, s.batches * 3);
  EXPECT_EQ(slow.mismatches_, 0);
  EXPECT_TRUE(slow.pending_.empty());
  for (const auto& kv : slow.rows_) EXPECT_TRUE(kv.second.committed);
}
