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
#include "report/report.h"

namespace sluice {

class RunContext {
 public:
  RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi);
  ~RunContext();

  void open_source();   // synthetic or HDF5 input
  void choose_device(); // backend and GPU of this rank
  void load_model();    // rank 0: load, prepare for the job's batch and outputs
  void share_model();   // collective: the structure over MPI, the weights over NCCL (or MPI)
  void plan();          // rank 0: output folder, resume plan; broadcast
  void build();         // device, engine, rank file, pipeline, work distributor
  void run();           // the pipeline until this rank has no more work
  void stop();          // from the signal thread
  bool drain();         // close the rank file; agree whether the job is complete
  void report();        // gather the report; rank 0 writes outputs.h5 and report.json

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
  bool complete_ = false;
  bool any_stopped_ = false;
};

}  // namespace sluice
