#pragma once
// The run report (OUTDIR/report.json and the table printed at the end of `sluice run`).
//
// Definitions (also in docs/report.md):
//   rank wall           pipeline start (after a job-wide barrier) to the rank's last commit
//   rank images/s       samples / wall
//   rank steady img/s   samples after the first batch / (wall - time to first batch): warm-up apart
//   busy fraction       a stage's busy time / wall (device stages timed with events; encode is the
//                       writer threads' compression, summed over threads)
//   stall input/output  time the driver waited for a filled in-slot / for a free out-slot
//   job makespan        the longest rank wall
//   job throughput      samples of this attempt / makespan
//   imbalance           max rank wall / mean rank wall (1.0 = perfect)
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/stats.h"
#include "report/attempts.h"

namespace sluice {

// Where a rank's set-up went, part by part (seconds).  The parts add up to at most setup_s; what is
// left is other_s().  The first batch, which follows set-up, is PipelineStats::first_batch_s.
struct SetupParts {
  double input_s = 0;          // opening the input: listing the files, their fingerprint
  double model_load_s = 0;     // reading and preparing the model (rank 0; the others receive it)
  double share_s = 0;          // the model's structure and weights to the other ranks
  double engine_build_s = 0;   // the engine's construction, autotune and capture apart
  double autotune_s = 0;       // choosing convolution algorithms (measured, or read from the cache)
  double capture_s = 0;        // each io set's first pass and its CUDA graph capture
  int algos_measured = 0, algos_cached = 0;
  std::string autotune;        // the --autotune mode the engine ran (auto resolved: full, quick, off); "" on the CPU
  // --max-tokens-per-batch: the engines made (one per length bucket; their build, autotune and
  // capture are summed above) and rank 0's preparing the model per bucket (part of model_load_s).
  int engines = 1;
  double buckets_s = 0;
};

// A text run's tokens per length bucket (--max-tokens-per-batch): the bucket's length, its cap
// (rows a piece may have), the pieces run and the rows they held.
struct BucketReport {
  int64_t length = 0, cap = 0, pieces = 0, rows = 0;
};

struct RankReport {
  int rank = 0;
  std::string host, device, engine;
  double setup_s = 0;   // model load, engine build and autotuning, before the pipeline starts
  SetupParts setup;
  int reader_threads = 1, writer_threads = 1;
  double start_unix = 0;        // when the pipeline started (unix seconds): places the series in time
  int local_rank = 0, local_size = 1;   // among the ranks of its node (host)
  int gpu = -1;                 // the GPU it drives (CPU backend: the one --gpu-map gives its node-local rank)
  double clock_offset_s = 0;    // its node's clock minus rank 0's, taken out of every time it wrote
  PipelineStats stats;
  nlohmann::json series;        // SeriesRecorder::to_json(), or null
  // Text inputs: the tokens the batches held (attention mask ones) and those computed (padding
  // included); cut by length, each bucket's use.  Zeros for other inputs.
  int64_t tokens_real = 0, tokens_computed = 0;
  std::vector<BucketReport> buckets;

  // Set-up not in a named part: the image input, the rank file, the pipeline's slots.
  double setup_other_s() const;
  double images_per_s() const { return stats.wall_s > 0 ? static_cast<double>(stats.samples) / stats.wall_s : 0; }
  // What limited this rank, in words: "compute-bound: compute 98 % busy", "input-bound: read 97 %
  // busy (2 reader threads)", ... (the stage with the highest busy fraction per thread).
  std::string limit() const;
  double steady_images_per_s() const;
  nlohmann::json to_json() const;
  static RankReport from_json(const nlohmann::json& j);
};

struct JobReport {
  std::string name, version, commit, backend, precision, model, model_sha256, input, output_dir;
  std::vector<std::string> outputs;
  int world_size = 1, nodes = 1, attempt = 0;
  int64_t total_samples = 0;      // N
  int64_t pending_samples = 0;    // samples this attempt had to do (N minus what earlier attempts committed)
  int64_t batch_size = 0, chunk_samples = 0;
  bool complete = false;          // every sample of [0, N) committed
  bool stopped = false;           // ended early by a signal (resumable)
  std::string started, finished;  // ISO-8601
  std::string weights_transport;  // how rank 0's weights reached the other ranks: nccl, mpi, or none
  double weights_mb = 0, weights_s = 0;
  double model_load_s = 0;        // rank 0 reading and parsing the model file (what each rank would pay without the broadcast)
  std::string batch_note;         // the model ran as sub-batches: why, the cost, the export that avoids it (Graph::batch_note)
  int64_t max_tokens_per_batch = 0;   // text batches cut by length (0: not)
  std::string job_text;           // the resolved job (TOML), as echoed at the start
  std::vector<RankReport> ranks;
  std::vector<AttemptRecord> attempts;   // every attempt of the job so far, this one last

  int64_t samples() const;
  int64_t bad_samples() const;               // bad image files this attempt met, every rank
  std::vector<std::string> bad_files() const;  // the first of them, "key: reason"
  double makespan_s() const;
  double throughput() const;      // samples / makespan
  double imbalance() const;       // max wall / mean wall
  const RankReport* slowest() const;  // the rank with the longest wall time
  nlohmann::json to_json() const;
};

// The table printed at the end of a run (stdout).
std::string format_report_table(const JobReport& r);
// Its "set-up:" line: the parts of the longest set-up among the ranks ("" without ranks), and a
// "slow:" line after it when the model ran as sub-batches (batch_note).
std::string format_setup_line(const JobReport& r);
// Text runs: the "tokens:" line (real and computed tokens, tokens/s) and, cut by length, the
// "buckets:" line (length x cap: pieces, rows, every rank summed); "" for other runs.
std::string format_tokens_line(const JobReport& r);
// `sluice run --resume --output DIR`, the command that finishes the run of `r`.
std::string resume_command(const JobReport& r);
void write_report_json(const JobReport& r, const std::string& path);

}  // namespace sluice
