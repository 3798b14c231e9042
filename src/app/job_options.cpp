#include "app/job_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace sluice {

void add_job_options(CLI::App& run, JobConfig& j) {
  run.set_config("--config", "", "Job file (TOML): every key is an option of this command; flags override it");
  run.allow_config_extras(CLI::config_extras_mode::error);

  run.add_option("--name", j.name, "Job name, shown in the report")->capture_default_str();
  run.add_option("--model", j.model, "ONNX model file")->capture_default_str();
  run.add_option("--input", j.input, "'synthetic' or an HDF5 file holding a dataset [N, ...]")->capture_default_str();
  run.add_option("--input-dataset", j.input_dataset, "Dataset in the HDF5 input file")->capture_default_str();
  run.add_option("--samples", j.samples, "Synthetic input: number of samples N")->capture_default_str();
  run.add_option("--sample-shape", j.sample_shape, "Synthetic input: shape of one sample, e.g. 3,512,512")
      ->delimiter(',')->capture_default_str();
  run.add_option("--input-dtype", j.input_dtype, "Synthetic input type: float32 | uint8")
      ->check(CLI::IsMember({"float32", "uint8"}))->capture_default_str();
  run.add_option("--batch-size", j.batch_size, "Samples per batch")->check(CLI::PositiveNumber)->capture_default_str();
  run.add_option("--output,-o", j.output, "Output folder (rank files, outputs.h5, report.json)")->capture_default_str();
  run.add_option("--outputs", j.outputs, "What to store: logits, argmax, softmax, topk (comma list)")
      ->delimiter(',')->check(CLI::IsMember({"logits", "argmax", "softmax", "topk"}))->capture_default_str();
  run.add_option("--output-dtype", j.output_dtype, "Type of stored logits/softmax: float32 | float16 | bfloat16")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}))->capture_default_str();
  run.add_option("--top-k", j.top_k, "k of the topk output")->check(CLI::PositiveNumber)->capture_default_str();
  run.add_option("--device", j.device, "auto (a GPU when there is one) | cpu | cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  run.add_option("--precision", j.precision, "fp32 | tf32 | fp16 | bf16 (GPU; the CPU computes fp32)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}))->capture_default_str();
  run.add_option("--prefetch", j.prefetch, "Input slots: batches read ahead")->check(CLI::Range(1, 64))->capture_default_str();
  run.add_option("--egress-buffers", j.egress_buffers, "Output slots: batches waiting to be written")
      ->check(CLI::Range(1, 64))->capture_default_str();
  run.add_option("--reader-threads", j.reader_threads, "Threads filling input slots")->check(CLI::Range(1, 64))->capture_default_str();
  run.add_option("--writer-threads", j.writer_threads, "Threads preparing output rows for the HDF5 writer")
      ->check(CLI::Range(1, 64))->capture_default_str();
  run.add_option("--sharding", j.sharding, "dynamic (rank 0 serves chunks on request) | static (contiguous ranges)")
      ->check(CLI::IsMember({"dynamic", "static"}))->capture_default_str();
  run.add_option("--chunk-batches", j.chunk_batches, "Batches per chunk: the unit of sharding, commit and resume")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  run.add_option("--seed", j.seed, "Synthetic input seed")->capture_default_str();
  run.add_flag("--resume,!--no-resume", j.resume, "Continue the run in the output folder: redo only uncommitted chunks");
  run.add_flag("--overwrite,!--no-overwrite", j.overwrite, "Replace the outputs of an earlier run in the output folder");
  run.add_option("--scale", j.scale, "Preprocessing on the device: y = (x * scale - mean[c]) / std[c]")->capture_default_str();
  run.add_option("--mean", j.mean, "Per-channel mean (comma list; empty: 0)")->delimiter(',');
  run.add_option("--std", j.stddev, "Per-channel standard deviation (comma list; empty: 1)")->delimiter(',');
  run.add_flag("--cuda-graphs,!--no-cuda-graphs", j.cuda_graphs, "Capture the forward pass as a CUDA graph")->capture_default_str();
  run.add_option("--algo-cache", j.algo_cache, "Folder of the cuDNN algorithm cache (default: ~/.cache/sluice)");
  run.add_option("--cpu-threads", j.cpu_threads, "CPU engine threads (0: all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  run.add_option("--gpu-map", j.gpu_map, "GPU of each node-local rank, comma list (default: node-local rank)");
  run.add_option("--progress-interval", j.progress_interval, "Seconds between progress lines when stderr is not a terminal")
      ->check(CLI::PositiveNumber)->capture_default_str();
  run.add_flag("--quiet,-q", j.quiet, "No echo, no progress line");
  // Test-only: slows the listed ranks down (a slow GPU) to exercise dynamic sharding.
  run.add_option("--throttle-ms", j.throttle_ms, "")->group("");
  run.add_option("--throttle-ranks", j.throttle_ranks, "")->delimiter(',')->group("");
}

void validate_job(const JobConfig& j) {
  if (j.model.empty()) throw UsageError("--model is required");
  if (j.output.empty()) throw UsageError("--output is required");
  if (j.outputs.empty()) throw UsageError("--outputs must name at least one of logits, argmax, softmax, topk");
  std::set<std::string> seen;
  for (const auto& o : j.outputs)
    if (!seen.insert(o).second) throw UsageError(str("--outputs names '", o, "' twice"));
  if (j.input == "synthetic") {
    if (j.samples <= 0) throw UsageError(str("--samples must be positive (got ", j.samples, ")"));
    if (j.sample_shape.empty()) throw UsageError("--sample-shape is required for synthetic input");
    for (int64_t d : j.sample_shape)
      if (d <= 0) throw UsageError("--sample-shape dimensions must be positive");
  }
  if (!j.mean.empty() && !j.stddev.empty() && j.mean.size() != j.stddev.size() && j.mean.size() != 1 && j.stddev.size() != 1)
    throw UsageError("--mean and --std must have the same number of values (or one)");
  for (float s : j.stddev)
    if (s == 0.f) throw UsageError("--std values must be non-zero");
  if (j.resume && j.overwrite) throw UsageError("--resume and --overwrite exclude each other");
}

std::string job_to_toml(const CLI::App& run) {
  std::string s = run.config_to_str(true, false);
  // Drop the test-only keys from the echo: they are not part of a job a user writes.
  std::string out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find('\n', pos);
    if (end == std::string::npos) end = s.size();
    std::string line = s.substr(pos, end - pos);
    if (line.rfind("throttle", 0) != 0 && line.rfind("config=", 0) != 0 && line.rfind("config =", 0) != 0)
      out += line + "\n";
    pos = end + 1;
  }
  return out;
}

}  // namespace sluice
