#include "core/crash_guard.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace sluice {

namespace {

// The message of the innermost guard of this thread; read by the handler (a plain pointer in
// static TLS: safe to read in a signal handler).
thread_local const std::string* t_guard = nullptr;

// A separate stack per guarded thread, so a stack overflow inside the library still runs the
// handler.
constexpr std::size_t kAltStackBytes = 64 * 1024;
thread_local bool t_alt_stack = false;

extern "C" void on_crash(int sig) {
  const std::string* line = t_guard;
  if (line) {
    // write() and _exit() only: the library may hold locks, its heap may be broken.
    ssize_t ignored = ::write(STDERR_FILENO, line->data(), line->size());
    (void)ignored;
    _exit(kExitBadInput);
  }
  // Not ours to excuse: die by the signal as if no handler were there (core dump included).
  signal(sig, SIG_DFL);
  raise(sig);
}

void ensure_alt_stack() {
  if (t_alt_stack) return;
  t_alt_stack = true;
  stack_t current;
  if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;  // one exists
  stack_t st{};
  st.ss_sp = std::malloc(kAltStackBytes);  // lives as long as the thread may take a signal
  st.ss_size = kAltStackBytes;
  if (st.ss_sp) sigaltstack(&st, nullptr);
}

}  // namespace

void install_crash_guard() {
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

CrashGuard::CrashGuard(const std::string& what, const char* library)
    : line_(str("sluice: error: ", what, ": ", library, " crashed reading it (a corrupt or crafted file?)\n")),
      outer_(t_guard) {
  ensure_alt_stack();
  t_guard = &line_;
}

CrashGuard::~CrashGuard() { t_guard = outer_; }

}  // namespace sluice
