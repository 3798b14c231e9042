// NVTX ranges, checked through NVTX's injection hook: a child process runs with
// NVTX_INJECTION64_PATH naming the tiny probe library built beside this test (nvtx_probe.c), which
// writes every pushed or started range name to a file.  The engine's build phases and forward
// pass, and (when SLUICE_BIN names the sluice binary) the pipeline's stage ranges must appear.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "gpu_test_util.h"
#include "test_models.h"

using namespace sluice;
using namespace sluice::gputest;
namespace fs = std::filesystem;

namespace {

std::string self_exe() {
  char buf[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string probe_path() {
  if (const char* p = std::getenv("SLUICE_NVTX_PROBE")) return p;
  // The device bundle copies the test binary and the probe into one folder.
  const fs::path beside = fs::path(self_exe()).parent_path() / "libsluice_nvtx_probe.so";
  if (fs::exists(beside)) return beside.string();
#ifdef SLUICE_NVTX_PROBE
  if (fs::exists(SLUICE_NVTX_PROBE)) return SLUICE_NVTX_PROBE;
#endif
  return "";
}

// Runs `command` (a program and its arguments, started in `cwd`) with the probe injected; returns
// the recorded range names.
std::set<std::string> ranges_of(const std::string& cwd, const std::string& command, const std::string& tag, int* status) {
  const std::string probe = probe_path();
  EXPECT_FALSE(probe.empty()) << "libsluice_nvtx_probe.so not found (set SLUICE_NVTX_PROBE)";
  const fs::path out = fs::temp_directory_path() / str("sluice-nvtx-", tag, "-", ::getpid(), ".txt");
  fs::remove(out);
  const std::string full = str("cd '", cwd, "' && NVTX_INJECTION64_PATH='", probe, "' SLUICE_NVTX_PROBE_OUT='", out.string(),
                               "' ", command);
  *status = std::system(full.c_str());
  std::set<std::string> names;
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp != std::string::npos) names.insert(line.substr(sp + 1));
  }
  fs::remove(out);
  return names;
}

// Only run as the child of EngineEmitsBuildAndForwardRanges (disabled in normal runs).
TEST(NvtxChild, DISABLED_EngineRun) {
  SLUICE_REQUIRE_GPU();
  EngineOptions o;
  o.io_sets = 1;
  auto e = create_cuda_engine(resnet_like(1, 32), o);
  const Tensor x = random_tensor(e->input(), 1);
  cuda::run_forward(*e, x, 0);
}

TEST(NvtxInjection, EngineEmitsBuildAndForwardRanges) {
  SLUICE_REQUIRE_GPU();
  int status = -1;
  const auto names = ranges_of(fs::current_path().string(),
                               str("'", self_exe(), "' --gtest_also_run_disabled_tests --gtest_filter=NvtxChild.DISABLED_EngineRun"
                                   " > /dev/null"), "engine", &status);
  EXPECT_EQ(status, 0) << "the child run failed";
  for (const char* want : {"engine build", "engine autotune", "engine capture", "engine forward"})
    EXPECT_TRUE(names.count(want)) << "missing NVTX range '" << want << "'";
}

TEST(NvtxInjection, PipelineEmitsStageRanges) {
  SLUICE_REQUIRE_GPU();
  const char* bin = std::getenv("SLUICE_BIN");
  if (!bin) GTEST_SKIP() << "SLUICE_BIN is not set: the pipeline's ranges need the sluice binary";
  const fs::path root = fs::path(SLUICE_SOURCE_DIR);
  const char* root_env = std::getenv("SLUICE_ROOT");
  const fs::path repo = root_env ? fs::path(root_env) : root;
  const fs::path outdir = fs::temp_directory_path() / str("sluice-nvtx-run-", ::getpid());
  fs::remove_all(outdir);
  int status = -1;
  const auto names = ranges_of(repo.string(),
                               str("'", bin, "' run --config jobs/quickstart.toml --device cuda --samples 128 --output '",
                                   outdir.string(), "' > /dev/null"),
                               "pipeline", &status);
  EXPECT_EQ(status, 0) << "sluice run failed";
  for (const char* want : {"get batch", "copy to GPU", "compute", "copy to CPU", "write"})
    EXPECT_TRUE(names.count(want)) << "missing NVTX range '" << want << "'";
  const bool batch_span = std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.rfind("batch ", 0) == 0; });
  EXPECT_TRUE(batch_span) << "missing the 'batch N' ranges";
  fs::remove_all(outdir);
}

}  // namespace
