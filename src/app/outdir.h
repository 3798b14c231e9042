#pragma once
// The output folder of a run: its rank files, and what a new run or a resume must do with them.
#include <string>
#include <vector>

#include "app/job.h"
#include "dist/work.h"
#include "io/rank_file.h"

namespace sluice {

std::string rank_file_path(const std::string& outdir, int rank);   // OUTDIR/rank-00003.h5
std::vector<std::string> list_rank_files(const std::string& outdir);

// What this attempt has to do, decided by rank 0 and broadcast.
struct RunPlan {
  int attempt = 0;                 // 0: fresh run; n: the n-th resume
  std::vector<int64_t> pending;    // chunk ids no ledger holds, ascending
  int64_t committed_before = 0;    // samples committed by earlier attempts
  std::string serialize() const;
  static RunPlan deserialize(const std::string& s);
};

// Rank 0, before any work: creates the folder and checks it is writable; with existing rank files,
// refuses (no --resume/--overwrite), deletes them (--overwrite), or recovers them and computes the
// chunks still to do (--resume; the earlier run must be the same job: model, N, chunk size,
// outputs).  Throws InputError with one clear line.
RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking, const std::string& model_sha256,
                        const std::vector<DatasetSpec>& specs);

}  // namespace sluice
