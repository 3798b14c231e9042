#pragma once
// The output folder of a run: its rank files, and what a new run or a resume must do with them.
#include <string>
#include <vector>

#include "app/job.h"
#include "core/ranges.h"
#include "dist/work.h"
#include "io/rank_file.h"

namespace sluice {

std::string rank_file_path(const std::string& outdir, int rank);   // OUTDIR/rank-00003.h5
std::vector<std::string> list_rank_files(const std::string& outdir);

// What this attempt has to do, decided by rank 0 and broadcast.  O(ranks) in size.
struct RunPlan {
  int attempt = 0;                 // 0: fresh run; n: the n-th resume
  std::vector<Range> pending;      // sample ranges no ledger holds: batch-aligned, ascending
  int64_t committed_before = 0;    // samples committed by earlier attempts
  // --resume: the rank files of the earlier attempts; every rank recovers and reads its share of
  // them, and the pending ranges are what their ledgers do not hold (app/resume_plan.h).
  std::vector<std::string> resume_files;
  std::string serialize() const;
  static RunPlan deserialize(const std::string& s);
};

// Rank 0, before any work: creates the folder and checks it is writable; with existing rank files,
// refuses (no --resume/--overwrite), deletes them (--overwrite), or (--resume) lists them in
// resume_files for plan_resume().  Throws InputError with one clear line.
RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking, const std::string& model_sha256,
                        const std::vector<DatasetSpec>& specs);

}  // namespace sluice
