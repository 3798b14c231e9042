// `sluice mpirun [mpirun options] -- [sluice run options]` and `sluice srun [srun options] -- ...`:
// the launcher with stops that keep their promise.  OpenMPI 4.1's mpirun treats SIGTERM, SIGINT
// and SIGHUP as "abort the job": it sends the ranks SIGCONT, then SIGTERM and SIGKILL
// odls_base_sigkill_timeout seconds apart (1 s by default), and exits 1 whatever the ranks do;
// these signals cannot be forwarded (ess_base_forward_signals refuses them).  srun answers SIGTERM
// by killing the step, and a single SIGINT by printing the tasks' state.  Both forward SIGUSR1 to
// every rank.  So this command runs the launcher in a process group of its own (a terminal's Ctrl-C
// reaches only this process) and turns each TERM, INT, HUP or USR1 it receives into a USR1 for the
// launcher: the ranks stop, commit and exit 75, and so do the launcher and this command.
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
    std::vector<char*> args;
    for (auto& s : cmd) args.push_back(s.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "sluice: error: cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(child, child);

  int status = 0;
  int relayed = 0;
  for (;;) {
    const pid_t w = waitpid(child, &status, WNOHANG);
    if (w == child) break;
    pollfd p{g_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
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
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
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
