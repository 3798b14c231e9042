#include "app/job_options.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"

namespace sluice {

namespace {

CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        try {
          std::size_t used = 0;
          const double v = std::stod(s, &used);
          if (used != s.size()) return "'" + s + "' is not a number";
          if (v < lo) return str("must be at least ", lo, " (got ", s, ")");
        } catch (const std::exception&) {
          return "'" + s + "' is not a number";
        }
        return "";
      },
      str(">=", lo));
}

CLI::Validator one_of(std::initializer_list<const char*> names) {
  std::vector<std::string> v(names.begin(), names.end());
  return CLI::Validator(
      [v](std::string& s) -> std::string {
        for (const auto& n : v)
          if (s == n) return "";
        std::string all;
        for (const auto& n : v) all += (all.empty() ? "" : ", ") + n;
        return str("'", s, "' is not one of ", all);
      },
      "");
}

// The one list of job fields.  `v` is called as v(key, field, help, validator, flag?).
template <typename V>
void visit_job(JobConfig& j, V& v) {
  const CLI::Validator none;
  v("name", j.name, "Job name, shown in the report", none);
  v("model", j.model, "ONNX model file", none);
  v("input", j.input, "'synthetic' or an HDF5 file holding a dataset [N, ...]", none);
  v("input-dataset", j.input_dataset, "Dataset in the HDF5 input file", none);
  v("samples", j.samples, "Synthetic input: number of samples N", at_least(1));
  v("sample-shape", j.sample_shape, "Synthetic input: shape of one sample, e.g. 3,512,512", at_least(1));
  v("input-dtype", j.input_dtype, "Synthetic input type: float32 | uint8", one_of({"float32", "uint8"}));
  v("seed", j.seed, "Synthetic input seed", none);
  v("batch-size", j.batch_size, "Samples per batch", at_least(1));
  v("output", j.output, "Output folder (rank files, outputs.h5, report.json)", none);
  v("sink", j.sink, "hdf5 (rank files) | null (outputs reach host memory and are dropped: a benchmark of the rest)",
    one_of({"hdf5", "null"}));
  v("outputs", j.outputs, "What to store: logits, argmax, softmax, topk (comma list)",
    one_of({"logits", "argmax", "softmax", "topk"}));
  v("output-dtype", j.output_dtype, "Type of stored logits/softmax: float32 | float16 | bfloat16",
    one_of({"float32", "float16", "bfloat16"}));
  v("top-k", j.top_k, "k of the topk output", at_least(1));
  v("device", j.device, "auto (a GPU when there is one) | cpu | cuda", one_of({"auto", "cpu", "cuda"}));
  v("precision", j.precision, "fp32 | tf32 | fp16 | bf16 (GPU; the CPU computes fp32)", one_of({"fp32", "tf32", "fp16", "bf16"}));
  v("prefetch", j.prefetch, "Input slots: batches read ahead", at_least(1));
  v("egress-buffers", j.egress_buffers, "Output slots: batches waiting to be written", at_least(1));
  v("reader-threads", j.reader_threads, "Threads filling input slots", at_least(1));
  v("writer-threads", j.writer_threads,
    "Threads compressing output chunks in parallel for the HDF5 writer (with --compression; without it one "
    "thread writes and more have nothing to do)", at_least(1));
  v("compression", j.compression, "Deflate level of the stored outputs, 0 (none) to 9", CLI::Range(0, 9));
  v("sharding", j.sharding, "dynamic (own range first, then steal from the slowest) | static (contiguous ranges)",
    one_of({"dynamic", "static"}));
  v("chunk-batches", j.chunk_batches, "Batches per commit (ledger record); a stop commits what is written", at_least(1));
  v("fsync", j.fsync, "fsync the rank file at each commit: committed samples survive a power loss too (slower)", none);
  v("resume", j.resume, "Continue the run in the output folder: redo only uncommitted samples", none);
  v("overwrite", j.overwrite, "Replace the outputs of an earlier run in the output folder", none);
  v("scale", j.scale, "Preprocessing on the device: y = (x * scale - mean[c]) / std[c]", none);
  v("mean", j.mean, "Per-channel mean (comma list; empty: 0)", none);
  v("std", j.stddev, "Per-channel standard deviation (comma list; empty: 1)", none);
  v("cuda-graphs", j.cuda_graphs, "Capture the forward pass once as a CUDA graph and replay it", none);
  v("algo-cache", j.algo_cache, "Folder of the cuDNN algorithm cache (default: ~/.cache/sluice)", none);
  v("cpu-threads", j.cpu_threads, "CPU engine threads (0: all cores, shared among the node's ranks)", at_least(0));
  v("gpu-map", j.gpu_map, "GPU of each node-local rank, comma list (default: the node-local rank)", none);
  v("progress-interval", j.progress_interval, "Seconds between progress lines when stderr is not a terminal",
    at_least(0.1));
  v("quiet", j.quiet, "No job echo, no progress line", none);
  // Test only (hidden): slow the listed ranks down, as a slow GPU would be.
  v("throttle-ms", j.throttle_ms, "", at_least(0));
  v("throttle-ranks", j.throttle_ranks, "", none);
}

