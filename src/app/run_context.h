#pragma once
// Everything one rank of `sluice run` holds, built step by step so that each step can be agreed
// among ranks (cmd_run.cpp) before the next starts.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "app/folder_lock.h"
#include "app/job.h"
#include "app/job_plan.h"
#include "app/outdir.h"
#include "cluster/mpi_context.h"
#include "cluster/weights.h"
#include "cluster/work.h"
#include "core/device.h"
#include "core/thread.h"
#include "engine/engine.h"
#include "export/live_export.h"
#include "image/image.h"
#include "io/rank_file.h"
#include "io/source.h"
#include "model/graph.h"
#include "pipeline/pipeline.h"
#include "report/attempts.h"
#include "report/report.h"
#include "report/series.h"

namespace sluice {

class RunContext {
 public:
  RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi);
  ~RunContext();

  // Set-up, in this order (cmd_run.cpp says how each step is agreed among the ranks).
  void open_source();   // the input (io/source.h open_input); every rank sees the same samples
  void choose_device(); // backend and GPU of this rank
  void load_model();    // rank 0: load, prepare for the job's batch and outputs, check the batch axis
  void share_model();   // collective: the structure over MPI, the weights over NCCL (or MPI)
  std::string plan_on_root();  // rank 0: lock the output folder, plan the attempt; the plan serialized
  void set_plan(const std::string& serialized);
  void plan_resume();   // collective, --resume: recover and read the rank files, compute what is pending
  bool already_complete() const;
  void export_complete_run();  // rank 0, --export of a complete run: what is not exported yet
  int64_t computed_samples() const;  // this rank's pipeline: samples computed so far (committed or not)  // collective, after plan_resume: --resume of a run that is finished
  void build();         // device, engine, rank file, pipeline (no collective)
  void abandon();       // collective, after build() failed somewhere: undo what set-up did to the folder
  void start_work();    // collective: the work distributor
  // The job.
  void run();           // the pipeline until this rank has no more work
  bool stop(int signal = 0);  // from the signal thread; false when already stopping
  // A failure that ends the job (any rank): left in the folder for the next attempt's record, and
  // the attempt marked failed in attempts.json at once (report/attempts.h).  drain() and report()
  // record their own failures.
  void note_failure(const std::string& message) const;
  // Told to stop ("by SIGTERM", "by rank 3"): left in the folder at once, so that the next attempt
  // can tell this rank from ranks that went silent if this attempt never gets to write its end.
  void note_stopping(const std::string& how) const;
  void note_stopping(int signal) const;
  bool drain();         // close the rank file; agree whether the job is complete
  void report();        // gather the report; rank 0 writes outputs.h5 and report.json
  // --dry-run, after load_model() and share_model(): the resolved job (with where each value came
  // from: key -> "job file" / "command line"), the input, the model and what the run would write.
  std::string explain(const std::vector<std::pair<std::string, std::string>>& origins) const;

  WorkDistributor& work() { return *work_; }
  const RunPlan& plan_result() const { return plan_; }
  const Chunking& chunking() const { return chunking_; }

 private:
  int mapped_gpu() const;   // --gpu-map's ordinal for this node-local rank (default: the node-local rank)
  int choose_gpu() const;
  void save_job() const;  // rank 0: OUTPUT/job.toml
  void share_buckets();   // share_model's part for --max-tokens-per-batch (collective)
  void build_engines(const EngineOptions& eo);  // build(): the engine, or one per length bucket
  LiveExportOptions live_export_options() const;  // --export
  void watch_set_aside();  // rank 0: delete the earlier run once this one committed a chunk
  bool drain_now();        // drain() and report(), whose failures note_failure() records
  void report_now();

  JobConfig job_;
  JobPlan job_plan_;   // the job as each layer takes it
  std::string job_toml_;
  std::optional<PreprocessSpec> preprocess_;  // image inputs: how they become the model input
  const MpiContext& mpi_;
  double t_setup_ = 0;
  SetupParts setup_parts_;   // t_setup_, part by part
  double t_model_load_ = 0;  // rank 0: reading and parsing the model file
  std::string started_;

  std::unique_ptr<FolderLock> lock_;  // rank 0: held for the job's life
  std::unique_ptr<Source> source_;
  std::string input_fingerprint_;
  Graph graph_;
  std::string model_sha256_;
  std::vector<DatasetSpec> specs_;
  Chunking chunking_;
  RunPlan plan_;
  std::string backend_;
  int gpu_ = -1;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Engine> engine_;   // cut by length: the first bucket's (bucket_engines_[0])
  // --max-tokens-per-batch: the model per length bucket (structure and the constants that differ
  // from graph_'s) and its engine, made at start-up for every bucket.
  std::vector<BucketGraph> buckets_;
  std::vector<std::unique_ptr<Engine>> bucket_engines_;
  std::string buckets_text_;         // "16x64 32x32 ..." (length x cap), for the log and the report
  std::unique_ptr<RankFile> file_;
  bool file_created_ = false;  // this attempt created the rank file (not a resume appending to it)
  std::unique_ptr<WorkDistributor> work_;
  std::unique_ptr<BatchInput> input_;  // image inputs (null: the pipeline reads tensors itself)
  std::unique_ptr<Pipeline> pipeline_;
  PipelineStats stats_;
  WeightBroadcast weights_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> stop_signal_{0};
  std::vector<std::string> hosts_;          // rank 0: every rank's host, in rank order
  std::vector<AttemptRecord> attempts_;     // rank 0
  std::unique_ptr<SeriesRecorder> series_;
  double pipeline_start_unix_ = 0;
  bool complete_ = false;
  bool any_stopped_ = false;
  std::mutex aside_mutex_;
  std::condition_variable aside_cv_;
  bool aside_done_ = false;
  WorkerThread aside_thread_;
  WorkerThread warm_up_;     // cuda: the context and libraries, while the model loads (choose_device)
};

}  // namespace sluice
