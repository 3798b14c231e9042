// sluice: the command-line entry point.  Everything else lives in sluice_lib.
#include <hdf5.h>

#include <csignal>

#include "app/cli.h"
#include "core/crash_guard.h"

int main(int argc, char** argv) {
  // Past `ulimit -f` the kernel sends SIGXFSZ, whose default action kills the process with no
  // word.  Ignored, the write fails with EFBIG instead and the writer's error path reports it
  // (exit 1, committed chunks kept) like any other failed write.
  std::signal(SIGXFSZ, SIG_IGN);
  // HDF5's shutdown at exit closes whatever is still open, and libhdf5 1.10 segfaults there on a
  // file whose close already failed (a full disk, a file size limit).  Every file is closed by
  // its owner before main returns, and a commit is durable without a close (kill -9 loses
  // nothing committed), so skipping that shutdown costs nothing.  Must precede any HDF5 call.
  H5dont_atexit();
  // A library crashing on a corrupt input file ends with a message and exit 3 (core/crash_guard.h).
  sluice::install_crash_guard();
  return sluice::cli_main(argc, argv);
}
