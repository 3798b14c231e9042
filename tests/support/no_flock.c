/* Preloaded into a process (LD_PRELOAD), makes every flock() fail as on a file system that refuses
 * locks: NFS mounted without its lock service answers ENOLCK.  tests/mpi/test_resume_locks.py uses
 * it to check what sluice says there and that HDF5_USE_FILE_LOCKING=FALSE then works. */
#include <errno.h>
#include <sys/file.h>

int flock(int fd, int operation) {
  (void)fd;
  (void)operation;
  errno = ENOLCK;
  return -1;
}
