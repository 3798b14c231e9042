// Work distribution over MPI (docs/protocol.md, "Sharding").
//
// Every rank keeps the ranges it has not started yet (its share, then what it was granted) and
// hands them to its pipeline one batch at a time.  Two threads talk to the others, each on its own
// duplicate of the world communicator:
//  - the agent (every rank) receives rank 0's orders in order: a grant (ranges to append; an empty
//    grant means there is no more work), a steal (give away the far half of the batches not started
//    yet, answered with the ranges given) and quit;
//  - the server (rank 0) keeps, per rank, the samples assigned and committed, and arbitrates: a rank
//    that runs dry sends a request; the server picks the rank with the most assigned but uncommitted
//    samples, orders it to give away its far half, and grants what it gave to the requester.  Four
//    small messages per steal, one steal at a time.  Rank 0's own pipeline uses the same path.
//    A request is answered with a steal only when the victim has clearly more left than the
//    requester still has in flight, else later (after more commit notices), or with "no more"
//    once every other rank has nothing left that is not in flight.
// Commit notices carry only counts, batched to a few a second per rank, for rank 0's progress line
// and the server's estimate of who has most left.  Point-to-point messages only, so it works across
// nodes over TCP as in shared memory, and under srun as under mpirun.
#include "cluster/work.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "cluster/mpi_context.h"
#include "core/log.h"
#include "core/thread.h"
#include "core/timer.h"

namespace sluice {

namespace {

enum Tag : int { kRequest = 101, kGiven = 102, kProgress = 103, kDone = 104, kShutdown = 105, kOrder = 106 };
enum Order : int64_t { kQuit = 0, kSteal = 1, kGrant = 2 };

constexpr double kNoticeInterval = 0.25;  // seconds between one rank's commit notices

void send(MPI_Comm comm, int dest, int tag, const std::vector<int64_t>& v) {
  MPI_CHECK(MPI_Send(v.data(), static_cast<int>(v.size()), MPI_INT64_T, dest, tag, comm));
}

// Receives one whole message (any length) matching (source, tag).  It polls and sleeps instead of
// blocking in MPI_Recv: Open MPI's blocking receive spins a core, and these threads wait almost all
// the time, beside the ranks' compute threads.  The sleep grows to 2 ms, so an answer takes at most
// about that long to be seen; steals and notices are rare enough for it not to matter.
std::vector<int64_t> poll_recv(MPI_Comm comm, int source, int tag, MPI_Status* status) {
  int flag = 0;
  MPI_Message msg;
  useconds_t nap = 50;
  for (;;) {
    MPI_CHECK(MPI_Improbe(source, tag, comm, &flag, &msg, status));
    if (flag) break;
    ::usleep(nap);
    nap = std::min<useconds_t>(nap * 2, 2000);
  }
  int n = 0;
  MPI_CHECK(MPI_Get_count(status, MPI_INT64_T, &n));
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  MPI_CHECK(MPI_Mrecv(v.data(), n, MPI_INT64_T, &msg, MPI_STATUS_IGNORE));
  return v;
}

std::vector<int64_t> flatten(int64_t head, const std::vector<Range>& ranges) {
  std::vector<int64_t> v{head};
  for (const Range& r : ranges) {
    v.push_back(r.first);
    v.push_back(r.end);
  }
  return v;
}

std::vector<Range> unflatten(const std::vector<int64_t>& v, std::size_t from) {
  std::vector<Range> out;
  for (std::size_t i = from; i + 1 < v.size(); i += 2) out.push_back({v[i], v[i + 1]});
  return out;
}

class MpiWorkDistributor final : public WorkDistributor {
 public:
  MpiWorkDistributor(Sharding mode, const MpiContext& mpi, const Chunking& chunking, std::vector<Range> pending)
      : mode_(mode), rank_(mpi.rank()), world_(mpi.world_size()), batch_(std::max<int64_t>(1, chunking.batch)),
        pending_(std::move(pending)) {
    pending_samples_ = total_size(pending_);
    todo_ = share_of(pending_, batch_, rank_, world_);
    last_notice_ = Clock::now();
  }

