// The cuDNN algorithm cache's file (engine/algo_cache.h): keys, merging, sharing between processes,
// and damaged or foreign files.  No GPU: the file logic is apart from the cuDNN calls.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/algo_cache.h"

using namespace sluice;
using sluice::cuda::AlgoCache;
using sluice::cuda::AlgoCacheDevice;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / str("sluice-algo-cache-", tag, "-", ::getpid());
  fs::remove_all(p);
  return p;
}

std::string file_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

AlgoCacheDevice h200() {
  AlgoCacheDevice d;
  d.gpu = "NVIDIA H200";
  d.sm_major = 9;
  d.sm_minor = 0;
  d.driver = 12080;
  d.cudnn = "9.19.0";
  d.precision = "bf16";
  return d;
}

// The warning lines a cache's construction logged.
int warnings_loading(const fs::path& dir) {
  testing::internal::CaptureStderr();
  { AlgoCache c(dir.string()); }
  const std::string err = testing::internal::GetCapturedStderr();
  int n = 0;
  for (std::size_t at = 0; (at = err.find("ignoring the algorithm cache", at)) != std::string::npos; ++at) ++n;
  return n;
}

}  // namespace

TEST(AlgoCacheKey, EveryDeviceFieldChangesTheKey) {
  const std::string base = cuda::algo_cache_prefix(h200());
  std::set<std::string> keys{base};
  AlgoCacheDevice d = h200();
  d.gpu = "NVIDIA A100-SXM4-80GB";
  keys.insert(cuda::algo_cache_prefix(d));
  d = h200();
  d.sm_minor = 1;
  keys.insert(cuda::algo_cache_prefix(d));
  d = h200();
  d.driver = 12090;
  keys.insert(cuda::algo_cache_prefix(d));
  d = h200();
  d.cudnn = "9.20.0";
  keys.insert(cuda::algo_cache_prefix(d));
  d = h200();
  d.precision = "fp16";
  keys.insert(cuda::algo_cache_prefix(d));
  d = h200();
  d.deterministic = true;
  keys.insert(cuda::algo_cache_prefix(d));
  EXPECT_EQ(keys.size(), 7u) << "each field must be part of the key";
  EXPECT_EQ(base, "NVIDIA H200|sm_90|driver 12080|cudnn 9.19.0|bf16");
}

TEST(AlgoCacheKey, AGpuNameWithATabOrNewlineStillMakesAUsableKey) {
  AlgoCacheDevice d = h200();
  d.gpu = "odd\tname\n";
  const std::string key = cuda::algo_cache_prefix(d) + "|conv|x1,2";
  EXPECT_EQ(key.find_first_of("\t\n"), std::string::npos);
  AlgoCache c("");
  EXPECT_NO_THROW(c.put(key, "1 0 0"));
}

TEST(AlgoCacheFile, EntriesSurviveASaveAndReload) {
  const fs::path dir = temp_dir("reload");
  {
    AlgoCache c(dir.string());
    EXPECT_EQ(c.size(), 0u);
    c.put("gpu|conv|a", "1 2 0");
    c.put("gpu|conv|b", "6 1 1");
    c.save();
  }
  AlgoCache again(dir.string());
  EXPECT_FALSE(again.discarded());
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.get("gpu|conv|a").value_or(""), "1 2 0");
  EXPECT_EQ(again.get("gpu|conv|b").value_or(""), "6 1 1");
  EXPECT_FALSE(again.get("gpu|conv|c").has_value());
  fs::remove_all(dir);
}

TEST(AlgoCacheFile, AWriterThatLoadedEarlierKeepsTheOthersEntries) {
  const fs::path dir = temp_dir("merge");
  AlgoCache a(dir.string()), b(dir.string());
  a.put("k1", "1 0 0");
  b.put("k2", "2 0 0");
  a.save();
  b.save();   // b loaded before a saved: the merge keeps k1
  AlgoCache c(dir.string());
  EXPECT_EQ(c.get("k1").value_or(""), "1 0 0");
  EXPECT_EQ(c.get("k2").value_or(""), "2 0 0");
  fs::remove_all(dir);
}

