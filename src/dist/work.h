#pragma once
// How the samples of a job are split among ranks.  The unit is a chunk: `chunk_samples` consecutive
// sample indices (whole batches), numbered from 0; chunk c covers [c * chunk_samples, ...).  Chunk
// boundaries depend only on N and the chunk size, never on the number of ranks, so a resume with a
// different world size redoes exactly the chunks no ledger holds, and every sample lands in the
// same batch position whatever the sharding (outputs stay bit-identical on the CPU backend).
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dist/mpi_context.h"

namespace sluice {

struct WorkItem {
  int64_t chunk_id = -1;
  int64_t first = 0;  // first sample index
  int64_t count = 0;  // samples
};

struct Chunking {
  int64_t total = 0;          // N
  int64_t chunk_samples = 1;  // samples per chunk (a multiple of the batch size)
  int64_t chunks() const { return (total + chunk_samples - 1) / chunk_samples; }
  WorkItem item(int64_t id) const;
};

// Static sharding: the pending chunks split into `world` contiguous runs, run r for rank r.
std::vector<int64_t> static_share(const std::vector<int64_t>& pending, int rank, int world);

class WorkDistributor {
 public:
  virtual ~WorkDistributor() = default;
  // The next chunk for this rank; nullopt when there is no more (or this rank was told to stop).
  // Called by one thread (the pipeline's dispatcher).
  virtual std::optional<WorkItem> next() = 0;
  // After the writer committed a chunk (any thread).
  virtual void committed(const WorkItem& item) = 0;
  // Stop handing out work to this rank (signal); rank 0 also stops serving the others.
  virtual void request_stop() = 0;
  // Called once per rank after its pipeline drained.  Returns true on every rank when the whole
  // job's pending work was committed (false: stopped early, the run is resumable).
  virtual bool finish() = 0;
  // Rank 0 only: samples committed in this attempt across all ranks, and how many were pending.
  virtual int64_t job_committed() const = 0;
  virtual int64_t job_pending() const = 0;
};

enum class Sharding { Static, Dynamic };

// `pending`: the chunk ids no ledger holds yet, identical on every rank (ascending).
// `throttle` is not part of distribution; see Pipeline.
std::unique_ptr<WorkDistributor> make_work_distributor(Sharding mode, const MpiContext& mpi,
                                                       const Chunking& chunking, std::vector<int64_t> pending);

}  // namespace sluice
