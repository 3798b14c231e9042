#pragma once
// The output folder of a run: its rank files, and what a new run or a resume must do with them
// (docs/protocol.md, "The output folder").
#include <string>
#include <vector>

#include "app/job.h"
#include "cluster/work.h"
#include "core/ranges.h"
#include "io/rank_file.h"

namespace sluice {

std::string rank_file_path(const std::string& outdir, int rank);   // OUTDIR/rank-00003.h5
std::vector<std::string> list_rank_files(const std::string& outdir);

// What this attempt has to do, decided by rank 0 and broadcast.  O(ranks) in size.
struct RunPlan {
  int attempt = 0;                 // 0: fresh run; n: the n-th resume
  std::vector<Range> pending;      // sample ranges no ledger holds: batch-aligned, ascending
  int64_t committed_before = 0;    // samples committed by earlier attempts
  std::string set_aside;           // --overwrite: where the earlier run waits for the first commit ("": none)
  double last_commit_unix = 0;     // --resume: the latest commit time in the ledgers (0: none recorded)
  // --sink null into a folder holding a run: its report.json is that run's and stays (this job's
  // report is printed only).
  bool keep_report = false;
  // --resume: the rank files of the earlier attempts; every rank recovers and reads its share of
  // them, and the pending ranges are what their ledgers do not hold (app/ledgers.h).
  std::vector<std::string> resume_files;
  std::string serialize() const;
  static RunPlan deserialize(const std::string& s);
};

// What the earlier run in the folder must share with this job for --resume to continue it.
struct JobIdentity {
  std::string job_toml;            // this job, as job_to_toml() writes it
  std::string model_sha256;
  std::string input_fingerprint;   // Source::fingerprint()
  std::vector<DatasetSpec> specs;  // what is stored
};

// Creates the folder if needed and checks that it is a writable folder (InputError otherwise).
void prepare_output_dir(const std::string& dir);

// Rank 0, before any work, with the folder's lock held (app/folder_lock.h):
//  - refuses a folder holding files Sluice did not write, unless --overwrite;
//  - refuses --resume --sink null over a run (it would store nothing of what the run lacks);
//  - with an earlier run's rank files: refuses (neither --resume nor --overwrite), sets the earlier
//    run aside (--overwrite; RunPlan::set_aside), or (--resume) lists them in resume_files for
//    plan_resume() (app/ledgers.h), where every rank recovers and checks its share.
// Throws InputError with one clear line.
RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking);

}  // namespace sluice
