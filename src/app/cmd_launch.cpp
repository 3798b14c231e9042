// `sluice mpirun [mpirun options] -- [sluice run options]` and `sluice srun [srun options] -- ...`:
// the launcher with stops that keep their promise.  OpenMPI 4.1's mpirun treats SIGTERM, SIGINT
// and SIGHUP as "abort the job": it sends the ranks SIGCONT, then SIGTERM and SIGKILL
// odls_base_sigkill_timeout seconds apart (1 s by default), and exits 1 whatever the ranks do;
// these signals cannot be forwarded (ess_base_forward_signals refuses them).  srun answers SIGTERM
// by killing the step, and a single SIGINT by printing the tasks' state.  Both forward SIGUSR1 to
// every rank.  So this command runs the launcher in a process group of its own (a terminal's Ctrl-C
// reaches only this process) and turns each TERM, INT, HUP or USR1 it receives into a USR1 for the
// launcher: the ranks stop, commit and exit 75, and so do the launcher and this command.  mpirun
// then prints two framed notices ("Primary job terminated normally, but 1 process returned a
// non-zero exit code. Per user-direction, the job has been aborted." and the first rank's exit code)
// that read like a crash; the launcher's stderr passes through this command, which holds those
// notices back and, when the launcher exits 75, says in one line what happened instead.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/commands.h"
#include "core/error.h"

namespace sluice {

namespace {

int g_pipe[2] = {-1, -1};

extern "C" void relay_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_pipe[1], &b, 1);
  errno = saved;
}

std::string g_name = "mpirun";

void say(const std::string& s) {
  std::fprintf(stderr, "sluice %s: %s\n", g_name.c_str(), s.c_str());
  std::fflush(stderr);
}

