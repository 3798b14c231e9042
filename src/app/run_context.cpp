#include "app/run_context.h"

#include <unistd.h>

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>

#include "app/job_options.h"
#include "app/ledgers.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "export/geometry.h"
#include "io/hdf5_util.h"
#include "model/batch_axis.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"
#include "model/serialize.h"
#include "pipeline/gpu_count.h"
#include "sluice/version.h"

namespace sluice {

namespace {

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return str(x, "/sluice");
  if (const char* h = std::getenv("HOME"); h && *h) return str(h, "/.cache/sluice");
  return "";
}

bool file_readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return str("signal ", sig);
  }
}

// "12 MB", "3.5e+12 TB": sizes in messages, whatever their magnitude.
std::string mb(double bytes) {
  if (bytes < 1e12) return str(static_cast<int64_t>(bytes / 1e6 + 0.5), " MB");
  std::ostringstream os;
  os.precision(3);
  os << bytes / 1e12 << " TB";
  return os.str();
}

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

}  // namespace

RunContext::RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi)
    : job_(job), job_toml_(std::move(job_toml)), mpi_(mpi) {
  started_ = iso8601(unix_time_now());
}

RunContext::~RunContext() {
  if (aside_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(aside_mutex_);
      aside_done_ = true;
    }
    aside_cv_.notify_all();
    aside_thread_.join_noexcept();
  }
}

void RunContext::open_source() {
  const auto t0 = Clock::now();
  InputOptions in;
  in.path = job_.input;
  in.kind = job_.input_kind;
  in.dataset = job_.input_dataset;
  in.keys = job_.input_keys;
  in.samples = job_.samples;
  in.sample_shape = job_.sample_shape;
  in.dtype = dtype_from_name(job_.input_dtype);
  in.seed = job_.seed;
  // Every rank enumerates the input itself; the fingerprints must agree (a rank that sees another
  // file list would mix samples).  One broadcast on every path, so a rank that failed to open
  // still takes part before its error is agreed on.
  std::exception_ptr failed;
  try {
    source_ = open_input(in);
    input_fingerprint_ = source_->fingerprint();
  } catch (...) {
    failed = std::current_exception();
  }
  const std::string root_fingerprint = mpi_.broadcast_string(mpi_.rank() == 0 ? input_fingerprint_ : std::string());
  if (failed) std::rethrow_exception(failed);
  if (!root_fingerprint.empty() && input_fingerprint_ != root_fingerprint)
    throw InputError(str("input ", job_.input, ": this rank sees other samples than rank 0 (", input_fingerprint_, " vs ",
                         root_fingerprint, "); every rank must see the same files"));
  if (mpi_.rank() == 0) log_info("input: ", source_->describe());
  chunking_.total = source_->size();
  // Sizes multiplied below must not overflow: one batch of input is batch x sample bytes.
  double sample = static_cast<double>(dtype_size(source_->dtype()));
  for (int64_t d : source_->sample_shape()) sample *= static_cast<double>(d);
  const double batch = static_cast<double>(job_.batch_size);
  if (job_.batch_size > (int64_t{1} << 40) / std::max<int64_t>(1, job_.chunk_batches) || sample * batch > 1e15)
    throw UsageError(str("--batch-size ", job_.batch_size, " x --chunk-batches ", job_.chunk_batches, " with samples of ",
                         mb(sample), " asks for ", mb(sample * batch), " per batch; choose smaller values"));
  chunking_.batch = job_.batch_size;
  chunking_.chunk_samples = job_.batch_size * job_.chunk_batches;
  t_setup_ += seconds_since(t0);
}

