// The per-rank pipeline on the host device: ordering, completeness, backpressure, stop and failure.
// The engine here is a small real Engine (a per-sample sum and a copy), so the test checks what the
// pipeline moves, not what a model computes; the mpi tests run the real model end to end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

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
class MemoryFile final : public RankFile {
 public:
  explicit MemoryFile(int delay_ms = 0) : delay_ms_(delay_ms) {}
  void append(int64_t rows, const int64_t* index, const std::vector<const void*>& data) override {
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
  };
  std::map<int64_t, Row> rows_;
  std::vector<int64_t> pending_;
  std::vector<ChunkRecord> chunks_;
  int delay_ms_;
};

class ListWork final : public WorkDistributor {
 public:
  ListWork(Chunking c, std::vector<int64_t> ids) : c_(c), ids_(ids.begin(), ids.end()) {}
  std::optional<WorkItem> next() override {
    std::lock_guard<std::mutex> lock(m_);
    if (stop_ || ids_.empty()) return std::nullopt;
    int64_t id = ids_.front();
    ids_.pop_front();
    return c_.item(id);
  }
  void committed(const WorkItem& w) override { done_ += w.count; }
  void request_stop() override { stop_ = true; }
  bool finish() override { return true; }
  int64_t job_committed() const override { return done_; }
  int64_t job_pending() const override { return c_.total; }

  Chunking c_;
  std::deque<int64_t> ids_;
  std::mutex m_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> done_{0};
};

std::vector<int64_t> all_chunks(const Chunking& c) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < c.chunks(); ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(Pipeline, WritesEverySampleOnceWithTheRightValues) {
  const Shape sample{2, 3};
  auto source = make_synthetic_source(203, sample, DType::F32, 11);  // 203: a short last batch
  auto device = create_host_device();
  SumEngine engine(8, sample, 2);
  MemoryFile file;
  Chunking chunks{203, 16};
  ListWork work(chunks, all_chunks(chunks));
  PipelineOptions o;
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
  }
  EXPECT_EQ(p.committed_samples(), 203);
}

TEST(Pipeline, ASlowWriterStallsTheDriverInsteadOfGrowingMemory) {
  const Shape sample{4};
  auto source = make_synthetic_source(64, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2);
  MemoryFile slow(20);
  Chunking chunks{64, 8};
  ListWork work(chunks, all_chunks(chunks));
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

TEST(Pipeline, StopFinishesTheChunksInFlightAndCommitsThem) {
  const Shape sample{4};
  auto source = make_synthetic_source(4000, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2);
  MemoryFile slow(2);
  Chunking chunks{4000, 8};
  ListWork work(chunks, all_chunks(chunks));
  Pipeline p(*device, engine, *source, &slow, PipelineOptions{});
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    p.stop();
  });
  PipelineStats s = p.run(work);
  stopper.join();
  EXPECT_LT(s.samples, 4000);
  EXPECT_GT(s.samples, 0);
  EXPECT_EQ(s.samples % 8, 0);  // whole chunks only
  EXPECT_TRUE(slow.pending_.empty());
  for (const auto& kv : slow.rows_) EXPECT_TRUE(kv.second.committed);
}

TEST(Pipeline, AStageFailureEndsTheRunWithItsError) {
  const Shape sample{4};
  auto source = make_synthetic_source(400, sample, DType::F32, 1);
  auto device = create_host_device();
  SumEngine engine(4, sample, 2, /*fail_at=*/5);
  MemoryFile file;
  Chunking chunks{400, 8};
  ListWork work(chunks, all_chunks(chunks));
  Pipeline p(*device, engine, *source, &file, PipelineOptions{});
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