TEST(AlgoCacheFile, ProcessesSavingAtOnceLoseNoEntryAndLeaveNoTemporaryFile) {
  const fs::path dir = temp_dir("processes");
  constexpr int kProcesses = 6, kSaves = 30;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      (void)::read(go[0], &c, 1);   // returns 0 once the parent closes its end: all start together
      for (int i = 0; i < kSaves; ++i) {
        // A start of its own each time, as ranks and jobs do: load, measure one, save.
        AlgoCache cache(dir.string());
        cache.put(str("gpu|conv|p", p, "|i", i), str(p, " ", i, " 0"));
        cache.save();
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  AlgoCache all(dir.string());
  EXPECT_FALSE(all.discarded());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kProcesses * kSaves));
  for (int p = 0; p < kProcesses; ++p)
    for (int i = 0; i < kSaves; ++i)
      EXPECT_EQ(all.get(str("gpu|conv|p", p, "|i", i)).value_or("lost"), str(p, " ", i, " 0"));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove_all(dir);
}

TEST(AlgoCacheFile, ADamagedFileIsIgnoredWithOneWarningAndRewritten) {
  const fs::path dir = temp_dir("damaged");
  {
    AlgoCache c(dir.string());
    c.put("good", "5 1 0");
    c.save();
  }
  const fs::path file = dir / AlgoCache::kFileName;
  std::ofstream(file, std::ios::app) << "no tab here\nkey\t1 1 0\n";
  EXPECT_EQ(warnings_loading(dir), 1);
  {
    AlgoCache c(dir.string());
    EXPECT_TRUE(c.discarded());
    EXPECT_EQ(c.size(), 0u) << "nothing of a damaged file is trusted";
    c.save();   // nothing new, but the damaged file is replaced
  }
  EXPECT_EQ(warnings_loading(dir), 0) << "the rewritten file loads cleanly";
  EXPECT_EQ(file_text(file).find("no tab here"), std::string::npos);
  fs::remove_all(dir);
}

TEST(AlgoCacheFile, AFileCutOffMidLineIsDamaged) {
  const fs::path dir = temp_dir("cut");
  {
    AlgoCache c(dir.string());
    c.put("a", "1 0 0");
    c.put("b", "2 0 0");
    c.save();
  }
  const fs::path file = dir / AlgoCache::kFileName;
  const std::string text = file_text(file);
  std::ofstream(file, std::ios::trunc) << text.substr(0, text.size() - 3);   // "b\t2" without " 0 0\n"
  AlgoCache c(dir.string());
  EXPECT_TRUE(c.discarded());
  EXPECT_FALSE(c.get("b").has_value()) << "a cut-off value must not be used";
  fs::remove_all(dir);
}

TEST(AlgoCacheFile, AForeignFileIsIgnoredAndReplacedByTheNextSave) {
  for (const std::string& foreign : {std::string("\x89PNG\r\n\x1a\n binary"), std::string("key\tvalue\n"),
                                     std::string("# sluice cuDNN algorithm cache v1: key<TAB>value\nold\t1 0 0\n")}) {
    const fs::path dir = temp_dir("foreign");
    fs::create_directories(dir);
    const fs::path file = dir / AlgoCache::kFileName;
    std::ofstream(file, std::ios::binary) << foreign;
    EXPECT_EQ(warnings_loading(dir), 1) << foreign;
    AlgoCache c(dir.string());
    EXPECT_TRUE(c.discarded());
    EXPECT_EQ(c.size(), 0u);
    c.put("new", "3 1 0");
    c.save();
    AlgoCache again(dir.string());
    EXPECT_FALSE(again.discarded());
    EXPECT_EQ(again.size(), 1u) << "the foreign entries are not merged back in";
    EXPECT_EQ(again.get("new").value_or(""), "3 1 0");
    fs::remove_all(dir);
  }
}

TEST(AlgoCacheFile, AnUnwritableFolderIsOnlyAWarning) {
  const fs::path dir = temp_dir("unwritable");
  std::ofstream(dir.string()) << "a file where the folder should be";
  AlgoCache c(dir.string());
  c.put("k", "1 0 0");
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(c.save());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("could not save the algorithm cache"), std::string::npos);
  EXPECT_EQ(c.get("k").value_or(""), "1 0 0") << "this start still uses what it measured";
  fs::remove(dir);
}

