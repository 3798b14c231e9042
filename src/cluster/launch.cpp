#include "cluster/launch.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sluice {

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

int launcher_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 1;
}

namespace {

bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

// "sluice: error: ...", with "[rank N] " before it when a rank other than 0 speaks for the job
// (as app/agreement.cpp's lines after start-up name their rank).
void print_error_line(const std::string& message, int rank) {
  if (message.empty()) return;
  const std::string who = rank > 0 ? "[rank " + std::to_string(rank) + "] " : std::string();
  std::fprintf(stderr, "sluice: error: %s%s\n", who.c_str(), message.c_str());
  std::fflush(stderr);
}

struct Verdict {
  int status = 0;
  int failed_rank = -1;  // the lowest rank that failed, -1 when none did
};

// The verdict's collectives: the lowest failing rank (MIN over ranks, the world size standing for
// "none"), then that rank's status broadcast from it.  The same two calls on every rank.
Verdict exchange(int status) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = status != 0 ? rank : size, lowest = size;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (lowest == size) return {};
  int agreed = status;
  MPI_Bcast(&agreed, 1, MPI_INT, lowest, MPI_COMM_WORLD);
  return {agreed, lowest};
}

}  // namespace

int settle_at_start(int status, const std::string& message) {
  if (launcher_size() < 2 || mpi_initialized()) {
    // Alone, or after start-up, where the job's steps agree on their own outcomes (app/agreement.h)
    // and rank 0 speaks for the job.
    if (status != 0 && launcher_rank() == 0) print_error_line(message, 0);
    return status;
  }
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    print_error_line(message, launcher_rank());  // no verdict without MPI: say it here
    return status;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Verdict v = exchange(status);
  if (v.failed_rank == rank) print_error_line(message, rank);
  MPI_Barrier(MPI_COMM_WORLD);  // the line is out before any rank exits (and the launcher kills the rest)
  MPI_Finalize();
  return v.status;
}

int join_start_verdict(int status, const std::string& message) {
  const Verdict v = exchange(status);
  if (v.status == 0) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (v.failed_rank == rank) print_error_line(message, rank);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return v.status;
}

}  // namespace sluice
