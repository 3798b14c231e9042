#include "cluster/stop_relay.h"

#include <chrono>

#include "core/log.h"

namespace sluice {

namespace {
constexpr int kStopTag = 201;
}

StopRelay::StopRelay(const MpiContext& mpi, std::function<void(int)> on_remote_stop)
    : rank_(mpi.rank()), world_(mpi.world_size()), on_remote_stop_(std::move(on_remote_stop)) {
  if (world_ < 2) return;
  MPI_CHECK(MPI_Comm_dup(mpi.comm(), &comm_));
  thread_ = WorkerThread("stop-relay", [this] { listen(); });
}

void StopRelay::listen() {
  int incoming = 0;
  MPI_Request recv = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(&incoming, 1, MPI_INT, MPI_ANY_SOURCE, kStopTag, comm_, &recv));
  bool told = false;
  for (;;) {
    int arrived = 0;
    MPI_Status st;
    MPI_CHECK(MPI_Test(&recv, &arrived, &st));
    if (arrived) {
      if (!told) {
        told = true;
        on_remote_stop_(st.MPI_SOURCE);
      }
      // Keep receiving: several ranks may send a stop, and each message must be matched.
      MPI_CHECK(MPI_Irecv(&incoming, 1, MPI_INT, MPI_ANY_SOURCE, kStopTag, comm_, &recv));
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    // A stop only has to arrive well within a batch time; polling keeps MPI off a blocking call
    // that close() could not interrupt.
    cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return closing_; });
    if (closing_) break;
  }
  MPI_Cancel(&recv);
  MPI_Wait(&recv, MPI_STATUS_IGNORE);
}

void StopRelay::broadcast() {
  if (world_ < 2 || sent_.exchange(true)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_) return;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    MPI_Request req;
    if (MPI_Isend(&payload_, 1, MPI_INT, r, kStopTag, comm_, &req) == MPI_SUCCESS) sends_.push_back(req);
    else log_warn("could not tell rank ", r, " to stop");
  }
}

void StopRelay::close() {
  if (world_ < 2) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join_noexcept();
  // The stop messages are a few bytes, sent eagerly: they complete whether or not a peer still
  // listens.
  if (!sends_.empty()) MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
  sends_.clear();
}

StopRelay::~StopRelay() {
  close();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

}  // namespace sluice