TEST(AlgoCacheFile, ADisabledCacheWritesNothing) {
  AlgoCache c("");
  c.put("k", "v");
  c.save();
  EXPECT_FALSE(c.enabled());
  EXPECT_EQ(c.path(), "");
  EXPECT_EQ(c.get("k").value_or(""), "v") << "still shared by identical layers of one start";
}

TEST(AlgoCacheLevels, AValueCarriesTheLevelItsChoiceWasMadeAt) {
  using cuda::TuneLevel;
  EXPECT_EQ(cuda::tuned_value(TuneLevel::Quick, "1 2 0"), "quick 1 2 0");
  EXPECT_EQ(cuda::tuned_value(TuneLevel::Heuristic, "legacy"), "heuristic legacy");
  EXPECT_EQ(cuda::tuned_value(TuneLevel::Full, "graph 3 eng0"), "graph 3 eng0") << "full choices read as before";
  for (TuneLevel l : {TuneLevel::Heuristic, TuneLevel::Quick, TuneLevel::Full})
    for (const std::string c : {"1 2 0", "legacy", "graph 3 eng0_k2=1"}) {
      const cuda::Tuned t = cuda::parse_tuned(cuda::tuned_value(l, c));
      EXPECT_EQ(t.level, l) << c;
      EXPECT_EQ(t.choice, c);
    }
  // Entries of caches written before the levels existed were measured in full.
  EXPECT_EQ(cuda::parse_tuned("6 1 1").level, TuneLevel::Full);
  EXPECT_EQ(cuda::parse_tuned("legacy").level, TuneLevel::Full);
  EXPECT_EQ(cuda::parse_tuned("quickly").level, TuneLevel::Full) << "the word needs its space";
  EXPECT_LT(TuneLevel::Heuristic, TuneLevel::Quick);
  EXPECT_LT(TuneLevel::Quick, TuneLevel::Full);
}

TEST(AlgoCacheLevels, NegligibleLayersAreTheSmallestWhoseFlopsFitTheShare) {
  // 1 % of 1000: the layers of 1, 2 and 3 FLOPs (6) fit, the one of 5 would make 11.
  EXPECT_EQ(cuda::negligible_flops({500, 3, 1, 489, 5, 2}, 0.01), 3);
  // Equal layers go together: the two of 6 (12) do not fit 1 % of 812, so none does; 1.5 % takes both.
  EXPECT_EQ(cuda::negligible_flops({400, 400, 6, 6}, 0.01), -1);
  EXPECT_EQ(cuda::negligible_flops({400, 400, 6, 6}, 0.015), 6);
  // Unknown FLOPs (0) neither count nor qualify; nothing known: none.
  EXPECT_EQ(cuda::negligible_flops({0, 0, 1000, 1}, 0.01), 1);
  EXPECT_EQ(cuda::negligible_flops({0, 0}, 0.5), -1);
  EXPECT_EQ(cuda::negligible_flops({}, 0.01), -1);
  EXPECT_EQ(cuda::negligible_flops({10, 10}, 0), -1) << "share 0: every layer is timed";
}

TEST(AlgoCacheLevels, QuickTimesAPrefixOfTheBatchThatStillFillsTheGpu) {
  // DeepLabV3 at 512x512, batch 64: 64x64 output maps need 16 samples for 65,536 positions.
  EXPECT_EQ(cuda::tuning_batch(64, 64 * 64), 16);
  // Larger maps: never less than an eighth of the batch.
  EXPECT_EQ(cuda::tuning_batch(64, 256 * 256), 8);
  EXPECT_EQ(cuda::tuning_batch(65, 256 * 256), 9);
  // Small maps: the whole batch (nothing to gain, the ranking could change).
  EXPECT_EQ(cuda::tuning_batch(64, 16 * 16), 64);
  EXPECT_EQ(cuda::tuning_batch(64, 32 * 32), 64);
  EXPECT_EQ(cuda::tuning_batch(1, 1 << 20), 1);
  EXPECT_EQ(cuda::tuning_batch(3, 0), 3) << "unknown positions: the whole batch";
}
