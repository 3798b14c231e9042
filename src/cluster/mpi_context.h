#pragma once
// MPI set-up for one process of the job: MPI_Init_thread (THREAD_MULTIPLE: the chunk server and
// the writer talk to rank 0 from their own threads), world and node-local ranks, host name.
// Also works as a plain process without mpirun (an MPI singleton of one rank).
#include <mpi.h>

#include <string>
#include <vector>

#include "core/error.h"

#define MPI_CHECK(call)                                                                               \
  do {                                                                                                \
    int mpi_status_ = (call);                                                                         \
    if (mpi_status_ != MPI_SUCCESS) {                                                                 \
      char mpi_msg_[MPI_MAX_ERROR_STRING];                                                            \
      int mpi_len_ = 0;                                                                               \
      MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                                             \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__, std::string(mpi_msg_, mpi_len_))); \
    }                                                                                                 \
  } while (0)

namespace sluice {

class MpiContext {
 public:
  MpiContext(int* argc, char*** argv);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int local_rank() const { return local_rank_; }   // rank among the processes of this node
  int local_size() const { return local_size_; }
  int node_count() const { return nodes_; }
  const std::string& host() const { return host_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }
  MPI_Comm node_comm() const { return node_comm_; }

  // Every rank's value, gathered to every rank (small values: counts, flags).
  std::vector<int64_t> allgather(int64_t value) const;
  // Strings gathered to rank 0 in rank order (empty vector on other ranks).
  std::vector<std::string> gather_strings(const std::string& s) const;
  std::string broadcast_string(const std::string& s, int root = 0) const;
  void barrier() const;
  // Ends every rank of the job (used by main when one rank fails).
  [[noreturn]] void abort(int code) const;

  static bool initialized();

 private:
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  std::string host_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
};

}  // namespace sluice
