#include "app/signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"

namespace sluice {

namespace {

int g_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_pipe[1] >= 0) (void)!write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void SignalWatcher::install() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) SLUICE_THROW("pipe2 for the signal watcher failed: ", strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // interrupted reads and writes in other threads carry on
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

SignalWatcher::SignalWatcher(std::function<void(int)> on_first) {
  install();
  thread_ = WorkerThread("signals", [this, on_first] {
    bool first_seen = false;
    Clock::time_point first_at;
    while (!done_.load()) {
      pollfd p{g_pipe[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      unsigned char byte = 0;
      while (read(g_pipe[0], &byte, 1) == 1) {
        const int sig = byte;
        if (sig == 0) continue;   // the destructor's wake-up, not a signal
        if (!first_seen) {
          first_seen = true;
          first_at = Clock::now();
          on_first(sig);
        } else if (seconds_since(first_at) >= 1.0) {
          std::fprintf(stderr, "sluice: second signal (%s): exiting now; committed chunks are kept\n", strsignal(sig));
          std::fflush(stderr);
          _exit(kExitResumable);
        }
      }
    }
  });
}

SignalWatcher::~SignalWatcher() {
  done_ = true;
  // Wakes the poll at once (a 0 byte: no signal has that number), so an exit does not wait for its
  // 200 ms timeout.
  const unsigned char wake = 0;
  if (g_pipe[1] >= 0) (void)!write(g_pipe[1], &wake, 1);
  thread_.join_noexcept();
}

}  // namespace sluice
