#include "app/job_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "app/job_options.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/thread.h"
#include "core/timer.h"
#include "model/batch_axis.h"
#include "model/onnx_loader.h"
#include "pipeline/gpu_count.h"
#include "text/text_input.h"

namespace sluice {

namespace {

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return str(x, "/sluice");
  if (const char* h = std::getenv("HOME"); h && *h) return str(h, "/.cache/sluice");
  return "";
}

bool file_readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

std::vector<OutputSpec> output_specs(const JobConfig& job) {
  std::vector<OutputSpec> specs;
  const DType float_out = dtype_from_name(job.output_dtype);
  for (const auto& name : job.outputs) {
    OutputSpec s;
    s.name = name;
    if (name == "logits") {
      s.kind = OutputSpec::Kind::Logits;
      s.dtype = float_out;
    } else if (name == "argmax") {
      s.kind = OutputSpec::Kind::ArgMax;
      s.dtype = DType::Undefined;  // uint8 for <= 256 classes, else int32
    } else if (name == "softmax") {
      s.kind = OutputSpec::Kind::Softmax;
      s.dtype = float_out;
    } else if (name == "topk" || name == "topk_probs") {
      s.kind = name == "topk" ? OutputSpec::Kind::TopK : OutputSpec::Kind::TopKProbs;
      s.dtype = float_out;
      s.top_k = job.top_k;
    } else if (name == "embedding") {
      s.kind = OutputSpec::Kind::Embedding;
      s.dtype = float_out;
      s.normalize = job.normalize;
      s.pooling = job.pooling;  // a text model's (app/text_model.h fills it for text inputs)
    } else if (name == "detections") {
      s.kind = OutputSpec::Kind::Detections;
      s.dtype = DType::F32;
      s.detection.format = job.detection_format;
      s.detection.score_threshold = job.score_threshold;
      s.detection.iou_threshold = job.iou_threshold;
      s.detection.max_detections = job.max_detections;
    }
    specs.push_back(s);
  }
  return specs;
}

std::string mb(double bytes) {
  if (bytes < 1e12) return str(static_cast<int64_t>(bytes / 1e6 + 0.5), " MB");
  std::ostringstream os;
  os.precision(3);
  os << bytes / 1e12 << " TB";
  return os.str();
}

Autotune autotune_for_job(const std::string& mode, int64_t samples, int ranks, int64_t batch_size) {
  if (mode != "auto") return autotune_from_name(mode);
  const int64_t per_rank = (samples + std::max(ranks, 1) - 1) / std::max(ranks, 1);
  const int64_t batches = (per_rank + std::max<int64_t>(batch_size, 1) - 1) / std::max<int64_t>(batch_size, 1);
  return batches >= kAutotuneFullBatches ? Autotune::Full : Autotune::Off;
}

Autotune product_autotune_for_job(const std::string& mode, Autotune convolutions) {
  return mode == "auto" && convolutions == Autotune::Off ? Autotune::Quick : convolutions;
}

JobPlan plan_job(const JobConfig& job, int rank) {
  JobPlan p;
  p.model = job.model;
  p.batch_size = job.batch_size;

  p.input.path = job.input;
  p.input.kind = job.input_kind;
  p.input.dataset = job.input_dataset;
  p.input.keys = job.input_keys;
  p.input.text.field = job.text_field;
  p.input.text.key_field = job.key_field;
  p.input.image_field = job.image_field;
  p.input.text.max_record_bytes = static_cast<uint64_t>(job.max_record_bytes);
  p.input.samples = job.samples;
  p.input.sample_shape = job.sample_shape;
  p.input.dtype = dtype_from_name(job.input_dtype);
  p.input.seed = job.seed;

  p.prepare.batch_size = job.batch_size;
  p.prepare.sample_shape = job.sample_shape;
  p.prepare.input_dtype = p.input.dtype;
  p.prepare.normalize = job.scale != 1.0f || !job.mean.empty() || !job.stddev.empty();
  p.prepare.scale = job.scale;
  p.prepare.mean = job.mean;
  p.prepare.stddev = job.stddev;
  p.prepare.static_batch = static_batch_from_name(job.static_batch);
  p.prepare.outputs = output_specs(job);
  p.prepare.model_output = job.model_output;

  p.engine.precision = precision_from_name(job.precision);
  p.engine.cuda_graphs = job.cuda_graphs;
  p.engine.threads = job.cpu_threads;
  // "none": no cache file at all (every start measures); "": the user's cache folder.
  p.engine.cache_dir = job.algo_cache == "none" ? "" : job.algo_cache.empty() ? default_cache_dir() : job.algo_cache;
  // auto: full until the run knows its length (RunContext::build, autotune_for_job); `sluice profile`
  // measures the steady state, which is what full chooses for.
  p.engine.autotune = autotune_from_name(job.autotune == "auto" ? "full" : job.autotune);
  p.engine.product_autotune = p.engine.autotune;

  p.pipeline.prefetch = job.prefetch;
  p.pipeline.egress_buffers = job.egress_buffers;
  p.pipeline.reader_threads = job.reader_threads;
  p.pipeline.writer_threads = job.writer_threads;
  p.pipeline.commit_batches = job.chunk_batches;
  for (int r : job.fail_ranks)
    if (r == rank) p.pipeline.fail_at_batch = job.fail_at_batch;
  for (std::size_t i = 0; i < job.throttle_ranks.size() && !job.throttle_ms.empty(); ++i)
    if (job.throttle_ranks[i] == rank) p.pipeline.throttle_ms = job.throttle_ms[std::min(i, job.throttle_ms.size() - 1)];

  p.images = image_options(job);
  p.image_input.fail_on_bad = job.on_bad_sample == "fail";
  p.on_nan = job.on_nan == "fail" ? NonFinite::Fail : NonFinite::Warn;
  p.deflate = job.compression;
  p.max_length = job.max_length;
  p.tokenizer = job.tokenizer;
  p.prompt = job.prompt;
  p.max_tokens = job.max_tokens_per_batch;
  return p;
}

void JobPlan::set_model_input(const Source& source, const Shape& model_input) {
  prepare.sample_shape = source.sample_shape();
  prepare.input_dtype = source.dtype();
  if (max_tokens > 0 && !source.text())
    throw UsageError(str("--max-tokens-per-batch cuts batches of text by length; ", source.describe(), " is not text"),
                     "drop --max-tokens-per-batch (it applies to text models reading passages)");
  if (source.text()) {
    // A text model: token-id planes, bound to the model's inputs by name (model/prepare.h).
    if (images.sets_geometry())
      throw UsageError(str("--resize, --center-crop, --letterbox and --resize-shortest apply to image inputs; ",
                           source.describe(), " is text"));
    prepare.tokens.enabled = true;
    prepare.tokens.length = max_length;
    prepare.input_dtype = DType::I64;
    prepare.sample_shape = {};
    prepare.normalize = false;
    return;
  }
  if (source.encoded()) {
    // Image files: the model takes uint8 [B, 3, H, W]; scale/mean/std run in the graph.
    const PreprocessSpec spec = resolve_preprocess(images, model_input, model);
    prepare.sample_shape = {3, spec.out_h, spec.out_w};
    prepare.input_dtype = DType::U8;
  } else if (images.sets_geometry()) {
    throw UsageError(str("--resize, --center-crop, --letterbox and --resize-shortest apply to image inputs; ",
                         source.describe(), " is a tensor input"));
  }
}

PreprocessSpec JobPlan::image_spec(const Graph& prepared) const {
  return resolve_preprocess(images, prepared.inputs.at(0).shape, model);
}

void JobPlan::check_batch_bytes(const Source& source) const {
  // Sizes multiplied later must not overflow: one batch of input is batch x sample bytes.
  double sample = static_cast<double>(dtype_size(source.dtype()));
  for (int64_t d : source.sample_shape()) sample *= static_cast<double>(d);
  const double batch = static_cast<double>(batch_size);
  const int64_t chunk_batches = pipeline.commit_batches;
  if (batch_size > (int64_t{1} << 40) / std::max<int64_t>(1, chunk_batches) || sample * batch > 1e15)
    throw UsageError(str("--batch-size ", batch_size, " x --chunk-batches ", chunk_batches, " with samples of ",
                         mb(sample), " asks for ", mb(sample * batch), " per batch; choose smaller values"));
}

std::vector<DatasetSpec> JobPlan::dataset_specs(const Graph& prepared) const {
  std::vector<DatasetSpec> specs;
  for (const ValueInfo& o : prepared.outputs) {
    const ValueInfo* v = prepared.value(o.name);
    const ValueInfo& info = v ? *v : o;
    if (info.shape.empty() || info.shape[0] != batch_size)
      throw InputError(str("the model's output '", info.name, "' has shape ", shape_str(info.shape),
                           "; Sluice needs the batch (", batch_size, ") on axis 0"));
    DatasetSpec d;
    d.name = info.name;
    d.dtype = info.dtype;
    d.row_shape.assign(info.shape.begin() + 1, info.shape.end());
    d.deflate = deflate;
    specs.push_back(d);
  }
  return specs;
}

std::string JobPlan::slots_text(std::size_t in_slot_bytes, std::size_t out_row_bytes) const {
  const std::size_t out_bytes = out_row_bytes * static_cast<std::size_t>(batch_size);
  return str("--prefetch ", pipeline.prefetch, " input slots of ", mb(static_cast<double>(in_slot_bytes)),
             " and --egress-buffers ", pipeline.egress_buffers, " output slots of ", mb(static_cast<double>(out_bytes)),
             " (--batch-size ", batch_size, ")");
}

void JobPlan::check_host_slots(std::size_t in_slot_bytes, std::size_t out_row_bytes, int local_ranks) const {
  const std::size_t out_bytes = out_row_bytes * static_cast<std::size_t>(batch_size);
  const double slots = static_cast<double>(pipeline.prefetch) * static_cast<double>(in_slot_bytes) +
                       static_cast<double>(pipeline.egress_buffers) * static_cast<double>(out_bytes);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (ram > 0 && slots * static_cast<double>(local_ranks) > 0.8 * ram)
    throw Error(str("--prefetch ", pipeline.prefetch, " input slots of ", mb(static_cast<double>(in_slot_bytes)),
                    " and --egress-buffers ", pipeline.egress_buffers, " output slots of ", mb(static_cast<double>(out_bytes)),
                    " (--batch-size ", batch_size, ") take ", mb(slots), " of host memory per rank, x ", local_ranks,
                    " rank(s) on this node; the node has ", mb(ram), ": lower them"));
}

std::string choose_backend(const std::string& device) {
  if (device == "cpu") return "cpu";
  if (device == "cuda") {
    if (!cuda_built()) throw InputError("--device cuda: this sluice was built without the CUDA backend (SLUICE_CUDA=OFF)");
    if (gpu_count() == 0) throw InputError("--device cuda: no CUDA device is visible to this process");
    return "cuda";
  }
  return gpu_count() > 0 ? "cuda" : "cpu";
}

namespace {

// The model prepared once per length bucket (PreparedModel::buckets) from `model` as loaded.  A
// bucket's outputs must have the main graph's rows: a per-token output ([B, L, ...]) has another
// shape per bucket, which one dataset cannot store.
std::vector<BucketGraph> prepare_buckets(const Graph& model, const PrepareOptions& po, const Graph& main, int64_t max_tokens) {
  const int64_t L = main.inputs.at(0).shape.at(2);
  const TokenBuckets tb = plan_token_buckets(L, po.batch_size, max_tokens);
  std::vector<BucketGraph> out;
  for (std::size_t b = 0; b < tb.lengths.size(); ++b) {
    PrepareOptions o = po;
    o.batch_size = tb.caps[b];
    o.tokens.length = tb.lengths[b];
    BucketGraph g;
    g.length = tb.lengths[b];
    g.cap = tb.caps[b];
    try {
      g.graph = prepare_graph(model, o);
    } catch (const Error& e) {
      throw UsageError(str("--max-tokens-per-batch: the model does not prepare for pieces of ", g.cap, " passages of ",
                           g.length, " tokens: ", e.what()),
                       "a model exported with a dynamic sequence length runs at every bucket's length; drop "
                       "--max-tokens-per-batch for this one");
    }
    const Shape want = {g.cap, main.inputs[0].shape[1], g.length};
    if (g.graph.inputs.size() != 1 || g.graph.inputs[0].shape != want || g.graph.input_planes != main.input_planes)
      throw UsageError(str("--max-tokens-per-batch: the model prepared for ", g.length, " tokens takes ",
                           g.graph.inputs.empty() ? std::string("nothing") : shape_str(g.graph.inputs[0].shape), ", not ",
                           shape_str(want)));
    for (std::size_t i = 0; i < main.outputs.size(); ++i) {
      const ValueInfo* a = main.value(main.outputs[i].name);
      const ValueInfo* v = i < g.graph.outputs.size() ? g.graph.value(g.graph.outputs[i].name) : nullptr;
      const Shape rows_a = a ? Shape(a->shape.begin() + 1, a->shape.end()) : Shape{};
      const Shape rows_v = v ? Shape(v->shape.begin() + 1, v->shape.end()) : Shape{};
      if (!a || !v || v->dtype != a->dtype || rows_v != rows_a || g.graph.outputs[i].name != main.outputs[i].name)
        throw UsageError(str("--max-tokens-per-batch: the output '", main.outputs[i].name, "' is ",
                             a ? shape_str(a->shape) : std::string("?"), " at ", L, " tokens but ",
                             v ? shape_str(v->shape) : std::string("absent"), " at ", g.length,
                             ": its rows follow the length, which one stored dataset cannot"),
                         "cut by length for pooled outputs (--outputs embedding), or drop --max-tokens-per-batch");
    }
    // The constants the main graph holds byte for byte stay there alone.
    for (auto it = g.graph.constants.begin(); it != g.graph.constants.end();) {
      const Tensor* m = main.constant(it->first);
      if (m && m->dtype == it->second.dtype && m->shape == it->second.shape && m->bytes == it->second.bytes) {
        g.shared.push_back(it->first);
        it = g.graph.constants.erase(it);
      } else {
        ++it;
      }
    }
    std::sort(g.shared.begin(), g.shared.end());
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

LentConstants::LentConstants(Graph& main, BucketGraph& bucket) : main_(main), bucket_(bucket) {
  for (const std::string& name : bucket_.shared) {
    auto it = main_.constants.find(name);
    SLUICE_CHECK(it != main_.constants.end(), "bucket constant '", name, "' is not in the main graph");
    bucket_.graph.constants.emplace(name, std::move(it->second));
  }
}

LentConstants::~LentConstants() {
  for (const std::string& name : bucket_.shared) {
    auto it = bucket_.graph.constants.find(name);
    if (it == bucket_.graph.constants.end()) continue;
    main_.constants[name] = std::move(it->second);
    bucket_.graph.constants.erase(it);
  }
}

PreparedModel load_prepared_model(JobPlan& plan, const Source& source) {
  PreparedModel m;
  const auto t0 = Clock::now();
  if (!file_readable(plan.model))
    throw InputError(str("cannot read the model file ", plan.model, access(plan.model.c_str(), F_OK) == 0 ? " (permission)" : " (no such file)"),
                     str("--model names an ONNX file; ", kPathsHint));
  // The file's digest (the run's identity for --resume) is a second read of the file: hash it on a
  // thread of its own while the model is parsed and prepared.
  std::string digest;
  WorkerThread hashing("model-sha256", [&] { digest = sha256_file(plan.model); });
  Graph model = load_onnx(plan.model);
  m.load_s = seconds_since(t0);
  plan.set_model_input(source, model.inputs.empty() ? Shape{} : model.inputs[0].shape);

  const PrepareOptions& po = plan.prepare;
  // Cut by length: the loaded model once more per bucket (prepare_graph takes its own copy each time).
  const bool buckets = plan.max_tokens > 0 && po.tokens.enabled;
  Graph loaded;
  if (buckets) loaded = model;
  try {
    allocating(str("preparing the model for --batch-size ", plan.batch_size), [&] { m.graph = prepare_graph(std::move(model), po); });
  } catch (const SizeError& e) {
    // Past Sluice's size limits: the model's own shapes (bad input), or only this batch size (a
    // resource limit, exit 1, like any allocation the batch size makes impossible)?
    if (plan.batch_size <= 1) throw;
    PrepareOptions one = po;
    one.batch_size = 1;
    try {
      prepare_graph(load_onnx(plan.model), one);
    } catch (const Error&) {
      throw e;
    }
    throw Error(str("cannot allocate the model's tensors for --batch-size ", plan.batch_size, ": ", e.what()),
                kExitFailure, "a smaller --batch-size fits (batch 1 does)");
  }
  hashing.join();
  m.sha256 = digest;
  check_batch_axis(m.graph, plan.batch_size);
  // Here, on rank 0 in an agreed step, rather than when every rank plans its datasets: one error
  // line, and before any rank allocates an engine for it.
  for (const ValueInfo& o : m.graph.outputs) {
    const ValueInfo* v = m.graph.value(o.name);
    const Shape& shape = v ? v->shape : o.shape;
    for (std::size_t i = 1; i < shape.size(); ++i)
      if (shape[i] < 1)
        throw InputError(str("the model's output '", o.name, "' has shape ", shape_str(shape),
                             ": no values per sample (an empty dimension), nothing to store"),
                         "check the model's last Reshape/Slice/Pad: every output needs at least one value per sample");
  }
  if (buckets) {
    const auto t_buckets = Clock::now();
    allocating("preparing the model per length bucket (--max-tokens-per-batch)",
               [&] { m.buckets = prepare_buckets(loaded, po, m.graph, plan.max_tokens); });
    m.buckets_s = seconds_since(t_buckets);
  }
  return m;
}

}  // namespace sluice
