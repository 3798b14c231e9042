// Job options: flags, job files (TOML) and their precedence, and the echo round trip.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "app/job_options.h"
#include "app/job_plan.h"
#include "core/error.h"

using namespace sluice;

namespace {

struct Parsed {
  JobConfig job;
  CLI::App app{"test"};
  CLI::App* run = nullptr;
  explicit Parsed(std::vector<std::string> args) {
    run = app.add_subcommand("run");
    add_job_options(*run, job);
    args.insert(args.begin(), "run");
    std::reverse(args.begin(), args.end());
    app.parse(args);
    apply_job_file(*run, job);
  }
};

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(JobOptions, DefaultsWithoutArguments) {
  Parsed p({});
  EXPECT_EQ(p.job.batch_size, 32);
  EXPECT_EQ(p.job.sharding, "dynamic");
  EXPECT_EQ(p.job.outputs, std::vector<std::string>{"logits"});
  EXPECT_TRUE(p.job.cuda_graphs);
}

TEST(JobOptions, JobFileKeysAreOptionNamesAndFlagsOverrideThem) {
  const std::string path = write_file("job1.toml",
                                      "# a job\nbatch-size = 7\nsample-shape = [3, 5, 9]\noutputs = [\"logits\", \"argmax\"]\n"
                                      "cuda-graphs = false\nname = 'single quoted'\nscale = 0.5 # comment\n");
  Parsed p({"--config", path, "--batch-size", "9"});
  EXPECT_EQ(p.job.batch_size, 9);  // the flag wins
  EXPECT_EQ(p.job.sample_shape, (std::vector<int64_t>{3, 5, 9}));
  EXPECT_EQ(p.job.outputs, (std::vector<std::string>{"logits", "argmax"}));
  EXPECT_FALSE(p.job.cuda_graphs);
  EXPECT_EQ(p.job.name, "single quoted");
  EXPECT_FLOAT_EQ(p.job.scale, 0.5f);
}

TEST(JobOptions, EchoReadsBackAsTheSameJob) {
  Parsed a({"--batch-size", "5", "--outputs", "argmax,softmax", "--mean", "0.5,0.25,1", "--name", "q\"uote",
            "--no-cuda-graphs", "--sample-shape", "1,2,3"});
  const std::string path = write_file("echo.toml", job_to_toml(a.job));
  Parsed b({"--config", path});
  EXPECT_EQ(job_to_toml(b.job), job_to_toml(a.job));
  EXPECT_EQ(b.job.batch_size, 5);
  EXPECT_EQ(b.job.mean, (std::vector<float>{0.5f, 0.25f, 1.0f}));
  EXPECT_EQ(b.job.name, "q\"uote");
  EXPECT_FALSE(b.job.cuda_graphs);
}

TEST(JobOptions, MalformedJobFilesAreUsageErrorsNamingTheFileAndLine) {
  for (const char* text : {"batch-size = [\n", "name = \"open\n", "[run]\nbatch-size = 3\n", "just words\n"}) {
    const std::string path = write_file("bad.toml", text);
    try {
      Parsed p({"--config", path});
      FAIL() << "accepted: " << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), kExitUsage);
    }
  }
}

TEST(JobOptions, UnknownKeysAndBadValuesAreRejected) {
  const std::string unknown = write_file("unknown.toml", "batchsize = 3\n");
  EXPECT_THROW(Parsed({"--config", unknown}), UsageError);
  const std::string hidden = write_file("hidden.toml", "throttle-ms = 3\n");
  EXPECT_THROW(Parsed({"--config", hidden}), UsageError);  // test-only options are flags, not job keys
  const std::string bad = write_file("badvalue.toml", "device = \"gpu\"\n");
  EXPECT_THROW(Parsed({"--config", bad}), UsageError);
  EXPECT_THROW(Parsed({"--config", "/nonexistent/job.toml"}), UsageError);
  EXPECT_THROW(Parsed({"--batch-size", "0"}), CLI::ValidationError);
  EXPECT_THROW(Parsed({"--sharding", "round-robin"}), CLI::ValidationError);
}

