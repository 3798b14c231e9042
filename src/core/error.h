#pragma once
// The project's one error type and its check macros.  Every failure becomes a sluice::Error that
// carries what failed (the call's text), where (file:line) and on which rank and device, so main()
// can print one line and stop the whole job.  Backend-specific macros (CUDA_CHECK, CUDNN_CHECK,
// NCCL_CHECK, MPI_CHECK, H5_CHECK) live beside their backends and build on format_failure().
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {

// Process exit statuses, documented in the README.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,    // a runtime failure (device, I/O, internal)
  kExitUsage = 2,      // bad command line or job file
  kExitBadInput = 3,   // bad model, input data or output folder, found before any work
  kExitResumable = 75  // stopped by a signal after committing what was done (EX_TEMPFAIL)
};

// An error is one line saying what is wrong, and optionally a hint: one more line saying what to
// do about it ("pass --resume to finish it"), printed as "sluice: hint: ...".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kExitFailure, std::string hint = "")
      : std::runtime_error(what), exit_code_(exit_code), hint_(std::move(hint)) {}
  int exit_code() const { return exit_code_; }
  const std::string& hint() const { return hint_; }

 private:
  int exit_code_;
  std::string hint_;
};

// Usage errors (exit 2) and bad-input errors (exit 3) are ordinary Errors with their own status.
struct UsageError : Error {
  explicit UsageError(const std::string& what, std::string hint = "") : Error(what, kExitUsage, std::move(hint)) {}
};
struct InputError : Error {
  explicit InputError(const std::string& what, std::string hint = "") : Error(what, kExitBadInput, std::move(hint)) {}
};
// A size past what Sluice handles (a tensor over 1 TiB, a count that overflows 64 bits): bad input
// unless the job's own --batch-size caused it, which the caller can tell by trying batch 1.
struct SizeError : InputError {
  using InputError::InputError;
};

// The hint of a "no such file" about a path the user gave (--model, --input, ...).
inline constexpr const char* kPathsHint =
    "paths in a job file are relative to the job file's folder, on the command line to the working directory";

// What to print for an error: its line, and "\nsluice: hint: ..." when it has a hint (no final newline).
std::string error_text(const std::exception& e);

// The candidate nearest to `word` by edit distance, or "" when none is close enough to be a typo.
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Who is failing: set once per process (rank) and once per thread (device, thread name).
void set_error_rank(int rank);
void set_thread_device(int device);   // -1: host
int thread_device();

// "cudaMalloc(&p, n) failed at src/x.cpp:12 [rank 3, device 1]: out of memory"
std::string format_failure(const char* call, const char* file, int line, const std::string& detail);

}  // namespace sluice

#define SLUICE_CHECK(cond, ...)                                                                     \
  do {                                                                                              \
    if (!(cond))                                                                                    \
      throw ::sluice::Error(::sluice::format_failure(#cond, __FILE__, __LINE__, ::sluice::str(__VA_ARGS__))); \
  } while (0)

#define SLUICE_THROW(...) throw ::sluice::Error(::sluice::str(__VA_ARGS__))
