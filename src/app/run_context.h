#pragma once
// Everything one rank of `sluice run` holds, built step by step so that each step can be agreed
// among ranks (cmd_run.cpp) before the next starts.
#include <memory>
#include <string>

#include "app/job.h"
#include "app/outdir.h"
#include "dist/mpi_context.h"
#include "dist/weights.h"
#include "dist/work.h"
#include "engine/engine.h"
#include "io/rank_file.h"
#include "io/source.h"
#include "model/graph.h"
#include "pipeline/device.h"
#include "pipeline/pipeline.h"
#include "report/attempts.h"
#include "report/report.h"
#include "report/series.h"

namespace sluice {

class RunContext {
 public:
  RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi);
  ~RunContext();

  void open_source();   // the input (io/source.h open_input); every rank sees the same samples
  void choose_device(); // backend and GPU of this rank
  void load_model();    // rank 0: load, prepare for the job's batch and outputs
  void share_model();   // collective: the structure over MPI, the weights over NCCL (or MPI)
  void plan();          // rank 0: output folder, resume plan; broadcast
  void build();         // device, engine, rank file, pipeline, work distributor
  void run();           // the pipeline until this rank has no more work
  void stop(int signal = 0);  // from the signal thread
  // A failure that ends the job: left in the folder for the next attempt's record (any rank).
  void note_failure(const std::string& message) const;
  bool drain();         // close the rank file; agree whether the job is complete
  void report();        // gather the report; rank 0 writes outputs.h5 and report.json
  // --dry-run, after load_model() and share_model(): the resolved job (with where each value came
  // from: key -> "job file" / "command line"), the input, the model and what the run would write.
  std::string explain(const std::vector<std::pair<std::string, std::string>>& origins) const;

  WorkDistributor& work() { return *work_; }
  const RunPlan& plan_result() const { return plan_; }
  const Chunking& chunking() const { return chunking_; }

 private:
  int choose_gpu() const;
  void make_specs();

  JobConfig job_;
  std::string job_toml_;
  const MpiContext& mpi_;
  double t_setup_ = 0;
  double t_model_load_ = 0;  // rank 0: reading and parsing the model file
  std::string started_;

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
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<RankFile> file_;
  std::unique_ptr<WorkDistributor> work_;
  std::unique_ptr<BatchInput> input_;  // image inputs (null: the pipeline reads tensors itself)
  std::unique_ptr<Pipeline> pipeline_;
  PipelineStats stats_;
  WeightBroadcast weights_;
  bool stopped_ = false;
  int stop_signal_ = 0;
  std::vector<std::string> hosts_;          // rank 0: every rank's host, in rank order
  std::vector<AttemptRecord> attempts_;     // rank 0
  std::unique_ptr<SeriesRecorder> series_;
  double pipeline_start_unix_ = 0;
  bool complete_ = false;
  bool any_stopped_ = false;
};

}  // namespace sluice
