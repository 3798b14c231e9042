#pragma once
// Binding the job (app/job.h) to CLI11 options, reading job files, validating and echoing the job.
// One list of fields (visit_job in job_options.cpp) feeds the options, the job-file keys and the
// TOML echo, so they cannot drift apart.
#include <string>
#include <vector>

#include "app/job.h"
#include "image/image_input.h"

namespace CLI {
class App;
}

namespace sluice {

// Adds one option per JobConfig field to `run` (defaults shown in --help), plus --config.
void add_job_options(CLI::App& run, JobConfig& job);

// Applies the job file named by --config (if any): every key is the long name of an option of
// `run`, and its value has that option's type (app/job_file.h reads the TOML); options given on
// the command line win.  Throws UsageError for a missing or malformed file, an unknown key, a value
// of the wrong type or a bad value, naming the file, line and column.
void apply_job_file(CLI::App& run, const JobConfig& job);

// The same for job-file text already in memory; `name` stands for the file in messages.
void apply_job_text(CLI::App& run, const std::string& text, const std::string& name);

// Paths in a job file are relative to the job file's folder (like docker-compose): the value of a
// path key (model, input, output, algo-cache) as the job means it.  Command-line paths stay
// relative to the working directory.
bool is_path_key(const std::string& key);
// `p` made absolute against the working directory, "." and ".." removed lexically.
std::string absolute_path(const std::string& p);
// `p` with repeated and trailing slashes and "./" removed, relative or absolute as given: the one
// spelling of a path, so `photos/` and `photos` are the same input to --resume.
std::string clean_path(const std::string& p);
// Every path key of the job cleaned (clean_path), once, before the job runs.
void clean_job_paths(JobConfig& job);

// The resolved job a run saves in its output folder (OUTPUT/job.toml), read back by a bare
// `sluice run --resume --output DIR`.
std::string saved_job_path(const std::string& output_dir);
// Applies DIR/job.toml like a job file (options on the command line win), except the keys that
// say what this invocation does rather than what the job is (resume, overwrite, dry-run).
// Returns false when the folder holds no saved job.
bool apply_saved_job(CLI::App& run, const std::string& output_dir);
std::string job_file_path(const std::string& job_file, const std::string& key, const std::string& value);

// Every user-facing job key with its value (as in the TOML echo) and help text, in option order.
struct JobField {
  std::string key, value, help;
};
std::vector<JobField> job_fields(JobConfig job);

// Checks values that CLI11 cannot (combinations); throws UsageError.
void validate_job(const JobConfig& job);
// Refuses (UsageError) preprocessing values that make every sample NaN or Inf in float32.
void check_normalization(float scale, const std::vector<float>& mean, const std::vector<float>& stddev);

// The job's image options (--resize, --center-crop, --letterbox, --pad-value, --on-bad-sample).
ImageJobOptions image_options(const JobConfig& job);

// The resolved job as TOML (every key), for the echo at start and the rank files' `job` attribute;
// reading it back as a job file gives the same job.
std::string job_to_toml(JobConfig job);

}  // namespace sluice
