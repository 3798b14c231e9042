#pragma once
// Binding the job (app/job.h) to CLI11 options, validating it, and echoing it.
#include <string>

#include "app/job.h"

namespace CLI {
class App;
}

namespace sluice {

// Adds one option per JobConfig field to `run`, with the field's default shown in --help, and the
// --config job file (TOML; unknown keys are errors).
void add_job_options(CLI::App& run, JobConfig& job);

// Checks values that CLI11 cannot (ranges, names, combinations); throws UsageError.
void validate_job(const JobConfig& job);

// The resolved job as TOML (every key, the file's and the flags' values merged), for the echo at
// start and the rank files' `job` attribute.
std::string job_to_toml(const CLI::App& run);

}  // namespace sluice
