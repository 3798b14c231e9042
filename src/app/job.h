#pragma once
// The job: every option of `sluice run` (and `sluice profile`), with its default.  One list of the
// fields (visit_job in app/job_options.cpp) binds each to a flag of the same name and to the job
// file key (TOML, app/job_file.h) of that name, so every job key is also a flag and flags override
// the file.  app/job_plan.h translates the job into each layer's options.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct JobConfig {
  std::string config;                      // --config: the job file (TOML), if any
  std::string name = "job";                // --name: shown in the report
  std::string model = "jobs/models/quickstart.onnx";
  std::string input = "synthetic";         // synthetic, an HDF5 or .npy file, image folder/glob/list, tar shards
  std::string input_kind = "auto";         // auto (from the path) | synthetic | hdf5 | npy | folder | glob | list | tar | jsonl | csv | tsv | text
  std::string input_dataset = "/images";   // dataset in the HDF5 input file
  std::string input_keys;                  // HDF5: a string dataset [N] of sample keys ("" : the index)
  std::string text_field = "text";         // text inputs: the JSONL field or CSV/TSV column holding the passage
  std::string key_field;                   // text inputs: the field or column holding each key ("" : the record index)
  std::string image_field;                 // Parquet inputs: the column of images or arrays ("" : the table's one such column)
  int64_t max_record_bytes = 1 << 20;      // text inputs: a longer record is a bad sample, never read
  std::string tokenizer;                   // text inputs: tokenizer.json or a folder holding one ("" : the model folder's)
  int64_t max_length = 0;                  // text inputs: tokens per passage, special tokens included (0: from the model)
  std::vector<std::string> pooling;        // text embeddings: cls, mean, max, lasttoken, weightedmean, mean_sqrt_len_tokens
  std::string prompt;                      // text inputs: put in front of every passage
  std::string prompt_name;                 // text inputs: config_sentence_transformers.json's prompt of that name
  int64_t samples = 0;                     // the first N samples only (0: all; synthetic: 512)
  std::vector<int64_t> sample_shape = {3, 64, 64};  // synthetic: one sample's shape
  std::string input_dtype = "float32";     // float32 | uint8
  int64_t batch_size = 32;
  int64_t max_tokens_per_batch = 0;        // text inputs: cut each batch by length into pieces of at most T tokens (0: off)
  std::string output = "sluice-out";       // output folder
  bool output_given = false;               // --output (or the job file's output) was given, not defaulted
  std::string saved_job;                   // --resume read the job from this OUTPUT/job.toml ("" : it did not)
  std::string sink = "hdf5";               // hdf5 (rank files) | null (copy to the host, store nothing: benchmarks)
  std::vector<std::string> outputs = {"logits"};   // logits, argmax, softmax, topk, topk_probs, embedding, detections
  std::string output_dtype = "float32";    // logits/softmax/embedding: float32 | float16 | bfloat16
  int top_k = 5;                           // for the topk and topk_probs outputs
  std::string model_output;                // the graph output the heads read ("": the model's first)
  bool normalize = true;                   // embedding: L2-normalise each vector
  std::string detection_format = "auto";   // detections: detr | rtdetr | yolo | yolov5 | yolov10 | auto
  float score_threshold = 0.25f;           // detections: keep scores above it
  float iou_threshold = 0.45f;             // detections (yolo): NMS overlap limit
  int max_detections = 100;                // detections: K rows per sample
  std::string static_batch = "auto";       // a model with a fixed batch: auto | respecialize | sub-batch
  std::string device = "auto";             // auto | cpu | cuda
  std::string precision = "fp32";          // fp32 | tf32 | fp16 | bf16
  int prefetch = 4;                        // input slots (batches read ahead)
  int egress_buffers = 4;                  // output slots (batches waiting to be written)
  int reader_threads = 2;
  int writer_threads = 1;
  int compression = 0;                     // deflate level of the stored outputs, 0..9 (0: none)
  std::string export_format = "none";      // --export: none | masks | npy | classes (export/live_export.h)
  std::string export_dir;                  // "" : OUTPUT/export
  int export_threads = 0;                  // 0: all cores, shared among the node's ranks
  std::string sharding = "dynamic";        // dynamic | static
  int chunk_batches = 4;                   // batches per chunk (the unit of sharding and commit)
  uint64_t seed = 0;
  bool fsync = false;                      // fsync each commit (survives power loss, not only a kill)
  bool resume = false;
  bool overwrite = false;
  bool accept_changed_input = false;       // --resume over an input that changed since its rows were computed
  // Preprocessing on the device: y = (x * scale - mean[c]) / std[c].
  float scale = 1.0f;
  std::vector<float> mean;                 // empty: 0
  std::vector<float> stddev;               // --std; empty: 1
  // Image inputs (JPEG/PNG files): preprocessing into the model's uint8 [B, 3, H, W] input
  // (image/image.h has the exact semantics), and what an unreadable or undecodable file does.
  std::string resize;                      // "" | S (shorter side to S) | HxW (exact)
  std::string center_crop;                 // "" | S | HxW
  std::string interpolation = "bilinear";  // the resize filter: nearest | bilinear | bicubic
  std::string preprocess_from;             // a model folder's preprocessor_config.json (or timm's config.json) to read the above from
  bool letterbox = false;                  // keep the aspect, pad to the input size
  int resize_shortest = 0;                 // DETR's resize: the shorter side to N (0: off), padded bottom/right
  int max_size = 0;                        // with resize_shortest: the longest edge at most M (0: none)
  int size_multiple = 0;                   // with resize_shortest: sides rounded down to multiples (YOLOS: 16)
  int pad_value = 0;                       // letterbox padding, 0..255
  bool pad_mean = false;                   // pad with the colour the normalization makes 0 (HF processors)
  std::string on_bad_sample = "skip";      // skip (recorded, zeros fed) | fail (exit 3)
  bool cuda_graphs = true;
  std::string algo_cache;                  // cuDNN algorithm cache folder ("": $XDG_CACHE_HOME/sluice or ~/.cache/sluice)
  std::string autotune = "auto";           // how uncached cuDNN algorithms are chosen: auto | quick | full | off
  int cpu_threads = 0;                     // CPU engine threads (0: all cores, shared among a node's ranks)
  std::string gpu_map;                     // "" (node-local rank) or a comma list of GPU ordinals
  double progress_interval = 5.0;          // seconds between progress lines when not on a terminal
  double series_interval = 0.25;           // seconds between the first points of the report's time series (doubled as the run grows)
  std::string on_nan = "warn";             // float inputs holding NaN/Inf: warn (count, mark, compute) | fail
  bool quiet = false;
  bool dry_run = false;                    // --dry-run: explain the job, run nothing
  // Test only: extra delay per batch (a slow GPU) on the listed ranks; one delay for all of them,
  // or one per listed rank.
  std::vector<int> throttle_ms;
  std::vector<int> throttle_ranks;
  // Test only: the listed ranks fail at this batch (a runtime failure mid-run).
  int64_t fail_at_batch = -1;
  std::vector<int> fail_ranks;
};

}  // namespace sluice