void RunContext::load_model() {
  if (mpi_.rank() != 0) return;  // the others receive the prepared model in share_model()
  const auto t0 = Clock::now();
  if (!file_readable(job_.model))
    throw InputError(str("cannot read the model file ", job_.model, access(job_.model.c_str(), F_OK) == 0 ? " (permission)" : " (no such file)"),
                     str("--model names an ONNX file; ", kPathsHint));
  Graph model = load_onnx(job_.model);
  model_sha256_ = sha256_file(job_.model);
  t_model_load_ = seconds_since(t0);

  PrepareOptions po;
  po.batch_size = job_.batch_size;
  po.sample_shape = source_->sample_shape();
  po.input_dtype = source_->dtype();
  if (source_->encoded()) {
    // Image files: the model takes uint8 [B, 3, H, W]; scale/mean/std run in the graph.
    const PreprocessSpec spec = resolve_preprocess(image_options(job_), model.inputs.empty() ? Shape{} : model.inputs[0].shape,
                                                   job_.model);
    po.sample_shape = {3, spec.out_h, spec.out_w};
    po.input_dtype = DType::U8;
  } else if (!job_.resize.empty() || !job_.center_crop.empty() || job_.letterbox) {
    throw UsageError(str("--resize, --center-crop and --letterbox apply to image inputs; ", source_->describe(),
                         " is a tensor input"));
  }
  po.normalize = job_.scale != 1.0f || !job_.mean.empty() || !job_.stddev.empty();
  po.scale = job_.scale;
  po.mean = job_.mean;
  po.stddev = job_.stddev;
  po.static_batch = static_batch_from_name(job_.static_batch);
  const DType float_out = dtype_from_name(job_.output_dtype);
  for (const auto& name : job_.outputs) {
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
      s.top_k = job_.top_k;
    }
    po.outputs.push_back(s);
  }
  try {
    allocating(str("preparing the model for --batch-size ", job_.batch_size), [&] { graph_ = prepare_graph(std::move(model), po); });
  } catch (const SizeError& e) {
    // Past Sluice's size limits: the model's own shapes (bad input), or only this batch size (a
    // resource limit, exit 1, like any allocation the batch size makes impossible)?
    if (job_.batch_size <= 1) throw;
    PrepareOptions one = po;
    one.batch_size = 1;
    try {
      prepare_graph(load_onnx(job_.model), one);
    } catch (const Error&) {
      throw e;
    }
    throw Error(str("cannot allocate the model's tensors for --batch-size ", job_.batch_size, ": ", e.what()),
                kExitFailure, "a smaller --batch-size fits (batch 1 does)");
  }
  check_batch_axis(graph_, job_.batch_size);
  // Here, on rank 0 in an agreed step, rather than when every rank plans its datasets: one error
  // line, and before any rank allocates an engine for it.
  for (const ValueInfo& o : graph_.outputs) {
    const ValueInfo* v = graph_.value(o.name);
    const Shape& shape = v ? v->shape : o.shape;
    for (std::size_t i = 1; i < shape.size(); ++i)
      if (shape[i] < 1)
        throw InputError(str("the model's output '", o.name, "' has shape ", shape_str(shape),
                             ": no values per sample (an empty dimension), nothing to store"),
                         "check the model's last Reshape/Slice/Pad: every output needs at least one value per sample");
  }
  t_setup_ += seconds_since(t0);
}

void RunContext::make_specs() {
  specs_.clear();
  for (const ValueInfo& o : graph_.outputs) {
    const ValueInfo* v = graph_.value(o.name);
    const ValueInfo& info = v ? *v : o;
    if (info.shape.empty() || info.shape[0] != job_.batch_size)
      throw InputError(str("the model's output '", info.name, "' has shape ", shape_str(info.shape),
                           "; Sluice needs the batch (", job_.batch_size, ") on axis 0"));
    DatasetSpec d;
    d.name = info.name;
    d.dtype = info.dtype;
    d.row_shape.assign(info.shape.begin() + 1, info.shape.end());
    d.deflate = job_.compression;
    specs_.push_back(d);
  }
}

void RunContext::share_model() {
  const auto t0 = Clock::now();
  if (mpi_.world_size() > 1) {
    const std::string structure = mpi_.broadcast_string(mpi_.rank() == 0 ? serialize_structure(graph_) : std::string());
    model_sha256_ = mpi_.broadcast_string(model_sha256_);
    if (mpi_.rank() != 0) graph_ = deserialize_structure(structure);
    weights_ = broadcast_weights(graph_, mpi_.comm(), 0, backend_ == "cuda" ? gpu_ : -1);
    if (mpi_.rank() == 0)
      log_info("weights: ", weights_.tensors, " tensors, ", weights_.bytes / 1e6, " MB to ", mpi_.world_size() - 1,
               " rank(s) over ", weights_.transport, " in ", weights_.seconds, " s");
  }
  make_specs();
  hosts_ = mpi_.gather_strings(mpi_.host());
  t_setup_ += seconds_since(t0);
}

