#pragma once
// How the samples of a job are split among ranks (docs/protocol.md, "Sharding").  The unit is a
// range of sample indices cut on batch boundaries (core/ranges.h): each rank starts on its own
// contiguous share of the pending samples; with dynamic sharding a rank that runs dry asks rank 0,
// which takes the far half of the largest unfinished share and hands it over.  A rank commits every
// --chunk-batches batches; nothing else is sent per batch.  The state on every rank is O(ranks).
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/ranges.h"

namespace sluice {

// cluster/mpi_context.h: the distributor's MPI stays in work.cpp, so the pipeline and the report,
// which hold a WorkDistributor, need no MPI headers.
class MpiContext;

// A contiguous run of samples [first, first + count), starting on a batch boundary.
struct WorkItem {
  int64_t first = 0;
  int64_t count = 0;
};

struct Chunking {
  int64_t total = 0;          // N
  int64_t batch = 1;          // samples per batch: every cut is a multiple of it, counted from 0
  int64_t chunk_samples = 1;  // samples per commit (batch * --chunk-batches)
};

class WorkDistributor {
 public:
  virtual ~WorkDistributor() = default;
  // Collective (every rank, before next()): sets up the communication it needs.
  virtual void start() {}
  // The next run of samples for this rank (the MPI distributor hands out one batch at a time, so
  // that whatever this rank has not started yet can still be stolen); nullopt when there is no
  // more work for it, or this rank was told to stop.  Called by one thread (the dispatcher).
  virtual std::optional<WorkItem> next() = 0;
  // After the writer committed a run of samples (one ledger record), from the writer thread.
  virtual void committed(const WorkItem& range) = 0;
  // Stop handing out work to this rank (signal); rank 0 also stops serving the others.
  virtual void request_stop() = 0;
  // Called once per rank after its pipeline drained.  Returns true on every rank when the whole
  // job's pending work was committed (false: stopped early, the run is resumable).
  virtual bool finish() = 0;
  // Rank 0 only: samples committed in this attempt across all ranks, and how many were pending.
  virtual int64_t job_committed() const = 0;
  virtual int64_t job_pending() const = 0;
  // Rank 0 only, after finish(): the steals rank 0 arbitrated.
  virtual int64_t steals() const { return 0; }
};

enum class Sharding { Static, Dynamic };

// `pending`: the sample ranges no ledger holds yet, batch-aligned, sorted, identical on every rank.
std::unique_ptr<WorkDistributor> make_work_distributor(Sharding mode, const MpiContext& mpi,
                                                       const Chunking& chunking, std::vector<Range> pending);

}  // namespace sluice
