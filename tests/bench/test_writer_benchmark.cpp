// The writer stage's throughput with compression, printed for BENCHMARKS.md (no timed assertion):
// MB/s of raw rows a rank file takes in when the writer is the bottleneck, for the quickstart
// model's real logits [32, 8, 64, 64] float32, stored raw, deflated at level 1 by HDF5 inside
// H5Dwrite (no encoder threads), and deflated at level 1 by 1 and 2 writer threads.  The engine
// replays logits the real quickstart model computed once, so the rest of the pipeline costs next
// to nothing and the figures are the writer's.  Skipped unless SLUICE_BENCH=1:
//   SLUICE_BENCH=1 build/tests/sluice_bench --gtest_filter='WriterBenchmark.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/engine.h"
#include "io/source.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "pipeline/pipeline.h"
#include "unit/test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

constexpr int64_t kBatch = 32;
constexpr int kDistinct = 4;  // batches of real logits, replayed in turn

// Logits of the quickstart model for samples [0, kDistinct * kBatch) of its job's synthetic input.
std::vector<std::vector<float>> quickstart_logits(Shape& logits_shape) {
  PrepareOptions po;
  po.batch_size = kBatch;
  po.sample_shape = {3, 64, 64};
  po.outputs.push_back(OutputSpec{"logits", OutputSpec::Kind::Logits, DType::F32, 0});
  Graph g = prepare_graph(load_onnx(SLUICE_SOURCE_DIR "/jobs/models/quickstart.onnx"), po);
  auto engine = create_engine("cpu", g, EngineOptions{});
  auto source = make_synthetic_source(kDistinct * kBatch, po.sample_shape, DType::F32, 7);
  const ValueInfo& out = engine->outputs().at(0);
  logits_shape = out.shape;
  std::vector<std::vector<float>> batches;
  for (int b = 0; b < kDistinct; ++b) {
    source->read(b * kBatch, kBatch, engine->input_buffer(0));
    engine->forward(0, nullptr);
    const auto* p = static_cast<const float*>(engine->output_buffer(0, 0));
    batches.emplace_back(p, p + out.bytes() / sizeof(float));
  }
  return batches;
}

// Hands out the recorded batches of logits, one per forward pass; its input is one float a sample.
class ReplayEngine final : public Engine {
 public:
  ReplayEngine(const std::vector<std::vector<float>>& logits, const Shape& shape) : logits_(logits) {
    in_ = ValueInfo{"input", DType::F32, {kBatch, 1}};
    outs_.push_back(ValueInfo{"logits", DType::F32, shape});
    for (int s = 0; s < 2; ++s) {
      inputs_.emplace_back(kBatch);
      outputs_.emplace_back(logits_[0].size());
    }
  }
  std::string describe() const override { return "replay"; }
  const ValueInfo& input() const override { return in_; }
  const std::vector<ValueInfo>& outputs() const override { return outs_; }
  int io_sets() const override { return 2; }
  void* input_buffer(int s) override { return inputs_[static_cast<std::size_t>(s)].data(); }
  void* output_buffer(int s, int) override { return outputs_[static_cast<std::size_t>(s)].data(); }
  void forward(int s, void*) override {
    const auto& src = logits_[static_cast<std::size_t>(calls_++ % kDistinct)];
    std::memcpy(outputs_[static_cast<std::size_t>(s)].data(), src.data(), src.size() * sizeof(float));
  }

 private:
  const std::vector<std::vector<float>>& logits_;
  int64_t calls_ = 0;
  ValueInfo in_;
  std::vector<ValueInfo> outs_;
  std::vector<std::vector<float>> inputs_, outputs_;
};

// The rank file without its chunk layout: the pipeline cannot encode, so HDF5 deflates every chunk
// inside H5Dwrite on the one writer thread (how compression worked before writer threads encoded).
class FilterInsideHdf5 final : public RankFile {
 public:
  explicit FilterInsideHdf5(RankFile& f) : f_(f) {}
  int64_t append(const RowBatch& b) override {
    RowBatch raw = b;
    raw.encoded = nullptr;
    return f_.append(raw);
  }
  void commit(ChunkRecord r) override { f_.commit(r); }
  int64_t committed_rows() const override { return f_.committed_rows(); }
  void close() override { f_.close(); }

 private:
  RankFile& f_;
};

