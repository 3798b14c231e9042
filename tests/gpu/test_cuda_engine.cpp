// The CUDA engine as a whole: the static memory plan (host-only tests that run everywhere, and the
// engine's arena on a real chain), CUDA-graph replay against eager runs, io sets driven from two
// streams, the algorithm cache round trip, describe(), and clear errors for bad use.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/algo_cache.h"
#include "engine/cuda/autotune.h"
#include "engine/cuda/memory_plan.h"
#include "gpu_test_util.h"
#include "test_models.h"

using namespace sluice;
using namespace sluice::gputest;
namespace fs = std::filesystem;

namespace {

// ---- memory plan (no GPU needed) -----------------------------------------------------------------

TEST(MemoryPlan, TensorsAliveTogetherNeverOverlap) {
  // A chain with a skip connection: t0 lives until step 3.
  const std::vector<cuda::PlanItem> items = {{1000, 0, 3}, {500, 1, 2}, {700, 2, 3}, {300, 3, 4}, {1000, 4, 5}};
  const cuda::MemoryPlan plan = cuda::plan_memory(items, 256);
  EXPECT_TRUE(cuda::plan_is_valid(items, plan));
  for (std::size_t i = 0; i < items.size(); ++i) EXPECT_EQ(plan.offsets[i] % 256, 0u) << "item " << i;
}

TEST(MemoryPlan, AChainReusesMemory) {
  // Ten 1 MiB tensors, each read only by the next step: two buffers suffice.
  std::vector<cuda::PlanItem> items;
  for (int i = 0; i < 10; ++i) items.push_back({1u << 20, i, i + 1});
  const cuda::MemoryPlan plan = cuda::plan_memory(items, 256);
  EXPECT_TRUE(cuda::plan_is_valid(items, plan));
  EXPECT_EQ(plan.arena_bytes, 2u << 20);
  EXPECT_EQ(plan.naive_bytes, 10u << 20);
}

TEST(MemoryPlan, TensorsWithDisjointLifetimesShareBytes) {
  // A [0,1] and B [2,3] never live together: same offset.  C [1,2] and D [0,0] overlap A (and C
  // overlaps B), so they go after it, at the same offset as each other.
  const std::vector<cuda::PlanItem> items = {{4096, 0, 1}, {4096, 2, 3}, {1024, 1, 2}, {1024, 0, 0}};
  const cuda::MemoryPlan plan = cuda::plan_memory(items, 256);
  EXPECT_TRUE(cuda::plan_is_valid(items, plan));
  EXPECT_EQ(plan.offsets[0], 0u);
  EXPECT_EQ(plan.offsets[1], 0u);
  EXPECT_EQ(plan.offsets[2], 4096u);
  EXPECT_EQ(plan.offsets[3], 4096u);
  EXPECT_EQ(plan.arena_bytes, 5120u);
}

TEST(MemoryPlan, RandomLifetimesGiveValidPlans) {
  uint32_t s = 7;
  auto next = [&] { s = s * 1664525u + 1013904223u; return s >> 8; };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<cuda::PlanItem> items;
    const int n = 5 + static_cast<int>(next() % 40);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(next() % 30);
      items.push_back({1 + next() % 100000, first, first + static_cast<int>(next() % 8)});
    }
    const cuda::MemoryPlan plan = cuda::plan_memory(items, 256);
    ASSERT_TRUE(cuda::plan_is_valid(items, plan)) << "trial " << trial;
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
  }
}

TEST(MemoryPlan, ReadBeforeWriteIsAnError) {
  EXPECT_THROW(cuda::plan_memory({{100, 3, 2}}, 256), Error);
}

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / str("sluice-gpu-test-", tag, "-", ::getpid());
  fs::remove_all(p);
  return p;
}

// ---- the engine ----------------------------------------------------------------------------------

std::vector<Tensor> copy_outputs(Engine& e, int set, cudaStream_t s) {
  std::vector<Tensor> outs;
  for (std::size_t k = 0; k < e.outputs().size(); ++k) {
    outs.emplace_back(e.outputs()[k].dtype, e.outputs()[k].shape);
    EXPECT_EQ(cudaMemcpyAsync(outs.back().bytes.data(), e.output_buffer(set, static_cast<int>(k)), outs.back().nbytes(),
                              cudaMemcpyDeviceToHost, s), cudaSuccess);
  }
  return outs;
}

