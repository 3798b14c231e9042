#include "app/job_options.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <type_traits>
#include <set>
#include <sstream>

#include "app/job_file.h"
#include "core/error.h"
#include "core/thread.h"

namespace sluice {

namespace {

CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        try {
          std::size_t used = 0;
          const double v = std::stod(s, &used);
          if (used != s.size()) return "'" + s + "' is not a number";
          if (v < lo) return str("must be at least ", lo, " (got ", s, ")");
        } catch (const std::exception&) {
          return "'" + s + "' is not a number";
        }
        return "";
      },
      str(">=", lo));
}

CLI::Validator one_of(std::initializer_list<const char*> names) {
  std::vector<std::string> v(names.begin(), names.end());
  return CLI::Validator(
      [v](std::string& s) -> std::string {
        for (const auto& n : v)
          if (s == n) return "";
        std::string all;
        for (const auto& n : v) all += (all.empty() ? "" : ", ") + n;
        return str("'", s, "' is not one of ", all);
      },
      "");
}

// The one list of job fields.  `v` is called as v(key, field, help, validator, flag?).
template <typename V>
void visit_job(JobConfig& j, V& v) {
  const CLI::Validator none;
  v("name", j.name, "Job name, shown in the report", none);
  v("model", j.model, "ONNX model file", none);
  v("input", j.input,
    "'synthetic', an HDF5 file (.h5) or .npy file [N, ...], a folder of images (recursive), a glob ('data/*/*.jpg', ** "
    "for any depth), a list of paths (.txt, .lst), or WebDataset tar shards ('shards/train-{000000..000099}.tar')",
    none);
  v("input-kind", j.input_kind, "What --input is, when its path does not show it: auto | synthetic | hdf5 | npy | folder "
    "| glob | list | tar | jsonl | csv | tsv | text (plain text, one passage a line: never detected, .txt is a list) "
    "| parquet",
    one_of({"auto", "synthetic", "hdf5", "npy", "folder", "glob", "list", "tar", "jsonl", "csv", "tsv", "text", "parquet"}));
  v("input-dataset", j.input_dataset, "Dataset in the HDF5 input file", none);
  v("input-keys", j.input_keys, "HDF5 input: a string dataset [N] holding each sample's key (default: its index)", none);
  v("text-field", j.text_field, "Text inputs: the JSONL field (a string) or CSV/TSV column holding each passage", none);
  v("key-field", j.key_field,
    "Text inputs: the JSONL field (a string or number) or CSV/TSV column holding each sample's key (default: the record's "
    "index)", none);
  v("image-field", j.image_field,
    "Parquet inputs: the column of images (binary, or Hugging Face's {bytes, path}) or arrays (fixed-size lists); "
    "default: the table's one such column", none);
  v("max-record-bytes", j.max_record_bytes,
    "Text inputs: a record (line) longer than this is a bad sample, never read (at most 1073741824)",
    CLI::Range(int64_t{1}, int64_t{1} << 30));
  v("tokenizer", j.tokenizer,
    "Text inputs: the tokenizer.json (or a folder holding one) that turns passages into the model's token ids "
    "(default: the model folder's)", none);
  v("max-length", j.max_length,
    "Text inputs: tokens a passage may have, special tokens included; longer ones are truncated, shorter ones padded "
    "(0: the model folder's sentence-transformers max_seq_length, else the model's own)", at_least(0));
  v("pooling", j.pooling,
    "Text embeddings: how the token vectors become one: mean (over the attention mask), cls (the first token), max, "
    "lasttoken, weightedmean, mean_sqrt_len_tokens; several are concatenated (default: the model folder's "
    "sentence-transformers Pooling module, else mean) (comma list)",
    one_of({"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"}));
  v("prompt", j.prompt, "Text inputs: put in front of every passage before tokenizing (e.g. \"query: \")", none);
  v("prompt-name", j.prompt_name,
    "Text inputs: the prompt of that name in the model folder's config_sentence_transformers.json (default: its "
    "default_prompt_name)", none);
  v("samples", j.samples, "Process the first N samples of the input only (0: all; synthetic input: N, default 512)",
    at_least(0));
  v("sample-shape", j.sample_shape, "Synthetic input: shape of one sample, e.g. 3,512,512", at_least(1));
  v("input-dtype", j.input_dtype, "Synthetic input type: float32 | uint8", one_of({"float32", "uint8"}));
  v("seed", j.seed, "Synthetic input seed", none);
  v("batch-size", j.batch_size, "Samples per batch", at_least(1));
  v("max-tokens-per-batch", j.max_tokens_per_batch,
    "Text inputs: sort each batch's passages by length and run them as pieces of at most T tokens, each padded only "
    "to its length bucket (multiples of 16 up to 128, of 32 up to 256, then of 64), rather than every passage to "
    "--max-length; the batch stays --batch-size passages, stored in input order (0: off; docs/text.md, \"Batches by "
    "length\")",
    at_least(0));
  v("output", j.output, "Output folder (rank files, outputs.h5, report.json)", none);
  v("sink", j.sink, "hdf5 (rank files) | null (outputs reach host memory and are dropped: a benchmark of the rest)",
    one_of({"hdf5", "null"}));
  v("outputs", j.outputs,
    "What to store: logits, argmax, softmax, topk (top-k logits), topk_probs (top-k softmax probabilities), embedding "
    "(the vector per sample), detections (boxes, scores, classes) (comma list)",
    one_of({"logits", "argmax", "softmax", "topk", "topk_probs", "embedding", "detections"}));
  v("output-dtype", j.output_dtype, "Type of stored logits/softmax/embedding: float32 | float16 | bfloat16",
    one_of({"float32", "float16", "bfloat16"}));
  v("top-k", j.top_k, "k of the topk and topk_probs outputs", at_least(1));
  v("model-output", j.model_output,
    "The model output the --outputs heads read (default: the model's first output; detections: DETR's class logits)",
    none);
  v("normalize", j.normalize, "embedding: L2-normalise each vector (--no-normalize stores it as the model gives it)", none);
  v("detection-format", j.detection_format,
    "detections: detr (class logits [B, Q, C+1] and boxes [B, Q, 4], softmax) | rtdetr (logits [B, Q, C], sigmoid, "
    "and boxes) | yolo ([B, 4+C, N], [B, N, 5+C] or final rows [B, N, 6]) | yolov5 ([B, N, 5+C], one class too) | "
    "yolov10 (final rows [B, N, 6]: x1, y1, x2, y2, score, class) | auto (detr or yolo, from the outputs' shapes)",
    one_of({"detr", "rtdetr", "yolo", "yolov5", "yolov10", "auto"}));
  v("score-threshold", j.score_threshold, "detections: keep those whose score exceeds it", CLI::Range(0.0, 0.999999));
  v("iou-threshold", j.iou_threshold, "detections (yolo): class-aware NMS drops a box overlapping a kept one by more IoU",
    CLI::Range(0.0, 1.0));
  v("max-detections", j.max_detections, "detections: rows stored per sample (K)", at_least(1));
  v("static-batch", j.static_batch,
    "A model whose batch is fixed (exported at batch 1): auto (re-specialize it to --batch-size when that is proven, "
    "else run sub-batches), respecialize (or fail), sub-batch", one_of({"auto", "respecialize", "sub-batch"}));
  v("device", j.device, "auto (a GPU when there is one) | cpu | cuda", one_of({"auto", "cpu", "cuda"}));
  v("precision", j.precision, "fp32 | tf32 | fp16 | bf16 (GPU; the CPU computes fp32)", one_of({"fp32", "tf32", "fp16", "bf16"}));
  v("prefetch", j.prefetch, "Input slots: batches read ahead", at_least(1));
  v("egress-buffers", j.egress_buffers, "Output slots: batches waiting to be written", at_least(1));
  v("reader-threads", j.reader_threads, "Threads filling input slots (at most 4 per core, or 8)", at_least(1));
  v("writer-threads", j.writer_threads,
    "Threads compressing output chunks in parallel for the HDF5 writer (with --compression; without it one "
    "thread writes and more have nothing to do; at most 4 per core, or 8)", at_least(1));
  v("export", j.export_format,
    "Write the results as files while the job runs, as `sluice export` names them: masks (a PNG per sample) | npy (a "
    ".npy per sample) | classes (classes.csv: lines as rows commit, the table when the job completes) | embeddings "
    "(embeddings.npy and embeddings.keys.txt) | detections (detections.json, detections.csv, images.json): those two "
    "kept as rows commit, the files when the job completes | none",
    one_of({"none", "masks", "npy", "classes", "embeddings", "detections"}));
  v("export-dir", j.export_dir, "The folder of --export's files (default: OUTPUT/export)", none);
  v("export-threads", j.export_threads,
    "Threads writing --export's files (0: all cores, shared among the node's ranks; at most 4 per core, or 8)",
    at_least(0));
  v("compression", j.compression, "Deflate level of the stored outputs, 0 (none) to 9", CLI::Range(0, 9));
  v("sharding", j.sharding, "dynamic (own range first, then steal from the slowest) | static (contiguous ranges)",
    one_of({"dynamic", "static"}));
  v("chunk-batches", j.chunk_batches, "Batches per commit (ledger record); a stop commits what is written", at_least(1));
  v("fsync", j.fsync, "fsync the rank file at each commit: committed samples survive a power loss too (slower)", none);
  v("resume", j.resume, "Continue the run in the output folder: redo only uncommitted samples", none);
  v("overwrite", j.overwrite, "Replace the outputs of an earlier run in the output folder", none);
  v("accept-changed-input", j.accept_changed_input,
    "With --resume: go on although the input changed since the folder's rows were computed (its size, "
    "modification time or sampled bytes differ); the rows committed before stay as they are",
    none);
  v("scale", j.scale,
    "Preprocessing on the device: y = (x * scale - mean[c]) / std[c], in float32 (finite values that keep y finite "
    "for x in 0..255)",
    none);
  v("mean", j.mean, "Per-channel mean (comma list; empty: 0)", none);
  v("std", j.stddev, "Per-channel standard deviation (comma list; empty: 1)", none);
  v("resize", j.resize, "Image inputs: S (the shorter side to S, aspect kept; with --center-crop) or HxW (exact)", none);
  v("center-crop", j.center_crop, "Image inputs: center crop S or HxW after --resize (the model's input size)", none);
  v("interpolation", j.interpolation,
    "Image inputs: the resize filter, antialiased when shrinking: bilinear (torchvision's), bicubic (PIL's, as "
    "Hugging Face's image processors), nearest",
    CLI::IsMember({"nearest", "bilinear", "bicubic"}));
  v("preprocess-from", j.preprocess_from,
    "Image inputs: a model folder (or its file) whose preprocessor_config.json (Hugging Face) or config.json "
    "(timm's pretrained_cfg) sets --resize, --center-crop, --interpolation, --scale, --mean and --std (DETR's and "
    "YOLOS's: --resize-shortest, --max-size, --size-multiple, --pad-mean); options given here or in the job file win",
    none);
  v("letterbox", j.letterbox, "Image inputs: fit the whole image into the model's input, keeping its aspect, padded", none);
  v("resize-shortest", j.resize_shortest,
    "Image inputs: DETR's resize: the shorter side to N unless the longer would pass --max-size, aspect kept, the "
    "image top left and padded bottom and right to the model's input (--max-size on both sides where the model's "
    "is dynamic); an image that comes out larger than the model's input is a bad sample (0: off)",
    CLI::Range(0, 65535));
  v("max-size", j.max_size, "Image inputs: with --resize-shortest, the longest edge at most M (0: none)", CLI::Range(0, 65535));
  v("size-multiple", j.size_multiple,
    "Image inputs: with --resize-shortest, both sides rounded down to a multiple of D, as YOLOS's processor (16) "
    "(0: none)",
    CLI::Range(0, 65535));
  v("pad-value", j.pad_value, "Image inputs: the padding of --letterbox and of crops larger than the image", CLI::Range(0, 255));
  v("pad-mean", j.pad_mean,
    "Image inputs: pad with the colour that --scale, --mean and --std turn into 0 (round(mean / scale) per channel) "
    "instead of --pad-value, as Hugging Face's processors pad after normalizing",
    none);
  v("on-bad-sample", j.on_bad_sample,
    "Image inputs: skip (record the file and its reason, feed zeros, go on) | fail (exit 3 naming it)",
    one_of({"skip", "fail"}));
  v("on-nan", j.on_nan, "Float samples holding NaN or Inf: warn (compute them, mark them in /sample_status, count "
    "them in the report) | fail (stop the job, naming the sample)", one_of({"warn", "fail"}));
  v("cuda-graphs", j.cuda_graphs, "Capture the forward pass once as a CUDA graph and replay it", none);
  v("algo-cache", j.algo_cache,
    "Folder of the cuDNN algorithm cache (default: $XDG_CACHE_HOME/sluice or ~/.cache/sluice; none: no cache)", none);
  v("autotune", j.autotune,
    "How the GPU chooses a convolution algorithm the cache lacks: auto (full when each rank runs at least 2000 "
    "batches, else off) | quick (time every algorithm on the first samples of the batch) | full (on the whole "
    "batch: several seconds per model) | off (cuDNN's first choice, nothing timed)",
    one_of({"auto", "quick", "full", "off"}));
  v("cpu-threads", j.cpu_threads,
    "CPU engine threads (0: all cores, shared among the node's ranks; at most 4 per core, or 8)", at_least(0));
  v("gpu-map", j.gpu_map, "GPU of each node-local rank, comma list (default: the node-local rank)", none);
  v("progress-interval", j.progress_interval, "Seconds between progress lines when stderr is not a terminal",
    at_least(0.1));
  v("series-interval", j.series_interval,
    "Seconds between the first points of each rank's time series in report.json; the interval doubles whenever "
    "the series reaches 600 points, so short runs get fine series and long ones bounded ones",
    at_least(0.01));
  v("quiet", j.quiet, "No job echo, no progress line", none);
  v("dry-run", j.dry_run,
    "Print the resolved job, what each setting does, the input, the model and what the run would write; run nothing",
    none);
  // Test only (hidden): slow the listed ranks down, as a slow GPU would be.
  v("throttle-ms", j.throttle_ms, "", at_least(0));
  v("throttle-ranks", j.throttle_ranks, "", none);
  v("fail-at-batch", j.fail_at_batch, "", none);
  v("fail-ranks", j.fail_ranks, "", none);
}

