#pragma once
// A stop that reaches every rank.  A signal may reach one rank only (`kill -TERM <pid>` of one
// process, a node-local signal), yet a stop must end the whole job: otherwise the other ranks
// would go on to the end, and a "stop" would become a complete run.  Each rank listens on its own
// communicator for a stop message from any rank; a rank told to stop sends one to every other.
// Point-to-point only (no collective a stopping rank could miss), on a duplicated communicator
// so it never matches the work distributor's messages.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "cluster/mpi_context.h"
#include "core/thread.h"

namespace sluice {

class StopRelay {
 public:
  // Collective (duplicates the communicator).  `on_remote_stop(rank)` runs on the relay's thread
  // when another rank sends a stop.
  StopRelay(const MpiContext& mpi, std::function<void(int from)> on_remote_stop);
  // Stops listening; call it on every rank once its pipeline has drained.  Not collective.
  void close();
  ~StopRelay();
  StopRelay(const StopRelay&) = delete;
  StopRelay& operator=(const StopRelay&) = delete;

  // This rank was told to stop: tell every other rank (any thread, once is enough).
  void broadcast();

 private:
  void listen();

  int rank_ = 0, world_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::function<void(int)> on_remote_stop_;
  std::atomic<bool> sent_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<MPI_Request> sends_;
  int payload_ = 1;
  WorkerThread thread_;
};

}  // namespace sluice