TEST(CudaEngine, MemoryPlanSharesActivationBuffers) {
  SLUICE_REQUIRE_GPU();
  EngineOptions o;
  o.io_sets = 1;
  o.cuda_graphs = false;
  auto e = create_cuda_engine(resnet_like(4, 64), o);
  const cuda::EngineStats* st = cuda::engine_stats(*e);
  ASSERT_NE(st, nullptr);
  EXPECT_GT(st->naive_bytes, 0u);
  // A chain of 10+ activations needs a few live at once, not all of them.
  EXPECT_LT(st->arena_bytes * 2, st->naive_bytes) << "arena " << st->arena_bytes << " naive " << st->naive_bytes;
  EXPECT_GE(st->convolutions, 8);
}

TEST(CudaEngine, GraphReplayEqualsEagerRunBitForBit) {
  SLUICE_REQUIRE_GPU();
  const Graph g = resnet_like(2, 32);
  const fs::path dir = temp_dir("replay");
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    EngineOptions o;
    o.precision = p;
    o.deterministic = true;
    o.cache_dir = dir.string();   // the same algorithms for both engines
    o.io_sets = 2;
    o.cuda_graphs = false;
    auto eager = create_cuda_engine(g, o);
    o.cuda_graphs = true;
    auto replay = create_cuda_engine(g, o);
    ASSERT_TRUE(cuda::engine_stats(*replay)->graphs_captured);
    ASSERT_FALSE(cuda::engine_stats(*eager)->graphs_captured);
    for (int set = 0; set < 2; ++set) {
      for (uint32_t seed : {5u, 6u}) {   // two inputs through the same captured graph
        const Tensor x = random_tensor(g.inputs[0], seed);
        const auto a = cuda::run_forward(*eager, x, set);
        const auto b = cuda::run_forward(*replay, x, set);
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].bytes, b[k].bytes) << "set " << set << " seed " << seed;
      }
    }
  }
  fs::remove_all(dir);
}