struct CliBinder {
  CLI::App& app;
  template <typename T>
  void operator()(const char* key, T& field, const char* help, const CLI::Validator& check) {
    CLI::Option* o = app.add_option(str("--", key), field, help);
    o->check(check);
    o->capture_default_str();
    if (!*help) o->group("");
  }
  template <typename T>
  void operator()(const char* key, std::vector<T>& field, const char* help, const CLI::Validator& check) {
    CLI::Option* o = app.add_option(str("--", key), field, help)->delimiter(',');
    o->check(check);
    if (!field.empty()) o->capture_default_str();
    if (!*help) o->group("");
  }
  void operator()(const char* key, bool& field, const char* help, const CLI::Validator&) {
    app.add_flag(str("--", key, ",!--no-", key), field, help);
  }
};

template <typename T>
std::string toml_value(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string toml_value(const std::string& v) {
  // CLI11's reader does not undo escapes, so text with a quote or backslash goes in a TOML literal
  // string ('...', no escapes) when it can.
  if (v.find_first_of("\"\\") != std::string::npos && v.find('\'') == std::string::npos) return "'" + v + "'";
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
std::string toml_value(bool v) { return v ? "true" : "false"; }
template <typename T>
std::string toml_value(const std::vector<T>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
  return out + "]";
}

struct TomlWriter {
  std::ostringstream os;
  template <typename T>
  void operator()(const char* key, T& field, const char* help, const CLI::Validator&) {
    if (!*help) return;  // test-only keys are not part of the job a user writes
    os << key << " = " << toml_value(field) << "\n";
  }
};

// CLI11's TOML reader accepts some malformed input (an unterminated string or array becomes a
// value); check each line's shape first so a broken job file is one clear error.
void check_toml_syntax(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError(str("cannot read the job file ", path));
  const std::string scalar =
      R"((?:"(?:[^"\\]|\\.)*"|'[^']*'|[-+]?[0-9][0-9_]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|[-+]?(?:inf|nan)|true|false))";
  const std::regex value_re(str(R"(\s*(?:)", scalar, R"(|\[\s*(?:)", scalar, R"(\s*(?:,\s*)", scalar,
                                R"(\s*)*,?\s*)?\])\s*(?:#.*)?)"));
  const std::regex key_re(R"(\s*([A-Za-z0-9_-]+)\s*=(.*))");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (line[first] == '[')
      throw UsageError(str("job file ", path, " line ", n, ": sections are not used in job files: ", line));
    std::smatch m;
    if (!std::regex_match(line, m, key_re))
      throw UsageError(str("job file ", path, " line ", n, ": expected key = value: ", line));
    const std::string value = m[2].str();
    if (!std::regex_match(value, value_re))
      throw UsageError(str("job file ", path, " line ", n, ": malformed value: ", line));
  }
}

}  // namespace

void add_job_options(CLI::App& run, JobConfig& j) {
  run.add_option("--config", j.config, "Job file (TOML): every key is an option of this command; flags override it");
  CliBinder binder{run};
  visit_job(j, binder);
}

void apply_job_file(CLI::App& run, const JobConfig& job) {
  if (job.config.empty()) return;
  check_toml_syntax(job.config);
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(job.config);
  } catch (const CLI::Error& e) {
    throw UsageError(str("job file ", job.config, ": ", e.what()));
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    CLI::Option* o = run.get_option_no_throw("--" + item.name);
    if (!o || item.name == "config" || o->get_group().empty())
      throw UsageError(str("job file ", job.config, ": unknown key '", item.name, "' (keys are the long option names of sluice run)"));
    if (o->count() > 0) continue;  // the command line wins
    if (item.inputs.empty()) continue;  // `key = []`: the default (an empty list for mean and std)
    try {
      o->add_result(item.inputs);
      o->run_callback();
    } catch (const CLI::Error& e) {
      throw UsageError(str("job file ", job.config, ": ", e.what()));
    }
  }
}

void validate_job(const JobConfig& j) {
  if (j.model.empty()) throw UsageError("--model is required");
  if (j.output.empty()) throw UsageError("--output is required");
  if (j.outputs.empty()) throw UsageError("--outputs must name at least one of logits, argmax, softmax, topk");
  std::set<std::string> seen;
  for (const auto& o : j.outputs)
    if (!seen.insert(o).second) throw UsageError(str("--outputs names '", o, "' twice"));
  if (j.input == "synthetic" && j.sample_shape.empty()) throw UsageError("--sample-shape is required for synthetic input");
  if (!j.mean.empty() && !j.stddev.empty() && j.mean.size() != j.stddev.size() && j.mean.size() != 1 && j.stddev.size() != 1)
    throw UsageError("--mean and --std must have the same number of values (or one)");
  for (float s : j.stddev)
    if (s == 0.f) throw UsageError("--std values must be non-zero");
  if (j.resume && j.overwrite) throw UsageError("--resume and --overwrite exclude each other");
}

std::string job_to_toml(JobConfig job) {
  TomlWriter w;
  visit_job(job, w);
  return w.os.str();
}

}  // namespace sluice