struct CliBinder {
  CLI::App& app;
  template <typename T>
  void operator()(const char* key, T& field, const char* help, const CLI::Validator& check) {
    CLI::Option* o = app.add_option(str("--", key), field, help);
    o->check(check);
    o->capture_default_str();
    if (!*help) o->group("");
  }
  template <typename T>
  void operator()(const char* key, std::vector<T>& field, const char* help, const CLI::Validator& check) {
    // One value per occurrence (commas inside it), so a later occurrence replaces an earlier one.
    CLI::Option* o = app.add_option(str("--", key), field, help)->delimiter(',')->allow_extra_args(false);
    o->check(check);
    if (!field.empty()) o->capture_default_str();
    if (!*help) o->group("");
  }
  void operator()(const char* key, bool& field, const char* help, const CLI::Validator&) {
    CLI::Option* o = app.add_flag(str("--", key, ",!--no-", key), field, help);
    o->option_text(field ? "(default: on)" : "(default: off)");
  }
};

}  // namespace

std::string clean_path(const std::string& p) {
  if (p.empty() || p == "synthetic" || p.find("://") != std::string::npos) return p;  // a URL (s3://) as given
  std::vector<std::string> parts;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (!part.empty() && part != ".") parts.push_back(part);
  std::string out = p[0] == '/' ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
  return out.empty() ? "." : out;
}