TEST(CudaEngine, IoSetsOnTwoStreamsGiveEachInputItsOwnResult) {
  SLUICE_REQUIRE_GPU();
  const Graph g = deeplab_like(2, 32, false);
  EngineOptions o;
  o.io_sets = 2;
  auto e = create_cuda_engine(g, o);
  const Tensor x0 = random_tensor(g.inputs[0], 1), x1 = random_tensor(g.inputs[0], 2);
  const auto ref0 = run_cpu(g, x0), ref1 = run_cpu(g, x1);
  cuda::Stream s0 = cuda::make_stream(), s1 = cuda::make_stream();
  ASSERT_EQ(cudaMemcpyAsync(e->input_buffer(0), x0.bytes.data(), x0.nbytes(), cudaMemcpyHostToDevice, s0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(e->input_buffer(1), x1.bytes.data(), x1.nbytes(), cudaMemcpyHostToDevice, s1), cudaSuccess);
  // Several passes alternating sets and streams: the engine orders them on the device.
  for (int i = 0; i < 3; ++i) {
    e->forward(0, s0.get());
    e->forward(1, s1.get());
  }
  const auto out1 = copy_outputs(*e, 1, s1);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  const auto out0 = copy_outputs(*e, 0, s0);
  ASSERT_EQ(cudaStreamSynchronize(s0), cudaSuccess);
  EXPECT_LE(rel_error(out0[0], ref0[0]), 1e-5);
  EXPECT_LE(rel_error(out1[0], ref1[0]), 1e-5);
}

TEST(CudaEngine, AlgorithmCacheRoundTrip) {
  SLUICE_REQUIRE_GPU();
  const fs::path dir = temp_dir("algos");
  const Graph g = resnet_like(2, 32);
  EngineOptions o;
  o.precision = Precision::TF32;
  o.cache_dir = dir.string();
  o.io_sets = 1;
  auto first = create_cuda_engine(g, o);
  const cuda::EngineStats a = *cuda::engine_stats(*first);
  EXPECT_GT(a.convolutions, 0);
  // Convolutions of identical shape share one entry: the second of them already finds it.
  EXPECT_GT(a.algos_measured, 0);
  EXPECT_LT(a.algos_measured, a.convolutions) << "resnet_like has repeated convolution shapes";
  EXPECT_EQ(a.algos_measured + a.algos_cached, a.convolutions);
  ASSERT_TRUE(fs::exists(dir / "cudnn-algorithms.tsv"));
  auto second = create_cuda_engine(g, o);
  const cuda::EngineStats b = *cuda::engine_stats(*second);
  EXPECT_EQ(b.algos_cached, b.convolutions) << "a second start must read every algorithm from the cache";
  EXPECT_EQ(b.algos_measured, 0);
  // Same algorithms, same results.
  const Tensor x = random_tensor(g.inputs[0], 3);
  EXPECT_EQ(cuda::run_forward(*first, x)[0].bytes, cuda::run_forward(*second, x)[0].bytes);
  // Another precision is another key: measured again.
  o.precision = Precision::BF16;
  auto third = create_cuda_engine(g, o);
  EXPECT_EQ(cuda::engine_stats(*third)->algos_measured, a.algos_measured);
  fs::remove_all(dir);
}

TEST(CudaEngine, ASecondBf16BuildOfASegmentationModelMeasuresNothing) {
  SLUICE_REQUIRE_GPU();
  // Dilated convolutions (space-to-batch), channels-last cuDNN graphs at bf16: the W4 model's kinds.
  const fs::path dir = temp_dir("algos-seg");
  const Graph g = deeplab_like(2, 64, /*argmax=*/true);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.cache_dir = dir.string();
  o.io_sets = 2;
  auto cold = create_cuda_engine(g, o);
  const EngineSetupTimes a = cold->setup_times();
  EXPECT_GT(a.algos_measured, 0);
  EXPECT_EQ(a.algos_measured, cuda::engine_stats(*cold)->algos_measured);
  EXPECT_GT(a.autotune_s, 0);
  EXPECT_GT(a.capture_s, 0);
  auto warm = create_cuda_engine(g, o);
  const EngineSetupTimes b = warm->setup_times();
  EXPECT_EQ(b.algos_measured, 0) << "the warm cache must answer every convolution";
  EXPECT_EQ(cuda::engine_stats(*warm)->algos_measured, 0);
  EXPECT_GT(b.algos_cached, 0);
  EXPECT_LT(b.autotune_s, a.autotune_s);
  // A cache file damaged meanwhile is ignored (measured again) and rewritten whole.
  { std::ofstream(dir / cuda::AlgoCache::kFileName, std::ios::app) << "damaged line\n"; }
  auto again = create_cuda_engine(g, o);
  EXPECT_EQ(again->setup_times().algos_measured, a.algos_measured);
  EXPECT_FALSE(cuda::AlgoCache(dir.string()).discarded());
  // No cache (--algo-cache none): everything measured again.
  o.cache_dir = "";
  EXPECT_EQ(create_cuda_engine(g, o)->setup_times().algos_measured, a.algos_measured);
  fs::remove_all(dir);
}

TEST(CudaEngine, QuickAutotuneTimesAPartOfTheBatchAndOffTimesNothing) {
  SLUICE_REQUIRE_GPU();
  // 512x512 inputs at batch 16: the first layers' 128x128 maps need only 4 samples for 65,536
  // output positions.
  const Graph g = deeplab_like(16, 512, /*argmax=*/false);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.cache_dir = "";   // every start chooses
  o.io_sets = 1;
  o.autotune = Autotune::Full;
  auto full = create_cuda_engine(g, o);
  o.autotune = Autotune::Quick;
  auto quick = create_cuda_engine(g, o);
  o.autotune = Autotune::Off;
  auto off = create_cuda_engine(g, o);
  const cuda::EngineStats f = *cuda::engine_stats(*full), q = *cuda::engine_stats(*quick), z = *cuda::engine_stats(*off);
  ASSERT_GT(f.algos_measured, 0);
  EXPECT_EQ(q.algos_measured, f.algos_measured) << "the same layers are chosen for, only less thoroughly";
  EXPECT_EQ(z.algos_measured, f.algos_measured);
  EXPECT_EQ(f.algos_untimed, 0) << "full times every layer";
  EXPECT_GT(f.candidates_timed, f.algos_measured) << "cudnnFind tries several algorithms per layer";
  EXPECT_EQ(f.samples_timed, f.samples_full) << "full times the whole batch";
  EXPECT_GT(q.samples_timed, 0);
  EXPECT_LT(q.samples_timed, q.samples_full) << "quick times the large layers on a part of the batch";
  EXPECT_GE(q.samples_timed * cuda::kTuningBatchDivisor, q.samples_full) << "never less than an eighth";
  EXPECT_EQ(z.candidates_timed, 0);
  EXPECT_EQ(z.samples_timed, 0);
  EXPECT_EQ(z.algos_untimed, z.algos_measured);
  // Whatever was chosen computes the same convolutions (bf16: a few ulps apart between algorithms).
  const Tensor x = random_tensor(g.inputs[0], 11);
  const Tensor ref = cuda::run_forward(*full, x)[0];
  EXPECT_LE(rel_error(cuda::run_forward(*quick, x)[0], ref), 2e-2);
  EXPECT_LE(rel_error(cuda::run_forward(*off, x)[0], ref), 2e-2);
}

TEST(CudaEngine, ACachedChoiceIsUsedWhenItWasMadeAtLeastAsThoroughlyAsAsked) {
  SLUICE_REQUIRE_GPU();
  const fs::path dir = temp_dir("algos-levels");
  const Graph g = deeplab_like(2, 64, /*argmax=*/true);
  EngineOptions o;
  o.precision = Precision::BF16;
  o.cache_dir = dir.string();
  o.io_sets = 1;
  auto start = [&](Autotune a) {
    o.autotune = a;
    return *cuda::engine_stats(*create_cuda_engine(g, o));
  };
  const cuda::EngineStats cold = start(Autotune::Quick);
  const int all = cold.algos_measured;
  ASSERT_GT(all, 0);
  EXPECT_EQ(start(Autotune::Quick).algos_measured, 0) << "a warm quick start measures nothing";
  EXPECT_EQ(start(Autotune::Off).algos_measured, 0) << "a quick choice serves an untimed start";
  EXPECT_EQ(start(Autotune::Full).algos_measured, all) << "full measures again what quick chose";
  EXPECT_EQ(start(Autotune::Full).algos_measured, 0) << "... and saves it";
  EXPECT_EQ(start(Autotune::Quick).algos_measured, 0) << "a full choice serves a quick start";
  // What an untimed start chose stands in only for the layers quick leaves untimed too.
  fs::remove_all(dir);
  EXPECT_EQ(start(Autotune::Off).algos_measured, all);
  const cuda::EngineStats after_off = start(Autotune::Quick);
  EXPECT_EQ(after_off.algos_measured, all - cold.algos_untimed);
  EXPECT_EQ(after_off.algos_untimed, 0) << "the untimed layers came from the cache";
  fs::remove_all(dir);
}

TEST(CudaEngine, DescribeNamesGpuCudnnAndPrecision) {
  SLUICE_REQUIRE_GPU();
  EngineOptions o;
  o.precision = Precision::TF32;
  o.io_sets = 1;
  auto e = create_cuda_engine(resnet_like(1, 32), o);
  const std::string d = e->describe();
  EXPECT_TRUE(std::regex_match(d, std::regex(R"(cuda .+ \(sm_\d+\), cuDNN \d+\.\d+\.\d+, tf32)"))) << d;
}

TEST(CudaEngine, EngineKeepsGraphInputAndOutputTypes) {
  SLUICE_REQUIRE_GPU();
  EngineOptions o;
  o.precision = Precision::BF16;
  o.io_sets = 1;
  auto e = create_cuda_engine(resnet_like(1, 32), o);
  EXPECT_EQ(e->input().dtype, DType::U8);
  ASSERT_EQ(e->outputs().size(), 1u);
  EXPECT_EQ(e->outputs()[0].dtype, DType::F32);   // converted back from bf16 inside the engine
  EXPECT_EQ(e->outputs()[0].shape, (Shape{1, 10}));
}

TEST(CudaEngine, BadUseGivesClearErrors) {
  SLUICE_REQUIRE_GPU();
  EngineOptions o;
  o.io_sets = 2;
  auto e = create_cuda_engine(resnet_like(1, 32), o);
  EXPECT_THROW(e->forward(2, nullptr), Error);
  EXPECT_THROW(e->output_buffer(0, 1), Error);
  // An op the engine does not implement is named with its node.
  GraphBuilder b({2, 3});
  b.node("NonZero", {"x"}, {typed("y", DType::I64, {2, 6})});
  b.output("y");
  try {
    create_cuda_engine(b.g, o);
    FAIL() << "expected an InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("NonZero"), std::string::npos) << err.what();
  }
  o.device = 99;
  EXPECT_THROW(create_cuda_engine(resnet_like(1, 32), o), UsageError);
}

TEST(CudaEngine, OversizedBatchFailsWithAMemoryMessage) {
  SLUICE_REQUIRE_GPU();
  // 1024 x 3 x 2048 x 2048 float activations: far beyond any GPU's memory.
  GraphBuilder b({1024, 3, 2048, 2048});
  b.node("Relu", {"x"}, {f32("r", {1024, 3, 2048, 2048})});
  b.node("Sigmoid", {"r"}, {f32("y", {1024, 3, 2048, 2048})});
  b.output("y");
  EngineOptions o;
  o.io_sets = 2;
  try {
    create_cuda_engine(b.g, o);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("smaller batch"), std::string::npos) << err.what();
  }
}

}  // namespace