// The launcher's stderr, passed through line by line except for mpirun's framed notices of a rank's
// non-zero exit, which are held until the launcher's status says whether they were a clean stop.
class StderrRelay {
 public:
  void feed(const char* data, std::size_t n) {
    pending_.append(data, n);
    std::size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      line(pending_.substr(0, nl + 1));
      pending_.erase(0, nl + 1);
    }
  }
  // Text without its newline yet (a progress line in the making) goes out when the pipe is idle.
  void idle() {
    if (!in_frame_ && !pending_.empty()) {
      emit(pending_);
      pending_.clear();
    }
  }
  void finish(int status) {
    if (!pending_.empty()) line(pending_);
    pending_.clear();
    for (const std::string& l : frame_) emit(l);  // a notice cut short: nothing to hold it for
    frame_.clear();
    if (held_.empty()) return;
    if (status == kExitResumable) {
      say("every rank stopped cleanly and exited 75 (mpirun's notice of a non-zero exit status is left out): "
          "rerun with --resume to finish");
    } else {
      for (const std::string& l : held_) emit(l);
    }
    held_.clear();
  }

 private:
  static bool is_rule(const std::string& l) {
    std::size_t dashes = 0;
    for (char c : l) {
      if (c == '-') ++dashes;
      else if (c != '\n' && c != '\r') return false;
    }
    return dashes >= 20;
  }
  static void emit(const std::string& s) {
    (void)!write(2, s.data(), s.size());
  }
  void line(const std::string& l) {
    if (!in_frame_) {
      if (is_rule(l)) {
        in_frame_ = true;
        frame_ = {l};
      } else {
        emit(l);
      }
      return;
    }
    frame_.push_back(l);
    if (!is_rule(l)) return;
    in_frame_ = false;
    std::string text;
    for (const std::string& f : frame_) text += f;
    const bool exit_notice = text.find("returned\na non-zero exit code") != std::string::npos ||
                             text.find("exited with non-zero status") != std::string::npos;
    if (exit_notice) held_.insert(held_.end(), frame_.begin(), frame_.end());
    else for (const std::string& f : frame_) emit(f);
    frame_.clear();
  }

  std::string pending_;
  bool in_frame_ = false;
  std::vector<std::string> frame_, held_;
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("sluice mpirun: cannot find its own binary (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

int launch_command(const std::string& launcher_name, int argc, char** argv) {
  g_name = launcher_name;
  if (argc == 1 && (std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h")) {
    std::printf(
        "Usage: sluice %s [%s options] -- [sluice run options]\n\n"
        "Runs `%s [%s options] sluice run [sluice run options]` in a process group of its own and turns\n"
        "each SIGTERM, SIGINT (Ctrl-C) or SIGHUP it receives into a SIGUSR1 for %s, which passes it to every\n"
        "rank: they finish the chunks in flight, commit and exit 75; `sluice run --resume --output DIR`\n"
        "finishes the run.  A second signal stops the ranks at once (committed chunks are kept).\n"
        "The -- between the two option lists is required; `sluice run --help` lists the run options.\n"
        "Example: sluice %s %s -- --config jobs/quickstart.toml\n",
        launcher_name.c_str(), launcher_name.c_str(), launcher_name.c_str(), launcher_name.c_str(),
        launcher_name.c_str(), launcher_name.c_str(), launcher_name == "srun" ? "--mpi=pmix" : "-np 2");
    return kExitOk;
  }
  std::vector<std::string> launcher_args, run_args;
  bool split = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (!split && a == "--") split = true;
    else (split ? run_args : launcher_args).push_back(a);
  }
  if (!split)
    throw UsageError(str("usage: sluice ", launcher_name, " [", launcher_name, " options] -- [sluice run options] ",
                         "(the -- between them is required)"));

  std::vector<std::string> cmd = {launcher_name};
  cmd.insert(cmd.end(), launcher_args.begin(), launcher_args.end());
  cmd.push_back(self_exe());
  cmd.push_back("run");
  cmd.insert(cmd.end(), run_args.begin(), run_args.end());

  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(str("pipe2: ", strerror(errno)));
  int err_pipe[2] = {-1, -1};
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(str("pipe2: ", strerror(errno)));
  struct sigaction sa {};
  sa.sa_handler = relay_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaction(sig, &sa, nullptr);

  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw Error(str("fork: ", strerror(errno)));
  if (child == 0) {
    setpgid(0, 0);
    // If this command dies (kill -9), mpirun still gets a stop rather than running on unwatched.
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() != parent) kill(getpid(), SIGUSR1);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaction(sig, &dfl, nullptr);
    // In a background process group, reading the terminal would stop mpirun (SIGTTIN).
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(err_pipe[1], 2);
    std::vector<char*> args;
    for (auto& s : cmd) args.push_back(s.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "sluice: error: cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(child, child);
  close(err_pipe[1]);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

  StderrRelay relay;
  char buf[4096];
  bool err_open = true;
  const auto drain = [&] {
    ssize_t n;
    while (err_open && (n = read(err_pipe[0], buf, sizeof buf)) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) err_open = false;
        return;
      }
      relay.feed(buf, static_cast<std::size_t>(n));
    }
    err_open = false;  // end of file: every writer of the launcher's stderr is gone
  };
  int status = 0;
  int relayed = 0;
  for (;;) {
    const pid_t w = waitpid(child, &status, WNOHANG);
    if (w == child) break;
    pollfd p[2] = {{g_pipe[0], POLLIN, 0}, {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (poll(p, 2, 100) <= 0) {
      relay.idle();
      continue;
    }
    if (p[1].revents) drain();
    if (!(p[0].revents & POLLIN)) continue;
    unsigned char b = 0;
    while (read(g_pipe[0], &b, 1) == 1) {
      if (relayed++ == 0)
        say(str(strsignal(b), ": passed to every rank as SIGUSR1: they finish the chunks in flight, commit and exit 75 ",
                "(a second signal stops them at once)"));
      else
        say(str(strsignal(b), ": passed on again: the ranks exit now (committed chunks are kept)"));
      kill(child, SIGUSR1);
    }
  }
  // What the launcher's children still write (it is gone, they may not be), then the held notices.
  while (err_open) {
    pollfd p{err_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) break;
    drain();
  }
  close(err_pipe[0]);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : kExitFailure;
  relay.finish(code);
  return code;
}

void add_launch_commands(CLI::App& app) {
  // Parsed by cli_main before CLI11 sees them (their options are the launcher's); listed for --help.
  for (const char* name : {"mpirun", "srun"}) {
    CLI::App* sub = app.add_subcommand(
        name, str("Run a job under ", name, " so that SIGTERM, SIGINT and Ctrl-C stop it cleanly (exit 75): sluice ",
                  name, " [", name, " options] -- [sluice run options]"));
    sub->allow_extras();
    sub->prefix_command();
  }
}

}  // namespace sluice
