// `sluice run`: one process of a job.  Set-up (validation, model, engine, output folder) is agreed
// among all ranks, so a bad input ends every rank with one message and the same exit status before
// any work; after that a failing rank prints its error and aborts the job (MPI_Abort), so no rank
// is left waiting (docs/protocol.md, "One outcome").  A signal to any rank stops every rank.
#include <CLI/CLI.hpp>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "app/agreement.h"
#include "app/commands.h"
#include "app/job.h"
#include "app/job_options.h"
#include "app/outdir.h"
#include "app/preprocess_from.h"
#include "app/text_model.h"
#include "app/run_context.h"
#include "app/signals.h"
#include "cluster/launch.h"
#include "cluster/mpi_context.h"
#include "cluster/stop_relay.h"
#include "cluster/work.h"
#include "app/ledgers.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/thread.h"
#include "core/timer.h"
#include "pipeline/pipeline.h"
#include "report/progress.h"
#include "report/report.h"
#include "sluice/version.h"

namespace sluice {

namespace {

int run_job(JobConfig job, const std::vector<std::pair<std::string, std::string>>& origins, int argc, char** argv) {
  SignalWatcher::install();
  MpiContext mpi(&argc, &argv);
  set_log_rank(mpi.rank(), mpi.world_size());
  if (job.quiet) set_log_level(LogLevel::Warn);
  // Under a Slurm requeue the job resumes by itself.
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT"); restarts && std::atoi(restarts) > 0 && !job.overwrite) {
    if (!job.resume && mpi.rank() == 0) log_info("Slurm requeue (SLURM_RESTART_COUNT=", restarts, "): resuming");
    job.resume = true;
  }
  // After the requeue check, so the echo and the rank files' job text say what this attempt does.
  std::string job_toml = job_to_toml(job);
  // A text job names its tokenizer by path; the file's digest beside it (a TOML comment, so the saved
  // job still parses) lets a resume refuse a tokenizer.json rewritten in place (app/ledgers.cpp).
  if (!job.tokenizer.empty()) {
    std::string file = job.tokenizer;
    if (std::filesystem::is_directory(file)) file = (std::filesystem::path(file) / "tokenizer.json").string();
    if (access(file.c_str(), R_OK) == 0) job_toml += str(kTokenizerDigestKey, " = \"", sha256_file(file), "\"\n");
  }
  if (mpi.rank() == 0 && !job.quiet && !job.dry_run) {
    std::fprintf(stderr, "sluice %s (git %s): %d rank(s) on %d node(s); the job:\n%s", SLUICE_VERSION, SLUICE_GIT_COMMIT,
                 mpi.world_size(), mpi.node_count(), job_toml.c_str());
    std::fflush(stderr);
  }

  if (mpi.rank() == 0 && !job.saved_job.empty())
    log_info("--resume: the job saved in ", job.saved_job, " (options on this command line override it)");
  RunContext ctx(job, job_toml, mpi);
  // Set-up: every check that can fail is agreed before any collective that depends on it
  // (app/agreement.h), so a bad input ends every rank with one message and one exit status.
  agreed(mpi, [&] { ctx.open_source(); });
  agreed(mpi, [&] { ctx.choose_device(); });
  agreed(mpi, [&] { ctx.load_model(); });  // rank 0 reads the model file, once
  or_abort(mpi, [&] { ctx.share_model(); });
  if (job.dry_run) {
    if (mpi.rank() == 0) std::fputs(ctx.explain(origins).c_str(), stdout);
    std::fflush(stdout);
    return kExitOk;
  }
  ctx.set_plan(agreed_on_root(mpi, [&] { return ctx.plan_on_root(); }));  // folder, lock, resume plan
  // --resume: every rank recovers its share of the rank files; plan_resume agrees on its outcome
  // inside (one broadcast verdict), so every rank reaches every collective in it.
  agreed(mpi, [&] { ctx.plan_resume(); });
  if (ctx.already_complete()) {
    if (mpi.rank() == 0)
      log_info("--resume: all ", ctx.chunking().total, " samples of ", job.output,
               " are committed and outputs.h5 is written: nothing to do (no attempt recorded)");
    agreed(mpi, [&] { ctx.export_complete_run(); });  // --export: the files a kill kept from being written
    return kExitOk;
  }
  try {
    agreed(mpi, [&] { ctx.build(); });  // engine, device, slots, rank file
  } catch (const Error&) {
    or_abort(mpi, [&] { ctx.abandon(); });  // put an --overwrite'n run back
    throw;
  }
  or_abort(mpi, [&] { ctx.start_work(); });

