#pragma once
// The job: every option of `sluice run`, with its default.  CLI11 binds each field to a flag of the
// same name (app/cli.cpp), and job files (TOML, app/job_file.h) set fields by the same names, so
// every job key is also a flag and flags override the file.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct JobConfig {
  std::string config;                      // --config: the job file (TOML), if any
  std::string name = "job";                // --name: shown in the report
  std::string model = "jobs/models/quickstart.onnx";
  std::string input = "synthetic";         // "synthetic" or an HDF5 file
  std::string input_dataset = "/images";   // dataset in the HDF5 input file
  int64_t samples = 512;                   // synthetic: N
  std::vector<int64_t> sample_shape = {3, 64, 64};  // synthetic: one sample's shape
  std::string input_dtype = "float32";     // float32 | uint8
  int64_t batch_size = 32;
  std::string output = "sluice-out";       // output folder
  std::string sink = "hdf5";               // hdf5 (rank files) | null (copy to the host, store nothing: benchmarks)
  std::vector<std::string> outputs = {"logits"};   // logits, argmax, softmax, topk
  std::string output_dtype = "float32";    // logits/softmax: float32 | float16 | bfloat16
  int top_k = 5;                           // for the topk output
  std::string device = "auto";             // auto | cpu | cuda
  std::string precision = "fp32";          // fp32 | tf32 | fp16 | bf16
  int prefetch = 4;                        // input slots (batches read ahead)
  int egress_buffers = 4;                  // output slots (batches waiting to be written)
  int reader_threads = 2;
  int writer_threads = 1;
  int compression = 0;                     // deflate level of the stored outputs, 0..9 (0: none)
  std::string sharding = "dynamic";        // dynamic | static
  int chunk_batches = 4;                   // batches per chunk (the unit of sharding and commit)
  uint64_t seed = 0;
  bool fsync = false;                      // fsync each commit (survives power loss, not only a kill)
  bool resume = false;
  bool overwrite = false;
  // Preprocessing on the device: y = (x * scale - mean[c]) / std[c].
  float scale = 1.0f;
  std::vector<float> mean;                 // empty: 0
  std::vector<float> stddev;               // --std; empty: 1
  bool cuda_graphs = true;
  std::string algo_cache;                  // cuDNN algorithm cache folder ("" = OUTPUT/.. default)
  int cpu_threads = 0;                     // CPU engine threads (0: all cores)
  std::string gpu_map;                     // "" (node-local rank) or a comma list of GPU ordinals
  double progress_interval = 5.0;          // seconds between progress lines when not on a terminal
  bool quiet = false;
  // Test only: extra delay per batch (a slow GPU) on the listed ranks; one delay for all of them,
  // or one per listed rank.
  std::vector<int> throttle_ms;
  std::vector<int> throttle_ranks;
};

}  // namespace sluice