void clean_job_paths(JobConfig& job) {
  for (std::string* p : {&job.model, &job.input, &job.output, &job.algo_cache, &job.export_dir, &job.preprocess_from,
                        &job.tokenizer})
    *p = clean_path(*p);
}

std::string saved_job_path(const std::string& output_dir) { return output_dir + "/job.toml"; }

std::string absolute_path(const std::string& p) {
  if (p.empty() || p == "synthetic" || p.find("://") != std::string::npos) return p;
  char cwd[4096] = "";
  if (p[0] != '/' && !getcwd(cwd, sizeof cwd)) return p;
  // Lexically: "a/b/../c" -> "a/c", "./" dropped.
  std::vector<std::string> parts;
  std::stringstream ss(p[0] == '/' ? p : str(cwd, "/", p));
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == ".." && !parts.empty() && parts.back() != "..") parts.pop_back();
    else parts.push_back(part);
  }
  std::string out;
  for (const auto& q : parts) out += "/" + q;
  return out.empty() ? "/" : out;
}

namespace {

template <typename T>
std::string toml_value(const T& v) {
  std::ostringstream os;
  // Enough digits that reading the echo back gives the same float (--scale 1/255 included).
  if constexpr (std::is_floating_point_v<T>) os.precision(std::numeric_limits<T>::max_digits10);
  os << v;
  return os.str();
}
std::string toml_value(const std::string& v) {
  // A TOML basic string; the job-file reader undoes exactly these escapes.
  std::string out = "\"";
  for (char c : v) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04X", u);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
std::string toml_value(bool v) { return v ? "true" : "false"; }
template <typename T>
std::string toml_value(const std::vector<T>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_value(v[i]);
  return out + "]";
}

struct TomlWriter {
  std::ostringstream os;
  template <typename T>
  void operator()(const char* key, T& field, const char* help, const CLI::Validator&) {
    if (!*help) return;  // test-only keys are not part of the job a user writes
    os << key << " = " << toml_value(field) << "\n";
  }
  void operator()(const char* key, std::string& field, const char* help, const CLI::Validator&) {
    if (!*help) return;
    // Paths are echoed absolute, so the echo means the same job wherever it is saved.
    const bool path = is_path_key(key) && !(std::string(key) == "algo-cache" && field == "none");
    os << key << " = " << toml_value(path ? absolute_path(field) : field) << "\n";
  }
};

// What a job-file key holds, from its field's C++ type: a job file's values are typed, so
// `batch-size = "16"` is an error rather than a string CLI11 happens to convert.
struct FieldType {
  JobScalar::Kind kind = JobScalar::Kind::String;  // Integer also stands for "any integer type"
  bool list = false;
  int64_t min = INT64_MIN;                          // integers only
  uint64_t max = INT64_MAX;
};

template <typename T>
FieldType field_type_of() {
  FieldType t;
  if constexpr (std::is_same_v<T, std::string>) {
    t.kind = JobScalar::Kind::String;
  } else if constexpr (std::is_same_v<T, bool>) {
    t.kind = JobScalar::Kind::Bool;
  } else if constexpr (std::is_floating_point_v<T>) {
    t.kind = JobScalar::Kind::Float;
  } else {
    static_assert(std::is_integral_v<T>, "job fields are strings, booleans, numbers or lists of them");
    t.kind = JobScalar::Kind::Integer;
    t.min = static_cast<int64_t>(std::numeric_limits<T>::min());
    t.max = static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  return t;
}

struct TypeCollector {
  std::map<std::string, FieldType> types;
  template <typename T>
  void operator()(const char* key, T&, const char*, const CLI::Validator&) {
    types[key] = field_type_of<T>();
  }
  template <typename T>
  void operator()(const char* key, std::vector<T>&, const char*, const CLI::Validator&) {
    FieldType t = field_type_of<T>();
    t.list = true;
    types[key] = t;
  }
};

std::string type_text(const FieldType& t) {
  std::string one = t.kind == JobScalar::Kind::Integer ? (t.min >= 0 ? "a non-negative integer" : "an integer")
                                                        : job_kind_text(t.kind);
  if (t.list) return str(one, " or [a list of them]");
  return one;
}

// The CLI11 inputs of one job-file entry, after checking its values against the field's type.
std::vector<std::string> typed_inputs(const JobEntry& e, const FieldType& t, const std::string& path) {
  auto fail = [&](int line, int column, const std::string& msg) {
    throw UsageError(str("job file ", path, " line ", line, ", column ", column, ": ", e.key, " ", msg));
  };
  if (e.is_array && !t.list)
    fail(e.line, e.column, str("takes ", type_text(t), ", not a list"));
  std::vector<std::string> inputs;
  for (const JobScalar& v : e.values) {
    const bool number_for_float = t.kind == JobScalar::Kind::Float && v.kind == JobScalar::Kind::Integer;
    if (v.kind != t.kind && !number_for_float) {
      std::string hint;
      if (v.kind == JobScalar::Kind::String && t.kind != JobScalar::Kind::String) hint = " (write it without quotes)";
      if (v.kind != JobScalar::Kind::String && t.kind == JobScalar::Kind::String) hint = " (write it in quotes)";
      const std::string text = v.text.size() > 40 ? v.text.substr(0, 40) + "..." : v.text;
      const std::string given = v.kind == JobScalar::Kind::String ? str("the string \"", text, "\"") : text;
      fail(v.line, v.column, str("takes ", type_text(t), ", not ", given, hint));
    }
    if (t.kind == JobScalar::Kind::Integer) {
      // The reader guarantees decimal text from -2^63 to 2^64 - 1.
      const bool negative = v.text[0] == '-';
      const bool fits = negative ? std::stoll(v.text) >= t.min : std::stoull(v.text) <= t.max;
      if (!fits) fail(v.line, v.column, str("takes ", type_text(t), " from ", t.min, " to ", t.max, ", not ", v.text));
    }
    inputs.push_back(v.text);
  }
  return inputs;
}

}  // namespace

bool is_path_key(const std::string& key) {
  return key == "model" || key == "input" || key == "output" || key == "algo-cache" || key == "export-dir" ||
         key == "preprocess-from" || key == "tokenizer";
}

std::string job_file_path(const std::string& job_file, const std::string& key, const std::string& value) {
  if (!is_path_key(key) || value.empty() || value[0] == '/' || value == "synthetic" || value.find("://") != std::string::npos ||
      (key == "algo-cache" && value == "none"))
    return value;
  const std::size_t slash = job_file.rfind('/');
  if (slash == std::string::npos) return value;  // the job file is in the working directory
  std::string rel = value;
  while (rel.rfind("./", 0) == 0) rel = rel.substr(2);
  return job_file.substr(0, slash + 1) + rel;
}

void add_job_options(CLI::App& run, JobConfig& j) {
  run.add_option("--config", j.config, "Job file (TOML): every key is an option of this command; flags override it");
  CliBinder binder{run};
  visit_job(j, binder);
}

namespace {

// The job-file keys a user may write: the long names of run's options, --config aside.
std::vector<std::string> job_keys(const CLI::App& run) {
  std::vector<std::string> keys;
  for (const CLI::Option* opt : run.get_options())
    if (!opt->get_group().empty() && !opt->get_lnames().empty() && opt->get_lnames().front() != "config")
      keys.push_back(opt->get_lnames().front());
  return keys;
}

// `name` is the job file's path: path values in it are relative to its folder.
void apply_entries(CLI::App& run, const std::vector<JobEntry>& entries, const std::string& name,
                   const std::set<std::string>& skip = {}) {
  TypeCollector types;
  JobConfig scratch;  // visit_job binds references; the types are all it needs
  visit_job(scratch, types);
  for (const JobEntry& e : entries) {
    const std::string where = str("job file ", name, " line ", e.line, ", column ", e.column, ": ");
    CLI::Option* o = run.get_option_no_throw("--" + e.key);
    auto type = types.types.find(e.key);
    if (!o || e.key == "config" || type == types.types.end() || o->get_group().empty()) {
      const std::string near = nearest_word(e.key, job_keys(run));
      throw UsageError(str(where, "unknown key '", e.key, "'"),
                       near.empty() ? "keys are the long option names of sluice run (sluice run --help lists them)"
                                    : str("did you mean '", near, "'? (keys are the long option names of sluice run)"));
    }
    std::vector<std::string> inputs = typed_inputs(e, type->second, name);
    if (o->count() > 0 || skip.count(e.key)) continue;  // the command line wins
    if (inputs.empty()) continue;  // `key = []`: the default (an empty list for mean and std)
    if (inputs.size() == 1) inputs[0] = job_file_path(name, e.key, inputs[0]);
    try {
      o->add_result(inputs);
      o->run_callback();
    } catch (const CLI::Error& err) {
      throw UsageError(str(where, err.what()));
    }
  }
}

}  // namespace

void apply_job_file(CLI::App& run, const JobConfig& job) {
  if (job.config.empty()) return;
  apply_entries(run, read_job_file(job.config), job.config);
}

void apply_job_text(CLI::App& run, const std::string& text, const std::string& name) {
  apply_entries(run, parse_job_text(text, name), name);
}

bool apply_saved_job(CLI::App& run, const std::string& output_dir) {
  const std::string path = saved_job_path(output_dir);
  if (access(path.c_str(), F_OK) != 0) return false;
  apply_entries(run, read_job_file(path), path, {"resume", "overwrite", "dry-run", "accept-changed-input"});
  return true;
}

void check_normalization(float scale, const std::vector<float>& mean, const std::vector<float>& stddev) {
  // Preprocessing computes in float32: a value that is not a finite float32 (nan, inf, 1e39), a std
  // below the smallest normal float32 (1e-45: its inverse is inf) or values that overflow float32
  // for an input of 0..255 turn every sample into NaN or Inf; --on-nan cannot catch that, the input
  // itself is finite.
  const char* allowed = "--scale, --mean and --std take finite numbers; |--std| at least 1.2e-38; "
                        "(255 * |scale| + |mean|) / |std| at most 3.4e+38 (float32)";
  auto finite = [&](const char* option, float v) {
    if (!std::isfinite(v))
      throw UsageError(str(option, " ", v, " is not a finite float32 number (values beyond 3.4e+38 are inf)"), allowed);
  };
  finite("--scale", scale);
  for (float m : mean) finite("--mean", m);
  for (float s : stddev) {
    finite("--std", s);
    if (s != 0.f && std::fabs(s) < std::numeric_limits<float>::min())
      throw UsageError(str("--std ", s, " is below the smallest normal float32 (1.2e-38): dividing by it gives inf"),
                       allowed);
  }
  double worst_mean = 0, least_std = 1;
  for (float m : mean) worst_mean = std::max(worst_mean, std::fabs(static_cast<double>(m)));
  if (!stddev.empty()) {
    least_std = std::fabs(static_cast<double>(stddev[0]));
    for (float s : stddev) least_std = std::min(least_std, std::fabs(static_cast<double>(s)));
  }
  if (least_std == 0) return;  // refused above with its own message
  const double worst = (255.0 * std::fabs(static_cast<double>(scale)) + worst_mean) / least_std;
  if (worst > std::numeric_limits<float>::max())
    throw UsageError(str("--scale ", scale, ", --mean and --std give values up to ", worst,
                         " for inputs of 0..255: more than float32 holds (3.4e+38), every sample would be inf"),
                     allowed);
}

void validate_job(const JobConfig& j) {
  if (j.model.empty()) throw UsageError("--model is required");
  if (j.output.empty()) throw UsageError("--output is required");
  if (j.outputs.empty()) throw UsageError("--outputs must name at least one of logits, argmax, softmax, topk, topk_probs, embedding, detections");
  std::set<std::string> seen;
  for (const auto& o : j.outputs)
    if (!seen.insert(o).second) throw UsageError(str("--outputs names '", o, "' twice"));
  if (j.input == "synthetic" && j.sample_shape.empty()) throw UsageError("--sample-shape is required for synthetic input");
  if (!j.mean.empty() && !j.stddev.empty() && j.mean.size() != j.stddev.size() && j.mean.size() != 1 && j.stddev.size() != 1)
    throw UsageError("--mean and --std must have the same number of values (or one)",
                     "give one value per input channel, or one for all: --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225");
  for (float s : j.stddev)
    if (s == 0.f) throw UsageError("--std values must be non-zero", "--std divides: leave it out (1) to only subtract --mean");
  check_normalization(j.scale, j.mean, j.stddev);
  check_thread_count("--cpu-threads", j.cpu_threads);
  check_thread_count("--reader-threads", j.reader_threads);
  check_thread_count("--writer-threads", j.writer_threads);
  check_thread_count("--export-threads", j.export_threads);
  if (j.export_format != "none" && j.sink != "hdf5")
    throw UsageError(str("--export ", j.export_format, " exports the stored rows; --sink ", j.sink, " stores none"),
                     "drop --export, or store the outputs (--sink hdf5)");
  if (j.resume && j.overwrite) throw UsageError("--resume and --overwrite exclude each other",
                                                   "--resume finishes the run in the folder, --overwrite replaces it: keep one");
  check_image_options(image_options(j));
}

ImageJobOptions image_options(const JobConfig& j) {
  ImageJobOptions o;
  o.resize = j.resize;
  o.center_crop = j.center_crop;
  o.interpolation = j.interpolation;
  o.letterbox = j.letterbox;
  o.resize_shortest = j.resize_shortest;
  o.max_size = j.max_size;
  o.size_multiple = j.size_multiple;
  o.pad_value = j.pad_value;
  o.pad_mean = j.pad_mean;
  o.scale = j.scale;
  o.mean = j.mean;
  o.on_bad_sample = j.on_bad_sample;
  return o;
}

namespace {
struct FieldLister {
  std::vector<JobField> fields;
  template <typename T>
  void operator()(const char* key, T& field, const char* help, const CLI::Validator& check) {
    if (!*help) return;
    TomlWriter w;
    w(key, field, help, check);
    std::string line = w.os.str();
    const std::size_t eq = line.find(" = ");
    fields.push_back({key, line.substr(eq + 3, line.size() - eq - 4), help});
  }
};
}  // namespace

std::vector<JobField> job_fields(JobConfig job) {
  FieldLister l;
  visit_job(job, l);
  return l.fields;
}

std::string job_to_toml(JobConfig job) {
  TomlWriter w;
  visit_job(job, w);
  return w.os.str();
}

}  // namespace sluice
