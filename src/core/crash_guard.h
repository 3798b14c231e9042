#pragma once
// Third-party code that parses files a user hands us can crash on a corrupt one: libhdf5 1.10
// segfaults on some crafted metadata (found by the fuzzer; fuzz/README.md), and no check of ours
// can rule that out before handing it the file.  A CrashGuard marks the calling thread as inside
// such code; a SIGSEGV, SIGBUS, SIGFPE or SIGILL raised there prints one line,
//   sluice: error: <what>: <library> crashed reading it (a corrupt or crafted file?)
// and ends the process with exit 3 (bad input) instead of dying by the signal.  Outside a guard,
// and before install_crash_guard(), those signals keep their default action: a bug of ours must
// still dump core.
#include <string>

namespace sluice {

// Installs the handlers (once per process; main() calls it).  Tests and fuzz targets leave it out:
// they want the crash itself.
void install_crash_guard();

class CrashGuard {
 public:
  // `what` names the input ("input data.h5"), `library` the code at risk ("libhdf5"); guards nest
  // (the innermost one speaks).
  CrashGuard(const std::string& what, const char* library);
  ~CrashGuard();
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

 private:
  std::string line_;                 // the whole message, built up front: the handler only writes it
  const std::string* outer_ = nullptr;
};

}  // namespace sluice
