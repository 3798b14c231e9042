// The CPU engine as a whole: the memory plan reuses memory without letting live tensors overlap,
// results are bit-identical whatever the batch composition and thread count, io sets are
// independent, and bad graphs end in one clear error.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/thread.h"

#include "engine/cpu/kernel.h"
#include "engine/cpu/memory_plan.h"
#include "test_cpu_util.h"

using namespace sluice;
using namespace sluice::cputest;

namespace {

TEST(CpuThreadPool, RunsEveryTaskOnceAndSurvivesAFailingJob) {
  cpu::ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(97);
    std::atomic<int> bad_thread{0};
    pool.parallel_for(97, [&](int64_t t, int thread) {
      hits[t].fetch_add(1);
      if (thread < 0 || thread >= 3) bad_thread = 1;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_EQ(bad_thread.load(), 0);
  }
  EXPECT_THROW(pool.parallel_for(10, [](int64_t t, int) { if (t == 7) throw InputError("task 7"); }), InputError);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t t, int) { sum += t; });
  EXPECT_EQ(sum.load(), 4950);
}

// Runs `body` in a child process whose address space is capped a little above what it uses now,
// so only a few more thread stacks (8 MB each) fit; returns the child's exit status (-signal when a
// signal, SIGABRT from std::terminate say, ended it).
int with_little_address_space(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::ifstream statm("/proc/self/statm");
    unsigned long pages = 0;
    statm >> pages;
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{48} << 20);
    const struct rlimit limit{cap, cap};
    ::setrlimit(RLIMIT_AS, &limit);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(CpuThreadPool, AThreadTheSystemRefusesIsAClearErrorNotStdTerminate) {
  const int status = with_little_address_space([] {
    try {
      cpu::ThreadPool pool(512);
      return 3;  // every thread started: the cap did not bite
    } catch (const Error& e) {
      const std::string what = e.what();
      std::fprintf(stderr, "%s\n", what.c_str());
      return what.find("cpu engine: cannot start thread") != std::string::npos && e.hint().find("--cpu-threads") !=
                 std::string::npos ? 0 : 4;
    } catch (...) {
      return 5;
    }
  });
  EXPECT_EQ(status, 0) << "3: no failure, 4: wrong message, 5: another exception, negative: a signal";
}

TEST(WorkerThread, AThreadTheSystemRefusesIsAClearErrorNotStdTerminate) {
  const int status = with_little_address_space([] {
    std::atomic<bool> go{false};
    std::vector<WorkerThread> threads;  // outside the try: joined after `go` is set
    try {
      for (int i = 0; i < 512; ++i)
        threads.emplace_back("reader-" + std::to_string(i), [&go] {
          while (!go) ::usleep(1000);
        });
      go = true;
      return 3;
    } catch (const Error& e) {
      go = true;  // the threads already started end, and are joined as `threads` goes
      threads.clear();
      const std::string what = e.what();
      std::fprintf(stderr, "%s\n", what.c_str());
      return what.find("cannot start the reader-") != std::string::npos ? 0 : 4;
    } catch (...) {
      go = true;
      return 5;
    }
  });
  EXPECT_EQ(status, 0) << "3: no failure, 4: wrong message, 5: another exception, negative: a signal";
}

// x -> Relu -> Relu -> ... (n times) -> y
Graph relu_chain(int n, Shape s) {
  GraphBuilder gb(s);
  std::string cur = "x";
  for (int i = 0; i < n; ++i) {
    const std::string out = i + 1 == n ? "y" : "r" + std::to_string(i);
    gb.node("Relu", {cur}, {f32(out, s)});
    cur = out;
  }
  gb.output("y");
  return gb.g;
}

TEST(CpuMemoryPlan, ChainReusesTwoBuffers) {
  const Graph g = relu_chain(10, {2, 3, 5, 7});
  const cpu::MemoryPlan plan = cpu::plan_memory(cpu::intermediate_lifetimes(g));
  ASSERT_EQ(plan.tensors.size(), 9u);  // r0..r8; x and y live in the io buffers
  const std::size_t one = cpu::align64(2 * 3 * 5 * 7 * sizeof(float));
  EXPECT_EQ(plan.total_bytes, 9 * one);
  EXPECT_EQ(plan.arena_bytes, 2 * one);  // a tensor and the one it feeds are alive together
  EXPECT_LT(plan.arena_bytes, plan.total_bytes);
}