std::string RunContext::plan_on_root() {
  if (job_.sink == "null" && !job_.output_given) {
    // A benchmark of everything but storage, with no folder named: nothing touches the disk (the
    // report is printed, not written).
    RunPlan p;
    p.pending = {{0, chunking_.total}};
    return p.serialize();
  }
  prepare_output_dir(job_.output);
  lock_ = FolderLock::acquire(job_.output);
  return plan_output_dir(job_, chunking_).serialize();
}

void RunContext::set_plan(const std::string& serialized) { plan_ = RunPlan::deserialize(serialized); }

void RunContext::plan_resume() {
  if (plan_.resume_files.empty()) return;
  // Every rank recovers and reads its share of the rank files (app/ledgers.h); rank 0 checks they
  // belong to this job and computes the pending ranges.
  JobIdentity id;
  id.job_toml = job_toml_;
  id.model_sha256 = model_sha256_;
  id.input_fingerprint = input_fingerprint_;
  id.specs = specs_;
  sluice::plan_resume(mpi_, job_, chunking_, id, plan_);
}

bool RunContext::already_complete() const {
  // Rank 0's view of the folder decides for every rank, so all of them return together.
  std::string verdict;
  if (mpi_.rank() == 0)
    verdict = job_.resume && job_.sink == "hdf5" && plan_.pending.empty() &&
                      access((job_.output + "/outputs.h5").c_str(), F_OK) == 0
                  ? "1"
                  : "0";
  return mpi_.broadcast_string(verdict) == "1";
}

void RunContext::abandon() {
  // Each rank removes the rank file it created; then rank 0 puts the earlier run back.
  try {
    pipeline_.reset();
    if (file_ && file_created_) {
      file_.reset();
      std::remove(rank_file_path(job_.output, mpi_.rank()).c_str());
    }
    file_.reset();
  } catch (const std::exception& e) {
    log_warn("cleaning up after the failed set-up: ", e.what());
  }
  mpi_.barrier();
  if (mpi_.rank() == 0 && !plan_.set_aside.empty()) {
    restore_set_aside(job_.output, plan_.set_aside);
    log_info("--overwrite: the earlier run is back in ", job_.output, " (this job did not start)");
  }
}

void RunContext::note_failure(const std::string& message) const {
  if (job_.sink == "hdf5") note_attempt_failure(job_.output, plan_.attempt, mpi_.rank(), message);
}

void RunContext::start_work() {
  work_ = make_work_distributor(job_.sharding == "static" ? Sharding::Static : Sharding::Dynamic, mpi_, chunking_,
                                plan_.pending);
  if (mpi_.rank() == 0 && job_.sink == "hdf5") {
    // The attempt is on record once set-up passed (a set-up failure is no attempt: nothing ran).
    AttemptRecord a;
    a.attempt = plan_.attempt;
    a.started_unix = unix_time_now();
    a.started = iso8601(a.started_unix);
    a.world_size = mpi_.world_size();
    a.nodes = mpi_.node_count();
    for (const auto& h : hosts_)
      if (std::find(a.hosts.begin(), a.hosts.end(), h) == a.hosts.end()) a.hosts.push_back(h);
    a.committed_before = plan_.committed_before;
    attempts_ = begin_attempt(job_.output, job_.resume, a, plan_.last_commit_unix);
    save_job();
  }
  if (mpi_.rank() == 0 && job_.sink == "hdf5" && !list_set_asides(job_.output).empty())
    aside_thread_ = WorkerThread("old-run", [this] { watch_set_aside(); });
}

