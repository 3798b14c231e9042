#pragma once
// Graceful stop on SIGTERM, SIGUSR1 and SIGINT (Slurm preemption, scancel, Ctrl-C).
//
// The handlers only write the signal number into a pipe (async-signal-safe) and a watcher thread
// acts on it, so the signal is caught whichever thread the kernel delivers it to: libraries start
// threads of their own (OpenBLAS at load time, MPI) that no signal mask of ours covers.  The first
// signal calls `on_first` (stop taking work, drain, commit); a second one at least a second later
// exits at once with status 75: the rank file's ledger is consistent at every moment, so nothing
// committed is lost.  A repeat within the second is the same event delivered twice (scancel
// signals both mpirun and the ranks, and mpirun forwards it again) and is ignored.
#include <atomic>
#include <functional>

#include "core/thread.h"

namespace sluice {

class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void(int)> on_first);
  // Stops the watcher; the handlers stay installed (a late signal is then ignored while the
  // process writes its report and exits).
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Installs the handlers without a watcher yet: signals are remembered and acted on once the
  // watcher starts.  Call it early, before long set-up steps.
  static void install();

 private:
  std::atomic<bool> done_{false};
  WorkerThread thread_;
};

}  // namespace sluice
