// Work distribution over MPI.  Rank 0 runs a small server thread on a duplicated communicator:
// dynamic sharding answers chunk requests in index order (a rank asks only when its pipeline has
// room, so a slow GPU asks less often and takes fewer chunks); in both modes every rank reports each
// committed chunk (for rank 0's progress line) and a final DONE.  Point-to-point messages only, so
// it works across nodes over TCP as well as in shared memory, and under srun as under mpirun.
#include "dist/work.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/thread.h"

namespace sluice {

namespace {
enum Tag : int { kRequest = 101, kReply = 102, kProgress = 103, kDone = 104 };
}  // namespace

WorkItem Chunking::item(int64_t id) const {
  WorkItem w;
  w.chunk_id = id;
  w.first = id * chunk_samples;
  w.count = std::min(chunk_samples, total - w.first);
  return w;
}

std::vector<int64_t> static_share(const std::vector<int64_t>& pending, int rank, int world) {
  const int64_t n = static_cast<int64_t>(pending.size());
  const int64_t lo = n * rank / world, hi = n * (rank + 1) / world;
  return std::vector<int64_t>(pending.begin() + lo, pending.begin() + hi);
}

namespace {

class MpiWorkDistributor final : public WorkDistributor {
 public:
  MpiWorkDistributor(Sharding mode, const MpiContext& mpi, const Chunking& chunking, std::vector<int64_t> pending)
      : mode_(mode), rank_(mpi.rank()), world_(mpi.world_size()), chunking_(chunking) {
    MPI_CHECK(MPI_Comm_dup(mpi.comm(), &comm_));
    for (int64_t id : pending) pending_samples_ += chunking_.item(id).count;
    if (mode_ == Sharding::Static) {
      for (int64_t id : static_share(pending, rank_, world_)) local_.push_back(id);
    } else if (rank_ == 0) {
      for (int64_t id : pending) shared_.push_back(id);
    }
    if (rank_ == 0 && world_ > 1) server_ = WorkerThread("chunk-server", [this] { serve(); });
  }

  ~MpiWorkDistributor() override {
    if (server_.joinable()) server_.join_noexcept();
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  std::optional<WorkItem> next() override {
    if (stop_.load()) return std::nullopt;
    int64_t id = -1;
    if (mode_ == Sharding::Static) {
      if (!local_.empty()) {
        id = local_.front();
        local_.pop_front();
      }
    } else if (rank_ == 0) {
      id = take_shared();
    } else {
      int64_t ask = 0;
      MPI_CHECK(MPI_Send(&ask, 1, MPI_INT64_T, 0, kRequest, comm_));
      MPI_CHECK(MPI_Recv(&id, 1, MPI_INT64_T, 0, kReply, comm_, MPI_STATUS_IGNORE));
    }
    if (id < 0) {
      if (mode_ == Sharding::Dynamic) exhausted_ = true;
      return std::nullopt;
    }
    return chunking_.item(id);
  }

  void committed(const WorkItem& item) override {
    if (rank_ == 0) {
      committed_ += item.count;
    } else {
      int64_t n = item.count;
      MPI_CHECK(MPI_Send(&n, 1, MPI_INT64_T, 0, kProgress, comm_));
    }
  }

  void request_stop() override { stop_ = true; }

  bool finish() override {
    if (rank_ != 0) {
      int64_t zero = 0;
      MPI_CHECK(MPI_Send(&zero, 1, MPI_INT64_T, 0, kDone, comm_));
    } else if (server_.joinable()) {
      server_.join();
    }
    // Complete only if every pending sample was committed somewhere.
    int64_t all = committed_.load();
    MPI_CHECK(MPI_Bcast(&all, 1, MPI_INT64_T, 0, comm_));
    return all == pending_samples_;
  }

  int64_t job_committed() const override { return committed_.load(); }
  int64_t job_pending() const override { return pending_samples_; }

 private:
  int64_t take_shared() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_.load() || shared_.empty()) return -1;
    const int64_t id = shared_.front();
    shared_.pop_front();
    return id;
  }

  // Rank 0's server: answers requests and counts progress until every other rank said DONE.
  void serve() {
    int done = 0;
    while (done < world_ - 1) {
      MPI_Status st;
      int64_t value = 0;
      MPI_CHECK(MPI_Recv(&value, 1, MPI_INT64_T, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &st));
      switch (st.MPI_TAG) {
        case kRequest: {
          int64_t id = take_shared();
          MPI_CHECK(MPI_Send(&id, 1, MPI_INT64_T, st.MPI_SOURCE, kReply, comm_));
          break;
        }
        case kProgress: committed_ += value; break;
        case kDone: ++done; break;
        default: SLUICE_THROW("unexpected message tag ", st.MPI_TAG, " from rank ", st.MPI_SOURCE);
      }
    }
  }

  Sharding mode_;
  int rank_, world_;
  Chunking chunking_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::deque<int64_t> local_;   // static: this rank's chunks
  std::deque<int64_t> shared_;  // dynamic, rank 0: chunks not yet handed out
  std::mutex mutex_;
  std::atomic<bool> stop_{false};
  bool exhausted_ = false;
  std::atomic<int64_t> committed_{0};
  int64_t pending_samples_ = 0;
  WorkerThread server_;
};

}  // namespace

std::unique_ptr<WorkDistributor> make_work_distributor(Sharding mode, const MpiContext& mpi, const Chunking& chunking,
                                                       std::vector<int64_t> pending) {
  return std::make_unique<MpiWorkDistributor>(mode, mpi, chunking, std::move(pending));
}

}  // namespace sluice