TEST(JobOptions, ValidateRejectsContradictions) {
  JobConfig j;
  j.resume = j.overwrite = true;
  EXPECT_THROW(validate_job(j), UsageError);
  JobConfig k;
  k.outputs = {"logits", "logits"};
  EXPECT_THROW(validate_job(k), UsageError);
  JobConfig l;
  l.stddev = {1.f, 0.f, 1.f};
  EXPECT_THROW(validate_job(l), UsageError);
  EXPECT_NO_THROW(validate_job(JobConfig{}));
}

TEST(JobOptions, APathHasOneSpellingWhateverItsSlashes) {
  // --resume compares the input of the run folder with this job's: `photos/` is `photos`.
  EXPECT_EQ(clean_path("photos/"), "photos");
  EXPECT_EQ(clean_path("./photos//"), "photos");
  EXPECT_EQ(clean_path("/data//photos/./a/"), "/data/photos/a");
  EXPECT_EQ(clean_path("/"), "/");
  EXPECT_EQ(clean_path("./"), ".");
  EXPECT_EQ(clean_path("synthetic"), "synthetic");
  EXPECT_EQ(clean_path("shards/train-{000000..000009}.tar"), "shards/train-{000000..000009}.tar");
  EXPECT_EQ(clean_path("data/*/img_*.jpg"), "data/*/img_*.jpg");
  JobConfig j;
  j.input = "photos/";
  j.output = "runs/a/";
  j.model = "./m.onnx";
  clean_job_paths(j);
  EXPECT_EQ(j.input, "photos");
  EXPECT_EQ(j.output, "runs/a");
  EXPECT_EQ(j.model, "m.onnx");
  // The echo (and so report.json's job) spells it the same way, absolute.
  EXPECT_EQ(absolute_path("/x/photos/"), absolute_path("/x/photos"));
}

TEST(JobOptions, TheNearestOptionKeepsEveryLetterTypedAmongEquallyNearOnes) {
  // "outpus" is one edit from both; the letter left out of "outputs" is the likelier typo.
  EXPECT_EQ(nearest_word("outpus", {"output", "outputs"}), "outputs");
  EXPECT_EQ(nearest_word("outpus", {"outputs", "output"}), "outputs");
  EXPECT_EQ(nearest_word("outptu", {"output", "outputs"}), "output");
  EXPECT_EQ(nearest_word("batch-sise", {"batch-size", "sample-shape"}), "batch-size");
}

TEST(JobOptions, TheAlgorithmCacheIsTheUsersByDefaultAFolderWhenNamedAndOffWithNone) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(plan_job(Parsed({}).job, 0).engine.cache_dir, "/tmp/xdg-test/sluice");
  ::unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home && *home) EXPECT_EQ(plan_job(Parsed({}).job, 0).engine.cache_dir, str(home, "/.cache/sluice"));
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);

  EXPECT_EQ(plan_job(Parsed({"--algo-cache", "none"}).job, 0).engine.cache_dir, "") << "none: no cache";
  EXPECT_EQ(plan_job(Parsed({"--algo-cache", "/data/algos"}).job, 0).engine.cache_dir, "/data/algos");
  // In a job file in another folder, "none" stays the word and a folder is the job file's.
  const std::string dir = ::testing::TempDir() + "algo-cache-job";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/off.toml") << "algo-cache = \"none\"\n";
  std::ofstream(dir + "/here.toml") << "algo-cache = \"algos\"\n";
  const Parsed off({"--config", dir + "/off.toml"});
  EXPECT_EQ(off.job.algo_cache, "none");
  EXPECT_EQ(plan_job(off.job, 0).engine.cache_dir, "");
  EXPECT_NE(job_to_toml(off.job).find("algo-cache = \"none\""), std::string::npos) << "the echo keeps the word";
  EXPECT_EQ(Parsed({"--config", dir + "/here.toml"}).job.algo_cache, dir + "/algos");
}