  // From here on a failing rank ends the job (or_abort): its peers may wait for it in a collective.
  std::unique_ptr<StopRelay> relay;
  or_abort(mpi, [&] {
    relay = std::make_unique<StopRelay>(mpi, [&](int from) {
      ctx.note_stopping(str("by rank ", from));
      if (ctx.stop()) log_info("rank ", from, " is stopping: finishing the chunks in flight, then stopping (resumable)");
    });
  });
  SignalWatcher watcher([&](int sig) {
    ctx.note_stopping(sig);
    log_info("received ", strsignal(sig), ": finishing the chunks in flight, then stopping (resumable)");
    ctx.stop(sig);
    relay->broadcast();
  });
  or_abort(mpi, [&] { mpi.barrier(); });
  std::unique_ptr<Progress> progress;
  if (mpi.rank() == 0 && !job.quiet)
    progress = std::make_unique<Progress>(ctx.work(), ctx.plan_result().committed_before, ctx.chunking().total,
                                          job.progress_interval, [&ctx] { return ctx.computed_samples(); },
                                          mpi.world_size());
  or_abort(mpi, [&] { ctx.run(); }, [&](const std::string& message) { ctx.note_failure(message); });
  relay->close();
  bool complete = false;
  or_abort(mpi, [&] { complete = ctx.drain(); });
  progress.reset();  // after drain(): rank 0 has counted every rank's last commit
  or_abort(mpi, [&] { ctx.report(); });  // gathers the report, writes outputs.h5 and report.json
  return complete ? kExitOk : kExitResumable;
}

}  // namespace

void add_run_command(CLI::App& app, Commands& commands) {
  static JobConfig job;
  CLI::App* run = app.add_subcommand("run", "Run a job: the model over every sample, outputs to HDF5 rank files");
  add_job_options(*run, job);
  commands.handlers["run"] = [run](int argc, char** argv) {
    // Where each value comes from, for --dry-run: the command line, else the job file, else the default.
    std::vector<std::pair<std::string, std::string>> origins;
    for (const CLI::Option* o : run->get_options())
      if (o->count() > 0 && !o->get_lnames().empty()) origins.emplace_back(o->get_lnames().front(), "command line");
    // A bare `--resume --output DIR` finishes the job saved in DIR; options given here override it.
    if (job.resume && job.config.empty() && apply_saved_job(*run, clean_path(job.output)))
      job.saved_job = saved_job_path(clean_path(job.output));
    apply_job_file(*run, job);
    for (const CLI::Option* o : run->get_options()) {
      if (o->count() == 0 || o->get_lnames().empty()) continue;
      const std::string& name = o->get_lnames().front();
      bool cli = false;
      for (const auto& x : origins) cli = cli || x.first == name;
      if (!cli) origins.emplace_back(name, job.saved_job.empty() ? "job file" : job.saved_job);
    }
    job.output_given = run->get_option("--output")->count() > 0;
    clean_job_paths(job);
    if (!job.preprocess_from.empty()) {
      // The model's own preprocessing, for the options neither the command line nor the job file set.
      std::vector<std::string> given;
      for (const auto& o : origins) given.push_back(o.first);
      const PreprocessFrom p = apply_preprocess_from(job, given);
      for (const auto& c : p.chosen) origins.emplace_back(c.first, "--preprocess-from " + p.file);
      if (launcher_rank() == 0 && !job.quiet)
        std::fprintf(stderr, "sluice: --preprocess-from %s: %s\n", p.file.c_str(), preprocess_from_summary(p).c_str());
    }
    if (text_input_job(job)) {
      // A text model's tokenizer, pooling, length and prompt, from its folder where not given.
      std::vector<std::string> given;
      for (const auto& o : origins) given.push_back(o.first);
      const TextModelFrom t = apply_text_model(job, given);
      for (const auto& c : t.chosen) origins.emplace_back(c.first, t.folder.empty() ? "default" : "model folder " + t.folder);
      if (launcher_rank() == 0 && !job.quiet) {
        std::fprintf(stderr, "sluice: text model: %s\n", text_model_summary(job, t).c_str());
        for (const auto& w : t.warnings) std::fprintf(stderr, "sluice: warning: %s\n", w.c_str());
      }
    } else if (!job.pooling.empty() || !job.prompt.empty() || !job.prompt_name.empty() || !job.tokenizer.empty() ||
               job.max_length != 0) {
      throw UsageError(str("--tokenizer, --max-length, --pooling, --prompt and --prompt-name apply to text inputs (JSONL, CSV, "
                           "TSV, text); ", job.input, " is not one"),
                       "give a text corpus as --input (or --input-kind jsonl|csv|tsv|text)");
    }
    validate_job(job);
    return run_job(job, origins, argc, argv);
  };
}

}  // namespace sluice
