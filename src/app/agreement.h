#pragma once
// One outcome on every rank (docs/protocol.md, "One outcome").  A job's ranks must never wait for
// each other across a failure, so every step of `sluice run` is one of three kinds:
//
//  - agreed():          a step every rank runs on its own (no collective inside).  Afterwards the
//                       ranks compare outcomes; if any failed, the lowest failing rank prints its
//                       message and every rank throws the same exit status.
//  - agreed_on_root():  a step rank 0 runs alone (the output folder plan).  Its outcome and its
//                       result travel in one broadcast, so the others never wait for a result that
//                       will not come.
//  - or_abort():        a step with collectives inside, or anything after set-up: a rank that fails
//                       prints its message and ends the whole job with MPI_Abort, because its peers
//                       may be waiting in a collective it will never join.
#include <functional>
#include <string>

#include "cluster/mpi_context.h"

namespace sluice {

void agreed(const MpiContext& mpi, const std::function<void()>& step);
std::string agreed_on_root(const MpiContext& mpi, const std::function<std::string()>& step);
// `on_failure` (optional) runs on the failing rank, with the message, before the job ends.
void or_abort(const MpiContext& mpi, const std::function<void()>& step,
              const std::function<void(const std::string&)>& on_failure = {});

// Prints "sluice: error: [rank r] message" (the rank only when there are several).
void print_rank_error(const MpiContext& mpi, const std::string& message);

}  // namespace sluice