TEST(JobOptions, AutotuneIsAutoByDefaultAndTakesTheOtherModesFromTheFlagOrTheJobFile) {
  EXPECT_EQ(Parsed({}).job.autotune, "auto");
  // auto plans the steady state's choice (sluice profile, check); a run resolves it by its length.
  EXPECT_EQ(plan_job(Parsed({}).job, 0).engine.autotune, Autotune::Full);
  EXPECT_EQ(plan_job(Parsed({"--autotune", "quick"}).job, 0).engine.autotune, Autotune::Quick);
  EXPECT_EQ(plan_job(Parsed({"--autotune", "full"}).job, 0).engine.autotune, Autotune::Full);
  EXPECT_EQ(plan_job(Parsed({"--autotune", "off"}).job, 0).engine.autotune, Autotune::Off);
  const std::string file = write_file("autotune.toml", "autotune = \"full\"\n");
  EXPECT_EQ(plan_job(Parsed({"--config", file}).job, 0).engine.autotune, Autotune::Full);
  EXPECT_EQ(plan_job(Parsed({"--config", file, "--autotune", "off"}).job, 0).engine.autotune, Autotune::Off)
      << "the flag overrides the file";
  EXPECT_NE(job_to_toml(Parsed({"--autotune", "full"}).job).find("autotune = \"full\""), std::string::npos);
}

TEST(JobOptions, AnUnknownAutotuneModeNamesTheModesThatExist) {
  try {
    Parsed({"--autotune", "fast"});
    FAIL() << "--autotune fast was accepted";
  } catch (const CLI::ValidationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'fast' is not one of auto, quick, full, off"), std::string::npos) << m;
  }
  const std::string bad = write_file("autotune-bad.toml", "autotune = \"exhaustive\"\n");
  try {
    Parsed({"--config", bad});
    FAIL() << "autotune = \"exhaustive\" was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("quick, full, off"), std::string::npos) << e.what();
  }
  // The engine's own parser (for callers that build EngineOptions without the job options).
  EXPECT_EQ(autotune_from_name("full"), Autotune::Full);
  EXPECT_STREQ(autotune_name(Autotune::Quick), "quick");
  try {
    autotune_from_name("Full");
    FAIL() << "autotune_from_name accepted 'Full'";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("expected quick, full or off"), std::string::npos) << e.what();
  }
}

TEST(JobPlan, AutotuneAutoTimesTheConvolutionsOnlyForRunsLongEnoughToPayForIt) {
  // 8,000 photos at batch 64 on one rank: 125 batches, cuDNN's first choice.
  EXPECT_EQ(autotune_for_job("auto", 8000, 1, 64), Autotune::Off);
  // 2,000 batches a rank and more: the whole search, on the whole batch.
  EXPECT_EQ(autotune_for_job("auto", kAutotuneFullBatches * 64, 1, 64), Autotune::Full);
  EXPECT_EQ(autotune_for_job("auto", (kAutotuneFullBatches - 1) * 64, 1, 64), Autotune::Off);
  // Shared among the ranks: each runs its part.
  EXPECT_EQ(autotune_for_job("auto", kAutotuneFullBatches * 64 * 4, 4, 64), Autotune::Full);
  EXPECT_EQ(autotune_for_job("auto", kAutotuneFullBatches * 64 * 4, 8, 64), Autotune::Off);
  // A named mode is what it says, whatever the length.
  EXPECT_EQ(autotune_for_job("full", 10, 1, 64), Autotune::Full);
  EXPECT_EQ(autotune_for_job("quick", 1 << 30, 1, 64), Autotune::Quick);
  EXPECT_EQ(autotune_for_job("off", 1 << 30, 1, 64), Autotune::Off);
}

TEST(JobPlan, AutotuneAutoStillTimesTheProductsWhereItLeavesTheConvolutionsToCudnn) {
  // A short run: convolutions off, products quick.
  EXPECT_EQ(product_autotune_for_job("auto", autotune_for_job("auto", 8000, 1, 64)), Autotune::Quick);
  EXPECT_EQ(product_autotune_for_job("auto", autotune_for_job("auto", kAutotuneFullBatches * 64, 1, 64)), Autotune::Full);
  // A named mode holds for both.
  for (Autotune a : {Autotune::Off, Autotune::Quick, Autotune::Full})
    EXPECT_EQ(product_autotune_for_job(autotune_name(a), a), a) << autotune_name(a);
}