class InOrderWork final : public WorkDistributor {
 public:
  explicit InOrderWork(int64_t total) : total_(total) {}
  std::optional<WorkItem> next() override {
    if (done_) return std::nullopt;
    done_ = true;
    return WorkItem{0, total_};
  }
  void committed(const WorkItem&) override {}
  void request_stop() override {}
  bool finish() override { return true; }
  int64_t job_committed() const override { return 0; }
  int64_t job_pending() const override { return total_; }

 private:
  int64_t total_;
  bool done_ = false;
};

}  // namespace

TEST(WriterBenchmark, QuickstartLogitsDeflatedWithOneAndTwoWriterThreads) {
  const char* on = std::getenv("SLUICE_BENCH");
  if (!on || std::strcmp(on, "1") != 0) GTEST_SKIP() << "set SLUICE_BENCH=1 to run";
  Shape shape;
  const auto logits = quickstart_logits(shape);
  ASSERT_EQ(shape, (Shape{kBatch, 8, 64, 64}));
  const int64_t n = 512;  // 16 batches, 64 MB of raw rows
  const DatasetSpec raw_spec{"logits", DType::F32, Shape(shape.begin() + 1, shape.end())};
  const double raw_mb = static_cast<double>(n) * static_cast<double>(raw_spec.row_bytes()) / 1e6;
  struct Config {
    int level, threads;
    bool inside_hdf5;
  };
  std::printf("[ writer bench ] quickstart logits float32 [8,64,64] (128 KB a row), %lld rows in batches of %lld, "
              "chunks of 2 batches, best of 3\n",
              static_cast<long long>(n), static_cast<long long>(kBatch));
  std::printf("[ writer bench ] %-32s %10s %8s %9s %10s %10s\n", "config", "MB/s raw", "wall s", "write s",
              "encode s", "file MB");
  std::uintmax_t raw_size = 0;
  for (Config c : {Config{0, 1, false}, Config{1, 1, true}, Config{1, 1, false}, Config{1, 2, false}}) {
    double best = 0, wall = 0, write = 0, encode = 0;
    std::uintmax_t size = 0;
    for (int rep = 0; rep < 3; ++rep) {
      TempDir dir;
      const std::string path = dir.file("rank-00000.h5");
      DatasetSpec spec = raw_spec;
      spec.deflate = c.level;
      ReplayEngine engine(logits, shape);
      auto source = make_synthetic_source(n, {1}, DType::F32, 0);
      auto device = create_host_device();
      auto file = open_rank_file(path, {spec}, kBatch, test_meta(), false);
      PipelineOptions o;
      o.reader_threads = 1;
      o.writer_threads = c.threads;
      o.commit_batches = 2;
      FilterInsideHdf5 hidden(*file);
      Pipeline p(*device, engine, *source, c.inside_hdf5 ? static_cast<RankFile*>(&hidden) : file.get(), o);
      InOrderWork work(n);
      const PipelineStats s = p.run(work);
      file->close();
      ASSERT_EQ(s.samples, n);
      const RankFileInfo info = read_rank_file(path);
      ASSERT_EQ(info.committed_rows, n);
      // Spot check: row 100 is sample 100, which replayed batch 3 row 4.
      const auto row = read_raw_rows(path, "/outputs/logits", 100, 1);
      ASSERT_EQ(row.size(), raw_spec.row_bytes());
      EXPECT_EQ(0, std::memcmp(row.data(), logits[3].data() + 4 * (row.size() / 4), row.size()));
      const double mbs = raw_mb / s.wall_s;
      if (mbs > best) {
        best = mbs;
        wall = s.wall_s;
        write = s.write_s;
        encode = s.encode_s;
        size = std::filesystem::file_size(path);
      }
    }
    if (c.level == 0) raw_size = size;
    const std::string name = c.inside_hdf5 ? str("compression ", c.level, ", in H5Dwrite")
                                           : str("compression ", c.level, ", ", c.threads, " writer thread",
                                                 c.threads > 1 ? "s" : "");
    std::printf("[ writer bench ] %-32s %10.1f %8.3f %9.3f %10.3f %10.1f\n", name.c_str(), best, wall, write, encode,
                static_cast<double>(size) / 1e6);
    if (c.level > 0) EXPECT_LT(size, raw_size);
  }
}
