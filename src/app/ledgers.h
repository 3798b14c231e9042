#pragma once
// The ledgers of a run folder, read by every rank in parallel: for --resume (recover, then compute
// the pending ranges) and at the end of a job (rank 0 maps the runs into outputs.h5).  Rank file i
// is handled by rank i mod world, so with one rank file per rank each rank reads and recovers its
// own, and rank 0 receives only summaries: header fields and merged runs, O(runs) per file.
#include <string>
#include <vector>

#include "app/job.h"
#include "app/outdir.h"
#include "cluster/mpi_context.h"
#include "io/rank_file.h"

namespace sluice {

// The job text's line with a text job's tokenizer file digest (app/cmd_run.cpp writes it as a TOML
// comment, `# tokenizer-sha256 = "..."`); a resume refuses another digest.
inline constexpr const char* kTokenizerDigestKey = "# tokenizer-sha256";

// Collective.  Every rank reads its share of `paths` (recovering each file first when `recover`:
// io/recover.cpp; a file moved aside as unreadable is left out); rank 0 returns every file's
// summary in `paths` order, whose `chunks` are merged runs (merged_runs), the others an empty list.
// A failure on any rank is thrown on every rank, with the failing rank's message and exit status.
std::vector<RankFileInfo> read_ledgers(const MpiContext& mpi, const std::vector<std::string>& paths, bool recover);

// Collective, for --resume (plan.resume_files not empty): recovers the files, checks that they
// belong to this job (model, N, batch size, stored outputs, input fingerprint, the settings that
// change the computation: JobIdentity) and fills plan.pending (the complement of the union of the
// ledgers' ranges), plan.committed_before and plan.attempt on every rank.
void plan_resume(const MpiContext& mpi, const JobConfig& job, const Chunking& chunking, const JobIdentity& id,
                 RunPlan& plan);

}  // namespace sluice