// The resolved job, so `sluice run --resume --output DIR` needs nothing else (written once set-up
// passed: a refused resume leaves the saved job of the run it refused to touch).
void RunContext::save_job() const {
  const std::string path = saved_job_path(job_.output), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << "# The job of this run folder, as sluice ran it: `sluice run --resume --output DIR` reads it.\n" << job_toml_;
    if (!f) throw Error(str("cannot write ", tmp, " (disk full?)"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(str("cannot rename ", tmp, " to ", path));
}

void RunContext::watch_set_aside() {
  std::unique_lock<std::mutex> lock(aside_mutex_);
  while (!aside_done_ && work_->job_committed() == 0) aside_cv_.wait_for(lock, std::chrono::milliseconds(100));
  if (work_->job_committed() == 0 && plan_.pending.size() > 0) return;  // nothing new committed: keep it
  for (const std::string& aside : list_set_asides(job_.output)) remove_set_aside(aside);
}

void RunContext::choose_device() {
  const int gpus = gpu_count();
  if (job_.device == "cpu") {
    backend_ = "cpu";
  } else if (job_.device == "cuda") {
    if (!cuda_built()) throw InputError("--device cuda: this sluice was built without the CUDA backend (SLUICE_CUDA=OFF)");
    if (gpus == 0) throw InputError("--device cuda: no CUDA device is visible to this process");
    backend_ = "cuda";
  } else {
    backend_ = gpus > 0 ? "cuda" : "cpu";
  }
  if (backend_ == "cuda") gpu_ = choose_gpu();
}

int RunContext::choose_gpu() const {
  const int gpus = gpu_count();
  if (!job_.gpu_map.empty()) {
    std::vector<int> map;
    std::stringstream ss(job_.gpu_map);
    std::string item;
    while (std::getline(ss, item, ',')) map.push_back(std::atoi(item.c_str()));
    const int g = map[static_cast<std::size_t>(mpi_.local_rank()) % map.size()];
    if (g < 0 || g >= gpus) throw UsageError(str("--gpu-map names GPU ", g, " but ", gpus, " are visible"));
    return g;
  }
  return mpi_.local_rank() % gpus;
}

void RunContext::build() {
  const auto t0 = Clock::now();
  EngineOptions eo;
  eo.precision = precision_from_name(job_.precision);
  eo.cuda_graphs = job_.cuda_graphs;
  eo.threads = job_.cpu_threads;
  eo.cache_dir = job_.algo_cache.empty() ? default_cache_dir() : job_.algo_cache;
  if (backend_ == "cuda") {
#ifdef SLUICE_HAVE_CUDA
    eo.device = gpu_;
    device_ = create_cuda_device(gpu_);
    device_->bind_thread();
#endif
  } else {
    device_ = create_host_device();
    if (eo.threads == 0 && mpi_.local_size() > 1) {
      // Ranks of one node share its cores.
      const long cores = sysconf(_SC_NPROCESSORS_ONLN);
      eo.threads = static_cast<int>(std::max<long>(1, cores / mpi_.local_size()));
    }
  }
  allocating(str("the ", backend_ == "cuda" ? "GPU" : "CPU", " engine for --batch-size ", job_.batch_size,
                 " (the model's tensors for one batch of ", shape_str(graph_.inputs[0].shape), ")"),
             [&] {
               try {
                 engine_ = create_engine(backend_, graph_, eo);
               } catch (const Error& e) {  // the engines' own "cannot allocate N bytes"
                 throw Error(str(e.what(), " (for --batch-size ", job_.batch_size, ": the model's tensors for one batch of ",
                                 shape_str(graph_.inputs[0].shape), ")"),
                             e.exit_code(), "the engine's memory grows with --batch-size: try a smaller one");
               }
             });
  if (source_->encoded()) {
    // Every rank resolves the same spec from the prepared graph's input [B, 3, H, W].
    const PreprocessSpec spec = resolve_preprocess(image_options(job_), graph_.inputs.at(0).shape, job_.model);
    preprocess_ = spec;
    ImageInputOptions io;
    io.fail_on_bad = job_.on_bad_sample == "fail";
    input_ = make_image_input(*source_, spec, job_.batch_size, *device_, io);
    if (mpi_.rank() == 0) log_info("images: ", input_->describe());
  }

  RankFileMeta meta;
  meta.job_text = job_toml_;
  meta.model_path = job_.model;
  meta.model_sha256 = model_sha256_;
  meta.rank = mpi_.rank();
  meta.world_size = mpi_.world_size();
  meta.host = mpi_.host();
  meta.device = device_->describe();
  meta.total_samples = chunking_.total;
  meta.chunk_samples = chunking_.chunk_samples;
  meta.key_bytes = source_->key_bytes();
  meta.attempt = plan_.attempt;
  meta.start_time = unix_time_now();
  meta.fsync_commits = job_.fsync;
  meta.input_fingerprint = input_fingerprint_;
  meta.orig_sizes = input_ && input_->has_sizes();
  if (job_.sink == "hdf5") {
    const std::string path = rank_file_path(job_.output, mpi_.rank());
    const bool exists = access(path.c_str(), F_OK) == 0;
    file_ = open_rank_file(path, specs_, job_.batch_size, meta, exists);
    file_created_ = !exists;
  }

  PipelineOptions po;
  po.prefetch = job_.prefetch;
  po.egress_buffers = job_.egress_buffers;
  po.reader_threads = job_.reader_threads;
  po.writer_threads = job_.writer_threads;
  for (int r : job_.fail_ranks)
    if (r == mpi_.rank()) po.fail_at_batch = job_.fail_at_batch;
  po.commit_batches = job_.chunk_batches;
  for (std::size_t i = 0; i < job_.throttle_ranks.size() && !job_.throttle_ms.empty(); ++i)
    if (job_.throttle_ranks[i] == mpi_.rank()) po.throttle_ms = job_.throttle_ms[std::min(i, job_.throttle_ms.size() - 1)];
  // An image input's slots hold file bytes (or decoded pixels), a tensor input's one batch of input.
  const std::size_t in_slot_bytes = input_ ? input_->slot_bytes() : graph_.inputs[0].bytes();
  std::size_t out_bytes = 0;
  for (const auto& s : specs_) out_bytes += s.row_bytes() * static_cast<std::size_t>(job_.batch_size);
  // The slots are host memory (pinned): asking for more than the machine has would end in the
  // kernel's OOM killer rather than an error, so it is refused here, naming the options.
  const double slots = static_cast<double>(job_.prefetch) * static_cast<double>(in_slot_bytes) +
                       static_cast<double>(job_.egress_buffers) * static_cast<double>(out_bytes);
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (ram > 0 && slots * static_cast<double>(mpi_.local_size()) > 0.8 * ram)
    throw Error(str("--prefetch ", job_.prefetch, " input slots of ", mb(static_cast<double>(in_slot_bytes)),
                    " and --egress-buffers ", job_.egress_buffers, " output slots of ", mb(static_cast<double>(out_bytes)),
                    " (--batch-size ", job_.batch_size, ") take ", mb(slots), " of host memory per rank, x ",
                    mpi_.local_size(), " rank(s) on this node; the node has ", mb(ram), ": lower them"));
  allocating(str("--prefetch ", job_.prefetch, " input slots of ", mb(static_cast<double>(in_slot_bytes)),
                 " and --egress-buffers ", job_.egress_buffers, " output slots of ", mb(static_cast<double>(out_bytes)),
                 " (--batch-size ", job_.batch_size, ")"),
             [&] {
               if (!input_)
                 input_ = make_tensor_input(*source_, job_.batch_size, engine_->input().bytes(),
                                            job_.on_nan == "fail" ? NonFinite::Fail : NonFinite::Warn);
               pipeline_ = std::make_unique<Pipeline>(*device_, *engine_, *source_, input_.get(), file_.get(), po);
             });
  t_setup_ += seconds_since(t0);
  log_debug("engine: ", engine_->describe());
}

void RunContext::run() {
  pipeline_start_unix_ = unix_time_now();
  series_ = std::make_unique<SeriesRecorder>([this] { return pipeline_->snapshot(); }, job_.series_interval);
  work_->start();  // collective: every rank built its distributor (start_work() was agreed)
  stats_ = pipeline_->run(*work_);
  series_->stop(stats_);
}

int64_t RunContext::computed_samples() const { return pipeline_ ? pipeline_->snapshot().samples : 0; }

bool RunContext::stop(int signal) {
  if (signal && !stop_signal_) stop_signal_ = signal;
  if (stopped_.exchange(true)) return false;
  if (pipeline_) pipeline_->stop();
  if (work_) work_->request_stop();
  return true;
}

bool RunContext::drain() {
  if (file_) file_->close();
  complete_ = work_->finish();
  if (aside_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(aside_mutex_);
      aside_done_ = true;
    }
    aside_cv_.notify_all();
    aside_thread_.join();
  }
  int local_stopped = stopped_ ? 1 : 0, any_stopped = 0;
  MPI_CHECK(MPI_Allreduce(&local_stopped, &any_stopped, 1, MPI_INT, MPI_MAX, mpi_.comm()));
  any_stopped_ = any_stopped != 0;
  return complete_;
}

void RunContext::report() {
  const bool complete_attempt = complete_;

  RankReport me;
  me.rank = mpi_.rank();
  me.host = mpi_.host();
  me.device = device_->describe();
  me.engine = engine_->describe();
  me.setup_s = t_setup_;
  me.stats = stats_;
  me.reader_threads = job_.reader_threads;
  me.writer_threads = job_.writer_threads;
  me.start_unix = pipeline_start_unix_;
  if (series_) me.series = series_->to_json();
  const std::vector<std::string> all = mpi_.gather_strings(dump_json(me.to_json()));
  mpi_.barrier();  // every rank file is closed before they are read
  // Every rank reads the ledgers of its share of the rank files (those of earlier attempts too);
  // rank 0 gets the merged runs and maps them into outputs.h5.
  std::vector<RankFileInfo> infos;
  const auto t_end = Clock::now();
  if (complete_attempt && file_) {
    std::string listed;
    if (mpi_.rank() == 0)
      for (const auto& f : list_rank_files(job_.output)) listed += f + "\n";
    listed = mpi_.broadcast_string(listed);
    std::vector<std::string> paths;
    for (std::size_t a = 0, b; (b = listed.find('\n', a)) != std::string::npos; a = b + 1) paths.push_back(listed.substr(a, b - a));
    infos = read_ledgers(mpi_, paths, /*recover=*/false);
  }
  if (mpi_.rank() != 0) return;

  JobReport r;
  r.name = job_.name;
  r.version = SLUICE_VERSION;
  r.commit = SLUICE_GIT_COMMIT;
  r.backend = backend_;
  r.precision = backend_ == "cpu" ? "fp32" : job_.precision;
  r.model = job_.model;
  r.model_sha256 = model_sha256_;
  r.input = source_->describe();
  r.output_dir = job_.output;
  for (const auto& s : specs_) r.outputs.push_back(s.name);
  r.world_size = mpi_.world_size();
  r.nodes = mpi_.node_count();
  r.attempt = plan_.attempt;
  r.total_samples = chunking_.total;
  r.pending_samples = work_->job_pending();
  r.batch_size = job_.batch_size;
  r.chunk_samples = chunking_.chunk_samples;
  r.complete = complete_attempt;
  r.stopped = any_stopped_;
  r.started = started_;
  r.finished = iso8601(unix_time_now());
  r.weights_transport = weights_.transport.empty() ? "none" : weights_.transport;
  r.weights_mb = static_cast<double>(weights_.bytes) / 1e6;
  r.weights_s = weights_.seconds;
  r.model_load_s = t_model_load_;
  r.job_text = job_toml_;
  for (const auto& s : all) r.ranks.push_back(RankReport::from_json(nlohmann::json::parse(s)));
  if (!attempts_.empty()) {
    const std::string why = complete_attempt ? "complete" : any_stopped_ ? "stopped" : "ended";
    std::string message;
    if (any_stopped_) message = stop_signal_ ? str("by ", signal_name(stop_signal_)) : "by a signal (to another rank)";
    nlohmann::json ranks = nlohmann::json::array();
    if (r.ranks.size() <= 256)
      for (const auto& rr : r.ranks)
        ranks.push_back({{"rank", rr.rank}, {"host", rr.host}, {"start_unix", rr.start_unix},
                         {"series", thin_series(rr.series, 120)}});
    attempts_.back().ranks = ranks;
    attempts_ = end_attempt(job_.output, attempts_, why, message, r.samples());
  }
  r.attempts = attempts_;

  if (complete_attempt && file_) {
    const Coverage cov = check_coverage(infos, chunking_.total);
    if (!cov.complete())
      throw Error(str("the rank files in ", job_.output, " do not cover every sample once (", cov.present, " of ",
                      cov.total, " present, ", cov.gaps.size(), " gap(s), ", cov.duplicates.size(), " duplicate(s))"));
    write_virtual_outputs(job_.output, infos, chunking_.total);
    if (preprocess_) {
      // How the images became the model's input, for `sluice export --original-size` to undo.
      const std::string path = job_.output + "/outputs.h5";
      h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
      if (!f.valid()) throw Error(str("cannot reopen ", path, " to record the image geometry: ", h5::error_stack_text()));
      h5::write_attr(f, kPreprocessAttr, geometry_json(*preprocess_));
    }
    int64_t runs = 0;
    for (const RankFileInfo& f : infos) runs += static_cast<int64_t>(f.chunks.size());
    log_info("outputs.h5: ", runs, " mapping(s) per dataset over ", infos.size(), " rank file(s); ledgers and outputs.h5 in ",
             seconds_since(t_end), " s; ", work_->steals(), " steal(s)");
  }
  if (job_.sink == "hdf5" || job_.output_given) write_report_json(r, job_.output + "/report.json");
  std::fputs(format_report_table(r).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace sluice