TEST(CpuMemoryPlan, TensorsAliveTogetherNeverOverlap) {
  // Lifetimes of mixed sizes, including long-lived ones (residual branches).
  std::vector<cpu::TensorLife> lives;
  for (int i = 0; i < 40; ++i) {
    const int first = i, last = i + (i % 3 == 0 ? 7 : 1 + i % 2);
    lives.push_back({"t" + std::to_string(i), static_cast<std::size_t>(100 + (i * 7919) % 5000), first, last});
  }
  const cpu::MemoryPlan plan = cpu::plan_memory(lives);
  ASSERT_EQ(plan.tensors.size(), lives.size());
  for (const auto& a : plan.tensors) {
    EXPECT_EQ(a.offset % 64, 0u);
    EXPECT_LE(a.offset + a.bytes, plan.arena_bytes);
    for (const auto& b : plan.tensors) {
      if (&a == &b || a.last < b.first || b.last < a.first) continue;
      const bool disjoint = a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
      EXPECT_TRUE(disjoint) << a.name << " and " << b.name << " are alive together and overlap";
    }
  }
  EXPECT_LT(plan.arena_bytes, plan.total_bytes / 2);
}

TEST(CpuEngine, ChainComputesThroughTheSharedArena) {
  // Alternating Relu/Neg through a chain whose intermediates share two arena slots.
  GraphBuilder gb({1, 2, 3, 4});
  std::string cur = "x";
  for (int i = 0; i < 7; ++i) {
    const std::string out = i == 6 ? "y" : "t" + std::to_string(i);
    gb.node(i % 2 ? "Neg" : "Relu", {cur}, {f32(out, {1, 2, 3, 4})});
    cur = out;
  }
  gb.output("y");
  const auto x = random_values(24, 5);
  const auto y = run_f32(gb.g, x);
  // relu, neg, relu, neg, relu, neg, relu  ==  relu(-relu(-relu(...))) = 0 for all inputs after
  // the second pair; check against a direct evaluation.
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = x[i];
    for (int k = 0; k < 7; ++k) v = k % 2 ? -v : std::max(v, 0.f);
    EXPECT_EQ(y[i], v);
  }
}

// A small CNN that touches the GEMM paths (im2col, pointwise, depthwise, ConvTranspose, Gemm,
// MatMul) and the reductions, for batch size `b`.
Graph small_cnn(int64_t b) {
  GraphBuilder gb({b, 3, 13, 11});
  gb.constant_f("w1", {16, 3, 3, 3}, random_values(16 * 27, 21)).constant_f("b1", {16}, random_values(16, 22));
  gb.constant_f("w2", {16, 1, 3, 3}, random_values(16 * 9, 23));
  gb.constant_f("w3", {24, 16, 1, 1}, random_values(24 * 16, 24));
  gb.constant_f("wt", {24, 8, 2, 2}, random_values(24 * 32, 25));
  gb.constant_f("wf", {10, 8}, random_values(80, 26)).constant_f("bf", {10}, random_values(10, 27));
  gb.constant_f("wm", {12, 8}, random_values(96, 28));
  Node& c1 = gb.node("FusedConv", {"x", "w1", "b1"}, {f32("c1", {b, 16, 13, 11})}, "sluice");
  c1.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  c1.attrs["activation"] = Attribute::of_string("Relu");
  Node& c2 = gb.node("Conv", {"c1", "w2"}, {f32("c2", {b, 16, 7, 6})});
  c2.attrs["group"] = Attribute::of_int(16);
  c2.attrs["strides"] = Attribute::of_ints({2, 2});
  c2.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  gb.node("Conv", {"c2", "w3"}, {f32("c3", {b, 24, 7, 6})});
  Node& t = gb.node("ConvTranspose", {"c3", "wt"}, {f32("t", {b, 8, 14, 12})});
  t.attrs["strides"] = Attribute::of_ints({2, 2});
  gb.node("MatMul", {"t", "wm"}, {f32("mm", {b, 8, 14, 8})});
  Node& r = gb.node("Resize", {"mm", "", "", "sz"}, {f32("rs", {b, 8, 9, 5})});
  gb.constant_i("sz", {4}, {b, 8, 9, 5});
  r.attrs["mode"] = Attribute::of_string("linear");
  gb.node("GlobalAveragePool", {"rs"}, {f32("gp", {b, 8, 1, 1})});
  gb.node("Flatten", {"gp"}, {f32("fl", {b, 8})});
  Node& fc = gb.node("Gemm", {"fl", "wf", "bf"}, {f32("fc", {b, 10})});
  fc.attrs["transB"] = Attribute::of_int(1);
  gb.node("Softmax", {"fc"}, {f32("prob", {b, 10})});
  gb.output("prob").output("mm");
  return gb.g;
}