  ~MpiWorkDistributor() override {
    // Without finish() (an error path): end this rank's own threads, then let go of the rest.
    if (started_ && !finished_) {
      try {
        if (rank_ == 0) send(srv_, 0, kShutdown, {0});
        send(agt_, rank_, kOrder, {kQuit});
      } catch (const std::exception&) {
      }
    }
    if (server_.joinable()) server_.join_noexcept();
    if (agent_.joinable()) agent_.join_noexcept();
    if (srv_ != MPI_COMM_NULL) MPI_Comm_free(&srv_);
    if (agt_ != MPI_COMM_NULL) MPI_Comm_free(&agt_);
  }

  void start() override {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &srv_));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &agt_));
    started_ = true;
    agent_ = WorkerThread("work-agent", [this] { agent(); });
    if (rank_ == 0) server_ = WorkerThread("work-server", [this] { serve(); });
  }

  std::optional<WorkItem> next() override {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (stop_.load()) return std::nullopt;
      if (!todo_.empty()) {
        Range& r = todo_.front();
        WorkItem w{r.first, std::min(batch_, r.end - r.first)};
        r.first += w.count;
        if (r.empty()) todo_.erase(todo_.begin());
        return w;
      }
      if (mode_ == Sharding::Static || no_more_) return std::nullopt;
      // Dry: ask rank 0 (through the server, rank 0 included) and wait for the agent to apply the answer.
      const int64_t seen = grants_;
      lock.unlock();
      send(srv_, 0, kRequest, {0});
      lock.lock();
      cv_.wait(lock, [&] { return grants_ != seen || stop_.load(); });
    }
  }

  void committed(const WorkItem& range) override {
    unsent_ += range.count;
    if (seconds_since(last_notice_) >= kNoticeInterval) flush_notice();
  }

  void request_stop() override {
    stop_ = true;
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_all();
  }

  bool finish() override {
    flush_notice();
    send(srv_, 0, kDone, {0});
    if (server_.joinable()) server_.join();
    agent_.join();
    int64_t all = committed_.load();
    MPI_CHECK(MPI_Bcast(&all, 1, MPI_INT64_T, 0, srv_));
    finished_ = true;
    return all == pending_samples_;
  }

  int64_t job_committed() const override { return committed_.load(); }
  int64_t job_pending() const override { return pending_samples_; }
  int64_t steals() const override { return steals_; }

 private:
  void flush_notice() {
    if (unsent_ > 0) send(srv_, 0, kProgress, {unsent_});
    unsent_ = 0;
    last_notice_ = Clock::now();
  }

  // Every rank: applies rank 0's orders in the order they were sent.
  void agent() {
    for (;;) {
      MPI_Status st;
      const std::vector<int64_t> m = poll_recv(agt_, MPI_ANY_SOURCE, kOrder, &st);
      SLUICE_CHECK(!m.empty(), "empty work order from rank ", st.MPI_SOURCE);
      if (m[0] == kQuit) return;
      std::unique_lock<std::mutex> lock(mutex_);
      if (m[0] == kGrant) {
        const std::vector<Range> given = unflatten(m, 1);
        if (given.empty()) no_more_ = true;
        todo_.insert(todo_.end(), given.begin(), given.end());
        ++grants_;
        cv_.notify_all();
      } else if (m[0] == kSteal) {
        // The far half of the batches this rank has not started, rounded up: the requester is idle
        // now, while this rank still has its batches in flight to finish.
        const int64_t left = batches_in(todo_, batch_);
        const int64_t give = (left + 1) / 2;
        const std::vector<Range> given = batch_slice(todo_, batch_, left - give, left);
        todo_ = batch_slice(todo_, batch_, 0, left - give);
        lock.unlock();
        send(srv_, 0, kGiven, flatten(0, given));
      } else {
        SLUICE_THROW("unknown work order ", m[0], " from rank ", st.MPI_SOURCE);
      }
    }
  }

  struct Peer {
    int64_t assigned = 0, committed = 0;
    bool done = false, waiting = false, exhausted = false;
  };

  // Rank 0: answers requests, arbitrates steals and counts commits until every rank said DONE.
  void serve() {
    std::vector<Peer> peers(static_cast<std::size_t>(world_));
    for (int r = 0; r < world_; ++r)
      peers[static_cast<std::size_t>(r)].assigned = total_size(share_of(pending_, batch_, r, world_));
    std::deque<int> waiting;
    int done = 0, victim = -1, thief = -1;
    while (done < world_ || victim >= 0) {
      MPI_Status st;
      const std::vector<int64_t> m = poll_recv(srv_, MPI_ANY_SOURCE, MPI_ANY_TAG, &st);
      Peer& from = peers[static_cast<std::size_t>(st.MPI_SOURCE)];
      switch (st.MPI_TAG) {
        case kRequest:
          from.waiting = true;
          waiting.push_back(st.MPI_SOURCE);
          break;
        case kProgress:
          from.committed += m.at(0);
          committed_ += m.at(0);
          break;
        case kGiven: {
          const std::vector<Range> given = unflatten(m, 1);
          const int64_t n = total_size(given);
          from.assigned -= n;
          if (given.empty()) {
            from.exhausted = true;  // all of its work is in flight: no use asking it again
          } else {
            Peer& t = peers[static_cast<std::size_t>(thief)];
            t.assigned += n;
            t.exhausted = false;
            t.waiting = false;
            send(agt_, thief, kOrder, flatten(kGrant, given));
            ++steals_;
            waiting.pop_front();
          }
          victim = thief = -1;
          break;
        }
        case kDone:
          from.done = true;
          ++done;
          break;
        case kShutdown: return;
        default: SLUICE_THROW("unexpected work message tag ", st.MPI_TAG, " from rank ", st.MPI_SOURCE);
      }
      // One steal at a time: the next requester is served once the current steal is answered.
      while (victim < 0 && !waiting.empty()) {
        const int t = waiting.front();
        Peer& thief_peer = peers[static_cast<std::size_t>(t)];
        if (thief_peer.done) {  // stopped while it waited: nothing to give it
          waiting.pop_front();
          continue;
        }
        int best = -1;
        int64_t most = 0;
        for (int r = 0; r < world_ && !stop_.load(); ++r) {
          const Peer& p = peers[static_cast<std::size_t>(r)];
          if (r == t || p.done || p.waiting || p.exhausted) continue;
          if (p.assigned - p.committed > most) {
            most = p.assigned - p.committed;
            best = r;
          }
        }
        if (best < 0) {  // nothing left that is not in flight somewhere: this rank is done
          send(agt_, t, kOrder, {kGrant});
          thief_peer.waiting = false;
          waiting.pop_front();
          continue;
        }
        // Worth it only if the victim has clearly more left than the requester still has in
        // flight (its dispatcher runs ahead of its commits); else the answer waits for the next
        // notice, and the end of the job comes with few, large steals.
        if (most < std::max<int64_t>(0, thief_peer.assigned - thief_peer.committed) + 2 * batch_) break;
        victim = best;
        thief = t;
        send(agt_, victim, kOrder, {kSteal});
      }
    }
    for (int r = 0; r < world_; ++r) send(agt_, r, kOrder, {kQuit});
  }

  Sharding mode_;
  int rank_, world_;
  int64_t batch_;
  std::vector<Range> pending_;
  int64_t pending_samples_ = 0;
  MPI_Comm srv_ = MPI_COMM_NULL, agt_ = MPI_COMM_NULL;
  bool started_ = false, finished_ = false;

  std::mutex mutex_;             // todo_, grants_, no_more_: the dispatcher and the agent
  std::condition_variable cv_;
  std::vector<Range> todo_;      // this rank's ranges not started yet, in order
  int64_t grants_ = 0;
  bool no_more_ = false;
  std::atomic<bool> stop_{false};

  int64_t unsent_ = 0;           // writer thread: committed samples not yet notified
  Clock::time_point last_notice_;

  std::atomic<int64_t> committed_{0};  // rank 0: samples committed by every rank
  int64_t steals_ = 0;
  WorkerThread agent_, server_;
};

}  // namespace

std::unique_ptr<WorkDistributor> make_work_distributor(Sharding mode, const MpiContext& mpi, const Chunking& chunking,
                                                       std::vector<Range> pending) {
  return std::make_unique<MpiWorkDistributor>(mode, mpi, chunking, std::move(pending));
}

}  // namespace sluice
