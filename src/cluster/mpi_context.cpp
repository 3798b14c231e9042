#include "cluster/mpi_context.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "cluster/launch.h"
#include "core/timer.h"

namespace sluice {

MpiContext::MpiContext(int* argc, char*** argv) {
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as codes (and become sluice::Error) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  // The job's first collective: a rank whose options failed before MPI (cluster/launch.h) meets
  // the others here, and every rank leaves with its status.
  const std::string no_threads =
      provided < MPI_THREAD_MULTIPLE ? str("this MPI library provides thread level ", provided,
                                           " but Sluice needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")")
                                     : std::string();
  if (const int refused = join_start_verdict(no_threads.empty() ? 0 : kExitFailure, no_threads))
    throw Error("", refused);  // its line is out, printed by the rank that failed
  set_error_rank(world_ > 1 ? rank_ : -1);

  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  host_ = name;

  // Node-local rank: the GPU a rank drives unless the job maps GPUs otherwise.
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_));
  MPI_CHECK(MPI_Comm_rank(node_comm_, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node_comm_, &local_size_));
  int is_leader = local_rank_ == 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&is_leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  // One clock for the job, rank 0's: each rank compares its clock with rank 0's as read just before
  // a broadcast.  The difference is the nodes' clock difference plus one message's latency (micro-
  // to milliseconds, more on a loaded machine), so only a difference beyond kClockTolerance is taken
  // for a clock that is off and subtracted from every time this process reads (core/timer.h).
  if (world_ > 1) {
    constexpr double kClockTolerance = 0.5;  // seconds
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double root_now = unix_time_now();
    MPI_CHECK(MPI_Bcast(&root_now, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    const double diff = unix_time_now() - root_now;
    if (rank_ != 0 && std::abs(diff) > kClockTolerance) set_clock_offset(diff);
  }
}

MpiContext::~MpiContext() {
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool MpiContext::initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

std::vector<int64_t> MpiContext::allgather(int64_t value) const {
  std::vector<int64_t> all(static_cast<std::size_t>(world_));
  MPI_CHECK(MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD));
  return all;
}

std::vector<std::string> MpiContext::gather_strings(const std::string& s) const {
  int len = static_cast<int>(s.size());
  std::vector<int> lens(rank_ == 0 ? world_ : 0);
  MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<int> displs;
  std::string all;
  if (rank_ == 0) {
    displs.resize(static_cast<std::size_t>(world_));
    int total = 0;
    for (int r = 0; r < world_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_CHECK(MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (rank_ == 0)
    for (int r = 0; r < world_; ++r) out.push_back(all.substr(displs[r], lens[r]));
  return out;
}

std::string MpiContext::broadcast_string(const std::string& s, int root) const {
  int64_t len = static_cast<int64_t>(s.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT64_T, root, MPI_COMM_WORLD));
  std::string out = rank_ == root ? s : std::string(static_cast<std::size_t>(len), '\0');
  // Large strings (a model's bytes) go in pieces: MPI counts are ints.
  const int64_t piece = int64_t{1} << 30;
  for (int64_t off = 0; off < len; off += piece) {
    const int n = static_cast<int>(std::min(piece, len - off));
    MPI_CHECK(MPI_Bcast(out.data() + off, n, MPI_CHAR, root, MPI_COMM_WORLD));
  }
  return out;
}

void MpiContext::barrier() const { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

void MpiContext::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

}  // namespace sluice
