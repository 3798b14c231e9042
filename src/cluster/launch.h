#pragma once
// A job's processes before and at MPI_Init: what the launcher (mpirun, srun) says about this process,
// and the start-up verdict every process of a job agrees on before any other collective.
//
// Each process reads its own command line and job file before MPI starts, and they can disagree:
// `mpirun -np 1 sluice run ... : -np 1 sluice run ... --batch-size 0`, or a job file missing on one
// node.  A process that fails there and a process that goes on must still meet in the same first
// collective, or each waits in a different one forever.  So the first collective on MPI_COMM_WORLD
// of every process is this verdict: each brings the exit status of what it did before MPI (0: its
// options were good), and all get back the status of the lowest rank that failed.  That rank prints
// its error line; every rank then leaves with that status.
#include <string>

namespace sluice {

// This process's rank and the job's size as the launcher's environment gives them before MPI_Init
// (OpenMPI, PMIx, PMI, Slurm); 0 and 1 for a plain process.
int launcher_rank();
int launcher_size();

// For a process that ends before its work (its options failed, or it has nothing to do: `sluice
// export` leaves the work to rank 0): under a launcher it initializes MPI, brings `status` to the
// verdict, prints `message` as the error line if it is the lowest failing rank, waits until that
// line is out everywhere, and finalizes MPI.  Without a launcher (or with MPI already initialized)
// it prints `message` when `status` is not 0.  Returns the agreed status: this process's exit status.
int settle_at_start(int status, const std::string& message);

// For a process that has initialized MPI to go on to its work (MpiContext, right after
// MPI_Init_thread): brings `status` (0, or what failed in MPI's own set-up, with its `message`) to
// the verdict.  Returns 0 when every rank can go on; otherwise the lowest failing rank's status,
// after that rank's line is out and MPI is finalized: the caller exits with it, printing nothing.
int join_start_verdict(int status = 0, const std::string& message = "");

}  // namespace sluice
