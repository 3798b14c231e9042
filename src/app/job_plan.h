#pragma once
// The job plan: what a job (app/job.h) asks of each layer, translated from the job's options in
// one place: the input's options, how the model is prepared (preprocessing, output heads, a static
// batch), the engine's and the pipeline's options, the stored datasets and the host-memory budget
// of the slots.  `sluice run` (app/run_context.cpp) and `sluice profile` build the same plan from
// the same options, so a job is profiled as it runs; `sluice forward` shares the backend choice.
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/job.h"
#include "core/error.h"
#include "engine/engine.h"
#include "image/image_input.h"
#include "io/rank_file.h"
#include "io/source.h"
#include "model/graph.h"
#include "model/prepare.h"
#include "pipeline/pipeline.h"

namespace sluice {

struct JobPlan {
  std::string model;              // the model file
  int64_t batch_size = 1;
  InputOptions input;
  // How rank 0 prepares the model.  Its sample shape and dtype are the job's (synthetic input) until
  // set_model_input() gives it the input's.
  PrepareOptions prepare;
  EngineOptions engine;           // the CUDA device and a node's share of the CPU cores are the rank's
  PipelineOptions pipeline;       // with this rank's test-only faults
  ImageJobOptions images;
  ImageInputOptions image_input;
  NonFinite on_nan = NonFinite::Warn;
  int deflate = 0;                // --compression
  // Text inputs (app/text_model.h resolved them from the model folder): the tokens a passage may
  // have (0: the model's own), the tokenizer, the prompt and the pad id.
  int64_t max_length = 0;
  std::string tokenizer, prompt;
  int64_t max_tokens = 0;         // --max-tokens-per-batch (0: off)

  // The model's input as `source` feeds it: a tensor input's own sample shape and dtype; for image
  // files uint8 [3, H, W] after --resize/--center-crop/--letterbox, which are resolved against the
  // model's declared input `model_input`.  UsageError for image options on a tensor input.
  void set_model_input(const Source& source, const Shape& model_input);
  // What an image input's decoder produces, from the prepared graph's input [B, 3, H, W] (the same
  // on every rank).
  PreprocessSpec image_spec(const Graph& prepared) const;
  // One batch of `source`'s samples must stay addressable (UsageError naming the options).
  void check_batch_bytes(const Source& source) const;
  // One dataset per output of the prepared graph, the batch on axis 0 (InputError otherwise).
  std::vector<DatasetSpec> dataset_specs(const Graph& prepared) const;
  // The slots are pinned host memory: more than 80 % of the node's memory over its `local_ranks`
  // ranks ends in the OOM killer rather than an error, so it is refused here (Error, exit 1).
  void check_host_slots(std::size_t in_slot_bytes, std::size_t out_row_bytes, int local_ranks) const;
  // The slots in words, for an allocation failure's message.
  std::string slots_text(std::size_t in_slot_bytes, std::size_t out_row_bytes) const;
};

// The heads behind the model's first output (or --model-output), one per --outputs name; each
// stores the datasets head_datasets (model/prepare.h) names.
std::vector<OutputSpec> output_specs(const JobConfig& job);

// The plan of `job` for rank `rank` (which takes part in the test-only faults).
JobPlan plan_job(const JobConfig& job, int rank = 0);

// --autotune auto: timing the convolutions on the whole batch (full) costs a DeepLabV3-ResNet50 at
// batch 64 about 8 s on an H200, some 170 of its batches, and gains at most a few percent a batch
// (cuDNN's first choice ran as fast as the full search's on that model); it pays off on long runs.
// Full when each rank has at least kAutotuneFullBatches batches to run, else off.  Other modes as named.
constexpr int64_t kAutotuneFullBatches = 2000;
Autotune autotune_for_job(const std::string& mode, int64_t samples, int ranks, int64_t batch_size);
// The cuBLASLt products' level for the convolutions' `convolutions`: as the convolutions', but quick
// where auto turned the convolutions off (timing a product's candidates costs milliseconds; their
// first choice ran CLIP ViT-B/16 3 % and ViT-B/16 4 % slower than full's on the H200, 2026-12-02).
Autotune product_autotune_for_job(const std::string& mode, Autotune convolutions);

// The backend for --device auto | cpu | cuda: InputError when cuda is asked for and absent.
std::string choose_backend(const std::string& device);

// Rank 0's model step: reads the model file, sets the plan's model input for `source`
// (set_model_input), prepares the model as the plan says, and checks the batch axis and that every
// output has values per sample.  A batch too large to allocate is a resource failure (exit 1),
// not a bad model.
//
// With --max-tokens-per-batch it also prepares the model once per length bucket (text/text_input.h
// TokenBuckets): at the bucket's length and cap as batch.  Those graphs hold only the constants
// that differ from the main graph's (shape values); the weights, the same tensors, stay in the
// main graph alone and are lent to each bucket's engine while it is made (bucket_engine_graph).
struct BucketGraph {
  int64_t length = 0, cap = 0;
  Graph graph;                        // without the constants named in `shared`
  std::vector<std::string> shared;    // constants the main graph holds, byte for byte
};
struct PreparedModel {
  Graph graph;
  std::string sha256;   // of the model file
  double load_s = 0;    // reading and parsing the file
  std::vector<BucketGraph> buckets;   // --max-tokens-per-batch, by length
  double buckets_s = 0;               // preparing them
};

// Lends `main`'s shared constants to `bucket` for as long as it lives (moved, not copied: making an
// engine copies or uploads what it needs), and takes them back.
class LentConstants {
 public:
  LentConstants(Graph& main, BucketGraph& bucket);
  ~LentConstants();
  LentConstants(const LentConstants&) = delete;
  LentConstants& operator=(const LentConstants&) = delete;
 private:
  Graph& main_;
  BucketGraph& bucket_;
};
PreparedModel load_prepared_model(JobPlan& plan, const Source& source);

// "12 MB", "3.5e+12 TB": sizes in messages, whatever their magnitude.
std::string mb(double bytes);

// Runs an allocating step; a failure says what asked for how much (`what`: the options and sizes
// behind it) instead of a bare std::bad_alloc.  Exit status 1: a resource, not a bad input.
template <typename F>
void allocating(const std::string& what, F&& step) {
  try {
    step();
  } catch (const std::bad_alloc&) {
    throw Error(str("out of memory allocating ", what));
  } catch (const std::length_error&) {
    throw Error(str("too large to allocate: ", what));
  }
}

}  // namespace sluice
