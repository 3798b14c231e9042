// `sluice run`: one process of a job.  Set-up (validation, model, engine, output folder) is agreed
// among all ranks, so a bad input ends every rank with one message and the same exit status before
// any work; after that a failing rank prints its error and aborts the job (MPI_Abort), so no rank
// is left waiting.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "app/commands.h"
#include "app/job.h"
#include "app/job_options.h"
#include "app/outdir.h"
#include "app/run_context.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/timer.h"
#include "dist/mpi_context.h"
#include "dist/work.h"
#include "pipeline/pipeline.h"
#include "report/progress.h"
#include "report/report.h"
#include "sluice/version.h"

namespace sluice {

namespace {

// Runs `step` on every rank and agrees on the outcome: if any rank failed, the lowest failing
// rank prints its message and every rank throws the same status (without printing again).
void agreed(const MpiContext& mpi, const std::function<void()>& step) {
  int64_t code = 0;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    code = e.exit_code();
    message = e.what();
  } catch (const std::exception& e) {
    code = kExitFailure;
    message = e.what();
  }
  const std::vector<int64_t> codes = mpi.allgather(code);
  for (int r = 0; r < mpi.world_size(); ++r) {
    if (codes[static_cast<std::size_t>(r)] == 0) continue;
    if (r == mpi.rank()) {
      std::fprintf(stderr, "sluice: error: %s%s\n", mpi.world_size() > 1 ? str("[rank ", r, "] ").c_str() : "",
                   message.c_str());
      std::fflush(stderr);
    }
    throw Error("", static_cast<int>(codes[static_cast<std::size_t>(r)]));
  }
}

// SIGTERM, SIGUSR1 and SIGINT are blocked in every thread and taken by this one with sigwait, so
// the handler can do real work (stop the pipeline, log) instead of being async-signal-limited.
// The first signal asks for a graceful stop; a second one (at least a second later) exits at once:
// the rank file's ledger is consistent at every moment, so nothing committed is lost.
class SignalWatcher {
 public:
  static void block_in_this_and_future_threads() {
    sigset_t set = signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

  explicit SignalWatcher(std::function<void(int)> on_first) {
    thread_ = WorkerThread("signals", [this, on_first] {
      sigset_t set = signals();
      bool first_seen = false;
      Clock::time_point first_at;
      while (!done_.load()) {
        timespec timeout{0, 200 * 1000 * 1000};
        const int sig = sigtimedwait(&set, nullptr, &timeout);
        if (sig <= 0) continue;
        if (!first_seen) {
          first_seen = true;
          first_at = Clock::now();
          on_first(sig);
        } else if (seconds_since(first_at) < 1.0) {
          // The same event delivered twice (scancel signals mpirun and the ranks, and mpirun
          // forwards it again): not a second request.
          continue;
        } else {
          std::fprintf(stderr, "sluice: second signal (%s): exiting now; committed chunks are kept\n", strsignal(sig));
          _exit(kExitResumable);
        }
      }
    });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join_noexcept();
  }

 private:
  static sigset_t signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGINT);
    return set;
  }
  std::atomic<bool> done_{false};
  WorkerThread thread_;
};

int run_job(JobConfig job, const std::string& job_toml, int argc, char** argv) {
  // Under a Slurm requeue the job resumes by itself.
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT"); restarts && std::atoi(restarts) > 0 && !job.overwrite) {
    if (!job.resume) log_info("Slurm requeue (SLURM_RESTART_COUNT=", restarts, "): resuming");
    job.resume = true;
  }
  SignalWatcher::block_in_this_and_future_threads();
  MpiContext mpi(&argc, &argv);
  set_log_rank(mpi.rank(), mpi.world_size());
  if (job.quiet) set_log_level(LogLevel::Warn);
  if (mpi.rank() == 0 && !job.quiet) {
    std::fprintf(stderr, "sluice %s (git %s): %d rank(s) on %d node(s); the job:\n%s", SLUICE_VERSION, SLUICE_GIT_COMMIT,
                 mpi.world_size(), mpi.node_count(), job_toml.c_str());
    std::fflush(stderr);
  }

  RunContext ctx(job, job_toml, mpi);
  agreed(mpi, [&] { ctx.open_source(); });
  agreed(mpi, [&] { ctx.choose_device(); });
  agreed(mpi, [&] { ctx.load_model(); });  // rank 0 reads the model file, once
  ctx.share_model();
  agreed(mpi, [&] { ctx.plan(); });   // rank 0 prepares the output folder; the plan is broadcast
  agreed(mpi, [&] { ctx.build(); });  // engine, device, slots, rank file

  std::unique_ptr<Progress> progress;
  SignalWatcher watcher([&](int sig) {
    log_info("received ", strsignal(sig), ": finishing the chunks in flight, then stopping (resumable)");
    ctx.stop();
  });
  mpi.barrier();
  if (mpi.rank() == 0 && !job.quiet)
    progress = std::make_unique<Progress>(ctx.work(), ctx.plan_result().committed_before, ctx.chunking().total,
                                          job.progress_interval);
  try {
    ctx.run();
  } catch (const Error& e) {
    std::fprintf(stderr, "sluice: error: %s%s\n", mpi.world_size() > 1 ? str("[rank ", mpi.rank(), "] ").c_str() : "",
                 e.what());
    std::fflush(stderr);
    if (mpi.world_size() > 1) mpi.abort(e.exit_code());
    throw Error("", e.exit_code());
  }
  const bool complete = ctx.drain();
  progress.reset();  // after drain(): rank 0 has counted every rank's last commit
  ctx.report();      // gathers the report, writes outputs.h5 and report.json
  if (complete) return kExitOk;
  return kExitResumable;
}

}  // namespace

void add_run_command(CLI::App& app, Commands& commands) {
  static JobConfig job;
  CLI::App* run = app.add_subcommand("run", "Run a job: the model over every sample, outputs to HDF5 rank files");
  add_job_options(*run, job);
  commands.handlers["run"] = [run](int argc, char** argv) {
    apply_job_file(*run, job);
    validate_job(job);
    return run_job(job, job_to_toml(job), argc, argv);
  };
}

}  // namespace sluice
