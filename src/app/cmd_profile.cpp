// `sluice profile`: where the time of one forward pass goes, step by step, on either backend.
// It takes the job options of `sluice run` (and its job files), and the job plan (app/job_plan.h)
// prepares the model exactly as `sluice run` does for the same batch size, input and outputs; the engine is built (algorithms measured or read from the cache, CUDA graphs captured),
// then Engine::profile times every step over a number of replays and measures the device's copy
// bandwidth and matrix-product rate in the same process.  The table goes to stdout, the full
// record to --json.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/job.h"
#include "app/job_options.h"
#include "app/job_plan.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread.h"
#include "engine/engine.h"
#include "io/source.h"
#include "sluice/version.h"

namespace sluice {
namespace {

// The options of `sluice profile` beside the job's (app/job_plan.h translates those as `sluice run` does).
struct ProfileCommandOptions {
  int gpu = 0;
  int replays = 20;
  int top = 30;                 // rows of the step table (0: all)
  std::string json;             // file for the full record
  bool no_peaks = false;
};

// What was profiled, as the table's first line and the JSON name it.
struct Profiled {
  std::string model;
  int64_t batch_size = 0;
  Shape sample_shape;           // the model's input per sample, as the plan feeds it
  std::string input_dtype;
  std::vector<std::string> outputs;
};

// Achieved rates of a step or a group of steps, against the ceilings.
struct Rates {
  double gbps = 0, tflops = 0, bw_fraction = 0, flops_fraction = 0;
};
Rates rates(double ms, double bytes, double flops, const DevicePeaks& peaks) {
  Rates r;
  if (ms <= 0) return r;
  r.gbps = bytes / (ms * 1e-3) / 1e9;
  r.tflops = flops / (ms * 1e-3) / 1e12;
  if (peaks.bytes_per_s > 0) r.bw_fraction = r.gbps * 1e9 / peaks.bytes_per_s;
  if (peaks.flops_per_s > 0) r.flops_fraction = r.tflops * 1e12 / peaks.flops_per_s;
  return r;
}

struct KindTotal {
  std::string kind;
  int steps = 0;
  double ms = 0, bytes = 0, flops = 0;
};

std::vector<KindTotal> by_kind(const EngineProfile& p) {
  std::map<std::string, KindTotal> m;
  for (const auto& s : p.steps) {
    KindTotal& k = m[s.kind];
    k.kind = s.kind;
    k.steps++;
    k.ms += s.ms;
    k.bytes += s.bytes;
    k.flops += s.flops;
  }
  std::vector<KindTotal> out;
  for (auto& kv : m) out.push_back(kv.second);
  std::sort(out.begin(), out.end(), [](const KindTotal& a, const KindTotal& b) { return a.ms > b.ms; });
  return out;
}

std::string fit(const std::string& s, std::size_t width) {
  if (s.size() <= width) return s;
  return "..." + s.substr(s.size() - (width - 3));   // node names are most specific at their end
}

// Three significant digits, no exponent: 0.0123, 1.23, 123, 12345.
std::string sig3(double v) {
  char buf[32];
  const double a = v < 0 ? -v : v;
  const int decimals = a == 0 || a >= 100 ? 0 : (a >= 10 ? 1 : (a >= 1 ? 2 : (a >= 0.1 ? 3 : 4)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string percent(double fraction, bool known) {
  if (!known) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * fraction);
  return buf;
}

void print_row(const char* index, const std::string& name, const std::string& kind, double ms, double share, double bytes,
               double flops, const Rates& r, const DevicePeaks& peaks) {
  std::printf("%5s  %-48s %-12s %9.3f %6.1f%% %9s %9s %8s %6s %8s %6s\n", index, fit(name, 48).c_str(),
              fit(kind, 12).c_str(), ms, 100.0 * share, sig3(bytes / 1e6).c_str(), sig3(flops / 1e9).c_str(),
              sig3(r.gbps).c_str(), percent(r.bw_fraction, peaks.bytes_per_s > 0).c_str(), sig3(r.tflops).c_str(),
              percent(r.flops_fraction, peaks.flops_per_s > 0).c_str());
}

void print_table(const ProfileCommandOptions& o, const Profiled& w, const EngineProfile& p, double build_s) {
  const double images = static_cast<double>(w.batch_size);
  std::printf("sluice profile: %s, batch %lld, sample %s %s, outputs %s\n", w.model.c_str(),
              static_cast<long long>(w.batch_size), shape_str(w.sample_shape).c_str(), w.input_dtype.c_str(),
              [&] { std::string s; for (const auto& x : w.outputs) s += (s.empty() ? "" : ",") + x; return s; }().c_str());
  std::printf("engine: %s, built in %.1f s (algorithm search or cache, CUDA graph capture)\n", p.engine.c_str(), build_s);
  if (p.peaks.bytes_per_s > 0)
    std::printf("ceilings: copy %s GB/s (%s); matrix product %s TFLOP/s (%s)\n", sig3(p.peaks.bytes_per_s / 1e9).c_str(),
                p.peaks.bytes_how.c_str(), sig3(p.peaks.flops_per_s / 1e12).c_str(), p.peaks.flops_how.c_str());
  std::printf("forward pass: %.3f ms (median of %d, as the pipeline runs it) = %.1f images/s; sum of the steps timed one "
              "by one: %.3f ms\n\n", p.forward_ms, p.replays, p.forward_ms > 0 ? images / (p.forward_ms * 1e-3) : 0.0,
              p.steps_ms);
  std::vector<std::size_t> order(p.steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.steps[a].ms > p.steps[b].ms; });
  const std::size_t shown = o.top > 0 ? std::min<std::size_t>(order.size(), static_cast<std::size_t>(o.top)) : order.size();
  std::printf("%5s  %-48s %-12s %9s %7s %9s %9s %8s %6s %8s %6s\n", "step", "name (slowest first)", "kind", "ms", "share", "MB",
              "GFLOP", "GB/s", "bw", "TFLOP/s", "peak");
  for (std::size_t j = 0; j < shown; ++j) {
    const StepProfile& s = p.steps[order[j]];
    print_row(std::to_string(order[j]).c_str(), s.name, s.kind, s.ms, p.steps_ms > 0 ? s.ms / p.steps_ms : 0, s.bytes,
              s.flops, rates(s.ms, s.bytes, s.flops, p.peaks), p.peaks);
  }
  if (shown < order.size()) std::printf("  ... %zu faster steps (--top 0 shows all)\n", order.size() - shown);
  std::printf("\n%5s  %-48s %-12s %9s %7s %9s %9s %8s %6s %8s %6s\n", "steps", "by kind", "", "ms", "share", "MB", "GFLOP",
              "GB/s", "bw", "TFLOP/s", "peak");
  for (const KindTotal& k : by_kind(p))
    print_row(std::to_string(k.steps).c_str(), k.kind, "", k.ms, p.steps_ms > 0 ? k.ms / p.steps_ms : 0, k.bytes, k.flops,
              rates(k.ms, k.bytes, k.flops, p.peaks), p.peaks);
  std::fflush(stdout);
}

nlohmann::json to_json(const Profiled& o, const EngineProfile& p, const std::string& backend) {
  using nlohmann::json;
  json j;
  j["sluice"] = str(SLUICE_VERSION, " (git ", SLUICE_GIT_COMMIT, ")");
  j["model"] = o.model;
  j["device"] = backend;
  j["engine"] = p.engine;
  j["precision"] = p.precision;
  j["batch_size"] = o.batch_size;
  j["sample_shape"] = o.sample_shape;
  j["input_dtype"] = o.input_dtype;
  j["outputs"] = o.outputs;
  j["replays"] = p.replays;
  j["forward_ms"] = p.forward_ms;
  j["images_per_s"] = p.forward_ms > 0 ? static_cast<double>(o.batch_size) / (p.forward_ms * 1e-3) : 0.0;
  j["steps_ms"] = p.steps_ms;
  j["peaks"] = {{"copy_bytes_per_s", p.peaks.bytes_per_s}, {"copy", p.peaks.bytes_how},
                {"matmul_flops_per_s", p.peaks.flops_per_s}, {"matmul", p.peaks.flops_how}};
  j["definitions"] = {
      {"bytes", "each tensor a step reads or writes counted once at its stored size: the fewest bytes it must move"},
      {"flops", "2 per multiply-add for convolutions and products; window taps for pooling and Resize; about one per "
                "element for other arithmetic; 0 for data movement"},
      {"share", "the step's mean time over the sum of all steps' mean times"}};
  json steps = json::array();
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile& s = p.steps[i];
    const Rates r = rates(s.ms, s.bytes, s.flops, p.peaks);
    steps.push_back({{"index", i}, {"name", s.name}, {"kind", s.kind}, {"ms", s.ms},
                     {"share", p.steps_ms > 0 ? s.ms / p.steps_ms : 0.0}, {"bytes", s.bytes}, {"flops", s.flops},
                     {"bytes_per_s", r.gbps * 1e9}, {"flops_per_s", r.tflops * 1e12},
                     {"bandwidth_fraction", r.bw_fraction}, {"flops_fraction", r.flops_fraction}});
  }
  j["steps"] = steps;
  json kinds = json::array();
  for (const KindTotal& k : by_kind(p)) {
    const Rates r = rates(k.ms, k.bytes, k.flops, p.peaks);
    kinds.push_back({{"kind", k.kind}, {"steps", k.steps}, {"ms", k.ms}, {"share", p.steps_ms > 0 ? k.ms / p.steps_ms : 0.0},
                     {"bytes", k.bytes}, {"flops", k.flops}, {"bandwidth_fraction", r.bw_fraction},
                     {"flops_fraction", r.flops_fraction}});
  }
  j["kinds"] = kinds;
  return j;
}

void profile_command(const JobConfig& job, const ProfileCommandOptions& o) {
  validate_job(job);
  JobPlan plan = plan_job(job);
  if (o.replays < 1) throw UsageError(str("--replays must be at least 1, not ", o.replays));
  const std::string backend = choose_backend(job.device);
  if (backend == "cpu" && plan.engine.precision != Precision::FP32)
    log_warn("the cpu engine computes in float32; --precision ", job.precision, " applies to cuda only");

  // The model is prepared for the job's input as `sluice run` prepares it: the input's sample shape
  // and type, an image input's decoded size, the preprocessing and the output heads.
  const std::unique_ptr<Source> source = open_input(plan.input);
  log_info("profile: input ", source->describe());
  plan.check_batch_bytes(*source);
  const PreparedModel model = load_prepared_model(plan, *source);
  Profiled what;
  what.model = job.model;
  what.batch_size = job.batch_size;
  what.sample_shape = plan.prepare.sample_shape;
  what.input_dtype = dtype_name(plan.prepare.input_dtype);
  what.outputs = job.outputs;

  EngineOptions eo = plan.engine;
  eo.device = o.gpu;
  eo.io_sets = 1;
  log_info("profile: building the ", backend, " engine");
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> engine;
  allocating(str("the ", backend == "cuda" ? "GPU" : "CPU", " engine for --batch-size ", job.batch_size),
             [&] { engine = create_engine(backend, model.graph, eo); });
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("profile: ", engine->describe(), " built in ", build_s, " s; timing ", o.replays, " passes");
  ProfileOptions pr;
  pr.replays = o.replays;
  pr.peaks = !o.no_peaks;
  const EngineProfile p = engine->profile(pr);
  print_table(o, what, p, build_s);
  if (!o.json.empty()) {
    std::ofstream out(o.json, std::ios::trunc);
    nlohmann::json j = to_json(what, p, backend);
    j["build_s"] = build_s;
    out << j.dump(1) << "\n";
    out.flush();
    if (!out) throw InputError(str("--json: cannot write ", o.json));
  }
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto job = std::make_shared<JobConfig>();
  auto o = std::make_shared<ProfileCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "profile", "Time each step of a job's forward pass (the model prepared as `sluice run` would) against the device's "
                 "ceilings; takes the options and job files of `sluice run`");
  // The job's options, as `sluice run` has them: a job file profiles as it runs.  Those of the
  // input, the model, the batch, the preprocessing, the outputs and the engine apply here.
  add_job_options(*sub, *job);
  sub->add_option("--gpu", o->gpu, "CUDA device ordinal")->capture_default_str()->check(CLI::NonNegativeNumber)->group("Profile");
  sub->add_option("--replays", o->replays, "Timed passes (after one warm-up)")->capture_default_str()->check(CLI::PositiveNumber)->group("Profile");
  sub->add_option("--top", o->top, "Rows of the step table, slowest first (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber)->group("Profile");
  sub->add_option("--json", o->json, "Write every step, the totals by kind and the ceilings to this JSON file")->group("Profile");
  sub->add_flag("--no-peaks", o->no_peaks, "Skip measuring the device's ceilings (no fractions of peak)")->group("Profile");
  sub->callback([sub, job, o] {
    apply_job_file(*sub, *job);
    profile_command(*job, *o);
  });
}

}  // namespace sluice
