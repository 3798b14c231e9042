// Fuzz target (b): job-file text -> the job-file reader and the typed options of sluice run.  Text
// must either apply or be refused with a usage error; a job that applies must echo (job_to_toml)
// as text that reads back as the same job.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "app/job_options.h"
#include "fuzz_util.h"

using namespace sluice;

namespace {

// The options of sluice run with `text` applied as a job file; throws what apply_job_text throws.
std::string applied(const std::string& text, JobConfig& job) {
  CLI::App app{"fuzz"};
  CLI::App* run = app.add_subcommand("run");
  add_job_options(*run, job);
  app.parse(std::vector<std::string>{"run"});
  apply_job_text(*run, text, "fuzz.toml");
  return job_to_toml(job);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string echo;
  try {
    JobConfig job;
    echo = applied(text, job);
    validate_job(job);
  } catch (const Error& e) {
    fuzz::check_error_kind(e);
  } catch (const std::exception& e) {
    fuzz::finding("a std:: exception", e.what());
  }
  if (echo.empty()) return 0;
  try {
    JobConfig again;
    if (applied(echo, again) != echo) fuzz::finding("the echo reads back as another job", echo);
  } catch (const std::exception& e) {
    fuzz::finding("the echo of an accepted job does not read back", std::string(e.what()) + "\n" + echo);
  }
  return 0;
}
