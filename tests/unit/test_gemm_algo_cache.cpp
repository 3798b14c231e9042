// The cuBLASLt products' entries in the algorithm cache (engine/cuda/gemm_lt.cpp): a cublasLtMatmulAlgo_t
// is eight 64-bit words written in decimal after the level word; they survive the file, their level
// reads back as written, and a cached choice serves a start that asks no more than it (the rule the
// products share with the convolutions).  No GPU: the values only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "engine/algo_cache.h"

using namespace sluice;
using sluice::cuda::AlgoCache;
using sluice::cuda::parse_tuned;
using sluice::cuda::TuneLevel;
using sluice::cuda::tuned_value;
namespace fs = std::filesystem;

namespace {

const std::string kAlgo = "18446744073709551615 0 42 7 1 0 3 9";   // eight words, the largest uint64 first

TEST(GemmAlgoCache, AProductsAlgorithmSurvivesTheFileWithItsLevel) {
  const fs::path dir = fs::temp_directory_path() / str("sluice-gemm-algo-cache-", ::getpid());
  fs::remove_all(dir);
  const std::string key = "NVIDIA H200|sm_90|driver 13000|cudnn 9.19.0|bf16|gemm cublaslt 130000|50432x768x768|batch 1 0 0 0|bf16>bf16|ep 4|align 256 256 256 256|ws 33554432";
  {
    AlgoCache c(dir.string());
    c.put(key + " q", tuned_value(TuneLevel::Quick, kAlgo));
    c.put(key + " f", tuned_value(TuneLevel::Full, kAlgo));
    c.put(key + " h", tuned_value(TuneLevel::Heuristic, kAlgo));
    c.put(key + "|c 256", tuned_value(TuneLevel::Full, kAlgo));
    c.save();
  }
  AlgoCache c(dir.string());
  ASSERT_EQ(c.size(), 4u);
  for (const auto& [suffix, level] : {std::pair<std::string, TuneLevel>{" q", TuneLevel::Quick}, {" f", TuneLevel::Full},
                                      {" h", TuneLevel::Heuristic}, {"|c 256", TuneLevel::Full}}) {
    SCOPED_TRACE(suffix);
    const auto hit = c.get(key + suffix);
    ASSERT_TRUE(hit.has_value());
    const auto t = parse_tuned(*hit);
    EXPECT_EQ(t.level, level);
    EXPECT_EQ(t.choice, kAlgo);
  }
  fs::remove_all(dir);
}

TEST(GemmAlgoCache, AChoiceServesEveryStartThatAsksNoMoreThanItsLevel) {
  // gemm_lt.cpp uses a cached choice when its level >= the start's: off (Heuristic) takes any,
  // quick takes quick and full ones, full only full ones.
  const TuneLevel levels[] = {TuneLevel::Heuristic, TuneLevel::Quick, TuneLevel::Full};
  for (TuneLevel made : levels)
    for (TuneLevel asked : levels) {
      const bool served = parse_tuned(tuned_value(made, kAlgo)).level >= asked;
      EXPECT_EQ(served, static_cast<int>(made) >= static_cast<int>(asked));
    }
  EXPECT_TRUE(parse_tuned(tuned_value(TuneLevel::Quick, kAlgo)).level < TuneLevel::Full);
}

}  // namespace
