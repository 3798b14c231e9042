#pragma once
// Every attempt of a job on record.  A job may take several attempts (--resume, Slurm requeues,
// a kill -9 and a rerun); the report lists each one: when, where, how many samples it committed
// and why it ended.  Rank 0 keeps the list in OUTDIR/attempts.json, rewritten when an attempt
// starts (its entry says "running") and when it ends (a failing rank marks it "failed" itself:
// record_attempt_failure); an attempt that never got to write its end
// (kill -9, a lost node, MPI_Abort after a failure) is recognised by the next one as still
// "running", and becomes "killed", or "failed" with the message a failing rank left in
// OUTDIR/attempt-<n>-rank-<r>.failed before it aborted the job.  A rank that is told to stop (a
// signal, or a peer's stop message) leaves OUTDIR/attempt-<n>-rank-<r>.stopping at once: when a node
// is lost, the launcher ends the ranks of the other nodes with a signal, and the ranks that left no
// note at all are those that went silent; the record names them and their nodes.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

struct AttemptRecord {
  int attempt = 0;
  std::string started, finished;     // ISO-8601 UTC ("" while running)
  double started_unix = 0, finished_unix = 0;
  int world_size = 0, nodes = 0;
  std::vector<std::string> hosts;    // distinct, in rank order
  std::vector<int> rank_hosts;       // per rank, its host's index in `hosts`
  std::vector<std::string> silent_hosts;   // a killed or failed attempt: nodes none of whose ranks left a word
  std::vector<int> silent_ranks;           // ... and the ranks that left none (no failure or stop note)
  int64_t committed_before = 0;      // samples committed by earlier attempts when this one started
  int64_t samples = 0;               // samples this attempt committed
  std::string ended = "running";     // running | complete | stopped | failed | killed
  std::string message;               // stopped: the signal; failed: the error; killed: what is known
  nlohmann::json ranks;              // per rank {rank, host, start_unix, series (thinned)}, when it ended with a report

  nlohmann::json to_json() const;
  static AttemptRecord from_json(const nlohmann::json& j);
};

std::string attempts_path(const std::string& outdir);   // OUTDIR/attempts.json

// Rank 0, when an attempt starts: the earlier attempts (none unless `resume`), with a "running"
// one settled (killed or failed, its samples from the committed counts), plus `current`; written
// to attempts.json and returned.  Failure notes of settled attempts are folded in and removed.
// `last_commit_unix` (the ledgers' latest commit time, 0 when unknown) dates the end of an attempt
// that ended without a word.
std::vector<AttemptRecord> begin_attempt(const std::string& outdir, bool resume, const AttemptRecord& current,
                                         double last_commit_unix = 0);

// Rank 0, when an attempt ends: its entry (the last one) updated; written and returned.
std::vector<AttemptRecord> end_attempt(const std::string& outdir, std::vector<AttemptRecord> attempts,
                                       const std::string& ended, const std::string& message, int64_t samples);

// A rank's series thinned to at most `points` points (keeping the first and last), for the record
// of an attempt: what the throughput-over-time plot draws for earlier attempts.
nlohmann::json thin_series(const nlohmann::json& series, std::size_t points);

// Any rank, before it aborts the job on a failure: leaves its message for the next attempt's record.
// Never throws (the job is failing already).
void note_attempt_failure(const std::string& outdir, int attempt, int rank, const std::string& message);

// Any rank whose failure ends the attempt (it is about to abort the job, or to exit alone): its
// note (note_attempt_failure), and the attempt's entry in attempts.json marked "failed" with "rank
// r: message" and the time at once, so that an attempt no later one settles reads as failed, never
// as running.  The next attempt settles it again from every rank's note (the messages of ranks
// that failed at the same moment, its samples from the committed counts).  Never throws.
void record_attempt_failure(const std::string& outdir, int attempt, int rank, const std::string& message);

// Any rank, as soon as it is told to stop (`how`: "by SIGTERM", "by rank 3"): the note that tells a
// rank that heard the end from one that went silent.  Never throws.
void note_attempt_stopping(const std::string& outdir, int attempt, int rank, const std::string& how);

}  // namespace sluice