TEST(CpuEngine, SampleResultDoesNotDependOnItsBatch) {
  const int64_t per = 3 * 13 * 11;
  const auto x5 = random_values(5 * per, 99);
  const auto batch5 = run_bytes(small_cnn(5), x5.data());
  for (int64_t k = 0; k < 5; ++k) {
    const std::vector<float> xk(x5.begin() + k * per, x5.begin() + (k + 1) * per);
    const auto single = run_bytes(small_cnn(1), xk.data());
    for (std::size_t o = 0; o < single.size(); ++o) {
      const std::size_t n = single[o].size();
      ASSERT_EQ(batch5[o].size(), 5 * n);
      EXPECT_EQ(0, std::memcmp(batch5[o].data() + k * n, single[o].data(), n))
          << "sample " << k << " of output " << o << " differs from the same sample run alone";
    }
  }
}

TEST(CpuEngine, ResultDoesNotDependOnTheThreadCount) {
  const auto x = random_values(4 * 3 * 13 * 11, 7);
  const Graph g = small_cnn(4);
  const auto one = run_bytes(g, x.data(), 1);
  for (int threads : {2, 3, 5}) EXPECT_EQ(run_bytes(g, x.data(), threads), one) << threads << " threads";
}

TEST(CpuEngine, IoSetsAreIndependent) {
  const Graph g = relu_chain(3, {2, 4});
  EngineOptions opt;
  opt.io_sets = 3;
  opt.threads = 2;
  auto e = create_cpu_engine(g, opt);
  EXPECT_EQ(e->io_sets(), 3);
  for (int s = 0; s < 3; ++s) {
    float* in = static_cast<float*>(e->input_buffer(s));
    for (int i = 0; i < 8; ++i) in[i] = static_cast<float>((s + 1) * (i - 3));
  }
  for (int s : {2, 0, 1}) e->forward(s, nullptr);
  for (int s = 0; s < 3; ++s) {
    const float* out = static_cast<const float*>(e->output_buffer(s, 0));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], std::max(0.f, static_cast<float>((s + 1) * (i - 3)))) << "set " << s;
  }
  EXPECT_NE(e->input_buffer(0), e->input_buffer(1));
  EXPECT_NE(e->output_buffer(0, 0), e->output_buffer(1, 0));
}

TEST(CpuEngine, DescribesItsThreads) {
  EngineOptions opt;
  opt.threads = 3;
  EXPECT_EQ(create_cpu_engine(relu_chain(1, {2}), opt)->describe(), "cpu (3 threads)");
  opt.threads = 1;
  EXPECT_EQ(create_cpu_engine(relu_chain(1, {2}), opt)->describe(), "cpu (1 thread)");
}

TEST(CpuEngine, GraphOutputThatIsAlsoReadByANode) {
  GraphBuilder gb({2, 3});
  gb.node("Relu", {"x"}, {f32("a", {2, 3})});
  gb.node("Neg", {"a"}, {f32("b", {2, 3})});
  gb.output("a").output("b");
  const std::vector<float> x = {-1, 2, -3, 4, -5, 6};
  const auto outs = run_bytes(gb.g, x.data());
  EXPECT_EQ(as<float>(outs[0]), (std::vector<float>{0, 2, 0, 4, 0, 6}));
  EXPECT_EQ(as<float>(outs[1]), (std::vector<float>{0, -2, 0, -4, 0, -6}));
}

TEST(CpuEngine, UnsupportedOpIsAnInputErrorNamingTheNode) {
  GraphBuilder gb({2, 3});
  gb.node("NonMaxSuppression", {"x"}, {f32("y", {2, 3})});
  gb.output("y");
  try {
    create_cpu_engine(gb.g, EngineOptions{});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("NonMaxSuppression"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), kExitBadInput);
  }
}

TEST(CpuEngine, DynamicShapeIsRejected) {
  GraphBuilder gb({-1, 3});
  gb.node("Relu", {"x"}, {f32("y", {-1, 3})});
  gb.output("y");
  EXPECT_THROW(create_cpu_engine(gb.g, EngineOptions{}), InputError);
}

TEST(CpuEngine, ShapeMismatchInTheGraphIsRejected) {
  GraphBuilder gb({1, 3, 8, 8});
  Node& p = gb.node("MaxPool", {"x"}, {f32("y", {1, 3, 5, 5})});  // 2x2/2 gives 4x4
  p.attrs["kernel_shape"] = Attribute::of_ints({2, 2});
  p.attrs["strides"] = Attribute::of_ints({2, 2});
  gb.output("y");
  EXPECT_THROW(create_cpu_engine(gb.g, EngineOptions{}), InputError);
}

}  // namespace
