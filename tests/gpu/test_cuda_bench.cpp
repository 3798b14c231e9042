// Throughput of the CUDA engine alone (no pipeline, no copies) on an exported model, per precision
// and activation layout.  Disabled in normal runs; on the GPU host:
//   SLUICE_BENCH_MODEL=m.onnx SLUICE_BENCH_SHAPE=3,512,512 SLUICE_BENCH_BATCH=32 [SLUICE_BENCH_HEAD=argmax]
//   sluice_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='Bench.*'
// Prints one line per configuration: build seconds (with and without the algorithm cache), ms per
// batch of replayed CUDA graphs (median of 5 timed runs of up to 10 batches), images/s.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "core/cuda/cuda_raii.h"
#include "gpu_test_util.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Bench, DISABLED_EngineThroughput) {
  SLUICE_REQUIRE_GPU();
  const char* path = std::getenv("SLUICE_BENCH_MODEL");
  if (!path) GTEST_SKIP() << "SLUICE_BENCH_MODEL is not set";
  PrepareOptions po;
  po.batch_size = std::getenv("SLUICE_BENCH_BATCH") ? std::atoll(std::getenv("SLUICE_BENCH_BATCH")) : 32;
  std::string s = std::getenv("SLUICE_BENCH_SHAPE") ? std::getenv("SLUICE_BENCH_SHAPE") : "3,224,224";
  for (std::size_t at = 0; at < s.size();) {
    const std::size_t comma = s.find(',', at);
    po.sample_shape.push_back(std::stoll(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  const std::string head = std::getenv("SLUICE_BENCH_HEAD") ? std::getenv("SLUICE_BENCH_HEAD") : "logits";
  OutputSpec spec;
  spec.name = head;
  spec.kind = head == "argmax" ? OutputSpec::Kind::ArgMax : OutputSpec::Kind::Logits;
  spec.dtype = head == "argmax" ? DType::U8 : DType::F32;
  po.outputs = {spec};
  const Graph g = prepare_graph(load_onnx(path), po);
  const auto cache = std::filesystem::temp_directory_path() / "sluice-bench-cache";
  std::filesystem::remove_all(cache);
  // SLUICE_BENCH_CONFIGS: precision:layout[:atrous] items, e.g. "bf16:nhwc tf32:nchw tf32:nhwc:off"; the
  // optional rest sets SLUICE_CUDA_ATROUS (off, the smallest dilation taking that path, or e.g. 4:all
  // to send NCHW convolutions that way too).
  struct Config { Precision p; std::string layout, atrous; };
  std::vector<Config> configs;
  std::string list = std::getenv("SLUICE_BENCH_CONFIGS") ? std::getenv("SLUICE_BENCH_CONFIGS")
                                                          : "bf16:nhwc bf16:nchw tf32:nchw fp16:nhwc fp32:nchw";
  for (std::size_t at = 0; at < list.size();) {
    std::size_t end = list.find(' ', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    const auto colon = item.find(':');
    if (colon != std::string::npos) {
      const std::string rest = item.substr(colon + 1);
      const auto second = rest.find(':');
      configs.push_back({precision_from_name(item.substr(0, colon)), rest.substr(0, second),
                         second == std::string::npos ? "" : rest.substr(second + 1)});
    }
    at = end + 1;
  }
  for (const Config& c : configs) {
    setenv("SLUICE_CUDA_LAYOUT", c.layout.c_str(), 1);
    if (c.atrous.empty()) unsetenv("SLUICE_CUDA_ATROUS");
    else setenv("SLUICE_CUDA_ATROUS", c.atrous.c_str(), 1);
    EngineOptions o;
    o.precision = c.p;
    o.cache_dir = cache.string();
    o.io_sets = 2;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Engine> e;
    try {
      e = create_cuda_engine(g, o);
    } catch (const std::exception& err) {
      ADD_FAILURE() << precision_name(c.p) << " " << c.layout << ": " << err.what();
      continue;
    }
    const double build = seconds_since(t0);
    e.reset();
    t0 = std::chrono::steady_clock::now();
    e = create_cuda_engine(g, o);   // again: algorithms from the cache
    const double rebuild = seconds_since(t0);
    cuda::Stream stream = cuda::make_stream();
    cuda::Event a = cuda::make_event(true), b = cuda::make_event(true);
    // Warm-up, which also sizes the timed runs to about 0.2 s each (a slow configuration must not
    // eat the whole time budget of a device call).
    ASSERT_EQ(cudaEventRecord(a, stream), cudaSuccess);
    for (int i = 0; i < 3; ++i) e->forward(i % 2, stream.get());
    ASSERT_EQ(cudaEventRecord(b, stream), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
    float warm = 0;
    cudaEventElapsedTime(&warm, a, b);
    const int per_rep = std::max(1, std::min(10, static_cast<int>(200.f / std::max(warm / 3.f, 0.01f))));
    std::vector<float> ms;
    for (int rep = 0; rep < 5; ++rep) {
      ASSERT_EQ(cudaEventRecord(a, stream), cudaSuccess);
      for (int i = 0; i < per_rep; ++i) e->forward(i % 2, stream.get());
      ASSERT_EQ(cudaEventRecord(b, stream), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      ms.push_back(t / static_cast<float>(per_rep));
    }
    std::sort(ms.begin(), ms.end());
    const auto* st = cuda::engine_stats(*e);
    std::printf("[ bench    ] %s batch %lld %s %s%s%s: build %.1f s (cached %.1f s), %.2f ms/batch, %.0f images/s, "
                "arena %.2f GiB (unplanned %.2f), %d steps, %d atrous convs\n",
                path, static_cast<long long>(po.batch_size), precision_name(c.p), c.layout.c_str(), c.atrous.empty() ? "" : " atrous ",
                c.atrous.c_str(), build, rebuild, ms[2], 1000.0 * static_cast<double>(po.batch_size) / ms[2],
                st->arena_bytes / 1073741824.0, st->naive_bytes / 1073741824.0, st->steps, st->atrous_convolutions);
    std::fflush(stdout);
  }
  unsetenv("SLUICE_CUDA_LAYOUT");
  unsetenv("SLUICE_CUDA_ATROUS");
}

}  // namespace
