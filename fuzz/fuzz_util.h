#pragma once
// What the fuzz targets share: a private scratch folder, and the rule that bad input must end in
// a sluice::Error of the right kind and nothing else.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace sluice::fuzz {

// A folder of this process's own (on /dev/shm when there is one: the targets write a file per
// input), made on first use.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string templ = std::string(base) + "/sluice-fuzz-XXXXXX";
    if (!mkdtemp(templ.data())) std::abort();
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Bad input may end in a usage (2) or bad-input (3) error; anything else (exit 1, a std::
// exception, a crash) is a finding.  The target aborts, so libFuzzer saves the input.
[[noreturn]] inline void finding(const char* what, const std::string& message) {
  std::fprintf(stderr, "fuzz finding: %s: %s\n", what, message.c_str());
  std::abort();
}

inline void check_error_kind(const Error& e) {
  if (e.exit_code() != kExitUsage && e.exit_code() != kExitBadInput)
    finding("a sluice::Error that is not a usage or input error", e.what());
}

}  // namespace sluice::fuzz
