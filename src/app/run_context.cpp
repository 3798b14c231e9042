#include "app/run_context.h"

#include <unistd.h>

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "app/job_options.h"
#include "app/job_plan.h"
#include "app/ledgers.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/sha256.h"
#include "text/text_input.h"
#include "text/tokenizer.h"
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

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return str("signal ", sig);
  }
}

}  // namespace

RunContext::RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi)
    : job_(job), job_plan_(plan_job(job, mpi.rank())), job_toml_(std::move(job_toml)), mpi_(mpi) {
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
  // Every rank enumerates the input itself; the fingerprints must agree (a rank that sees another
  // file list would mix samples).  One broadcast on every path, so a rank that failed to open
  // still takes part before its error is agreed on.
  std::exception_ptr failed;
  try {
    source_ = open_input(job_plan_.input);
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
  job_plan_.check_batch_bytes(*source_);
  chunking_.batch = job_.batch_size;
  chunking_.chunk_samples = job_.batch_size * job_.chunk_batches;
  setup_parts_.input_s = seconds_since(t0);
  t_setup_ += setup_parts_.input_s;
}

void RunContext::load_model() {
  if (mpi_.rank() != 0) return;  // the others receive the prepared model in share_model()
  const auto t0 = Clock::now();
  PreparedModel m = load_prepared_model(job_plan_, *source_);
  graph_ = std::move(m.graph);
  buckets_ = std::move(m.buckets);
  setup_parts_.buckets_s = m.buckets_s;
  if (!buckets_.empty()) {
    std::size_t own = 0;
    for (const BucketGraph& b : buckets_) own += b.graph.constant_bytes();
    log_info("--max-tokens-per-batch: the model prepared for ", buckets_.size(), " length buckets in ", m.buckets_s,
             " s; their own constants (shape values) ", own / 1e3, " kB, the weights (", graph_.constant_bytes() / 1e6,
             " MB) held once and lent to each bucket's engine");
  }
  model_sha256_ = m.sha256;
  t_model_load_ = m.load_s;
  setup_parts_.model_load_s = seconds_since(t0);
  t_setup_ += setup_parts_.model_load_s;
}

namespace {

// The bucket graphs' list as bytes: per bucket its length, cap, shared constant names and structure.
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_bytes(std::string& s, const std::string& b) {
  put_u64(s, b.size());
  s += b;
}
uint64_t get_u64(const std::string& s, std::size_t& at) {
  if (at + sizeof(uint64_t) > s.size()) SLUICE_THROW("truncated bucket list");
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, sizeof v);
  at += sizeof v;
  return v;
}
std::string get_bytes(const std::string& s, std::size_t& at) {
  const uint64_t n = get_u64(s, at);
  if (at + n > s.size()) SLUICE_THROW("truncated bucket list");
  std::string b = s.substr(at, n);
  at += n;
  return b;
}

}  // namespace

// --max-tokens-per-batch on several ranks: the bucket graphs' structures (kilobytes each) and the
// few constants of theirs that differ from the main graph's (shape values); the weights came once,
// with the main graph.
void RunContext::share_buckets() {
  std::string list;
  if (mpi_.rank() == 0) {
    put_u64(list, buckets_.size());
    for (const BucketGraph& b : buckets_) {
      put_u64(list, static_cast<uint64_t>(b.length));
      put_u64(list, static_cast<uint64_t>(b.cap));
      put_u64(list, b.shared.size());
      for (const std::string& n : b.shared) put_bytes(list, n);
      put_bytes(list, serialize_structure(b.graph));
    }
  }
  list = mpi_.broadcast_string(list);
  if (mpi_.rank() != 0) {
    std::size_t at = 0;
    buckets_.clear();
    for (uint64_t k = 0, n = get_u64(list, at); k < n; ++k) {
      BucketGraph b;
      b.length = static_cast<int64_t>(get_u64(list, at));
      b.cap = static_cast<int64_t>(get_u64(list, at));
      for (uint64_t i = 0, m = get_u64(list, at); i < m; ++i) b.shared.push_back(get_bytes(list, at));
      b.graph = deserialize_structure(get_bytes(list, at));
      buckets_.push_back(std::move(b));
    }
  }
  for (BucketGraph& b : buckets_) (void)broadcast_weights_mpi(b.graph, mpi_.comm(), 0);
}

void RunContext::share_model() {
  const auto t0 = Clock::now();
  // The warm-up overlapped the model load; the weights' NCCL broadcast and the engine come next.
  if (warm_up_.joinable()) (void)warm_up_.join_noexcept();
  if (mpi_.world_size() > 1) {
    const std::string structure = mpi_.broadcast_string(mpi_.rank() == 0 ? serialize_structure(graph_) : std::string());
    model_sha256_ = mpi_.broadcast_string(model_sha256_);
    if (mpi_.rank() != 0) graph_ = deserialize_structure(structure);
    weights_ = broadcast_weights(graph_, mpi_.comm(), 0, backend_ == "cuda" ? gpu_ : -1);
    if (mpi_.rank() == 0)
      log_info("weights: ", weights_.tensors, " tensors, ", weights_.bytes / 1e6, " MB to ", mpi_.world_size() - 1,
               " rank(s) over ", weights_.transport, " in ", weights_.seconds, " s");
    share_buckets();
  }
  specs_ = job_plan_.dataset_specs(graph_);
  hosts_ = mpi_.gather_strings(mpi_.host());
  setup_parts_.share_s = seconds_since(t0);
  t_setup_ += setup_parts_.share_s;
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
  // The note for the next attempt, and the attempt marked failed now (it may be the last one).
  if (job_.sink == "hdf5") record_attempt_failure(job_.output, plan_.attempt, mpi_.rank(), message);
}

void RunContext::note_stopping(const std::string& how) const {
  if (job_.sink == "hdf5") note_attempt_stopping(job_.output, plan_.attempt, mpi_.rank(), how);
}

void RunContext::note_stopping(int signal) const { note_stopping(str("by ", signal_name(signal))); }

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
    for (const auto& h : hosts_) {
      auto at = std::find(a.hosts.begin(), a.hosts.end(), h);
      if (at == a.hosts.end()) at = a.hosts.insert(a.hosts.end(), h);
      a.rank_hosts.push_back(static_cast<int>(at - a.hosts.begin()));
    }
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
  backend_ = choose_backend(job_.device);
  if (backend_ == "cuda") {
    gpu_ = choose_gpu();
#ifdef SLUICE_HAVE_CUDA
    const int gpu = gpu_;
    warm_up_ = WorkerThread("cuda-warm-up", [gpu] { warm_up_cuda(gpu); });
#endif
  }
}

int RunContext::mapped_gpu() const {
  if (job_.gpu_map.empty()) return mpi_.local_rank();
  std::vector<int> map;
  std::stringstream ss(job_.gpu_map);
  std::string item;
  while (std::getline(ss, item, ',')) map.push_back(std::atoi(item.c_str()));
  return map[static_cast<std::size_t>(mpi_.local_rank()) % map.size()];
}

int RunContext::choose_gpu() const {
  const int gpus = gpu_count();
  const int g = mapped_gpu();
  if (!job_.gpu_map.empty() && (g < 0 || g >= gpus))
    throw UsageError(str("--gpu-map names GPU ", g, " but ", gpus, " are visible"));
  return job_.gpu_map.empty() ? g % gpus : g;
}

void RunContext::build() {
  const auto t0 = Clock::now();
  EngineOptions eo = job_plan_.engine;
  if (backend_ == "cuda") {
    eo.autotune = autotune_for_job(job_.autotune, chunking_.total, mpi_.world_size(), job_.batch_size);
    eo.product_autotune = product_autotune_for_job(job_.autotune, eo.autotune);
    if (job_.autotune == "auto" && mpi_.rank() == 0)
      log_info("--autotune auto: ", autotune_name(eo.autotune), ", products ", autotune_name(*eo.product_autotune), " (",
               chunking_.total, " samples over ", mpi_.world_size(), " rank(s) at batch ", job_.batch_size, "; full from ",
               kAutotuneFullBatches, " batches a rank)");
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
  build_engines(eo);
  if (source_->text()) {
    // Every rank tokenizes its own passages, into the planes the prepared graph names.
    TextInputOptions to;
    to.tokenizer = text::Tokenizer::load(job_plan_.tokenizer);
    to.planes = graph_.input_planes;
    to.length = graph_.inputs.at(0).shape.at(2);
    to.prompt = job_plan_.prompt;
    to.pad_id = to.tokenizer->pad_id().value_or(0);
    if (!buckets_.empty()) {
      to.buckets = plan_token_buckets(to.length, job_.batch_size, job_plan_.max_tokens);
      SLUICE_CHECK(to.buckets.lengths.size() == buckets_.size(), "token buckets: ", to.buckets.lengths.size(), " planned, ",
                   buckets_.size(), " prepared");
      for (std::size_t b = 0; b < buckets_.size(); ++b)
        SLUICE_CHECK(to.buckets.lengths[b] == buckets_[b].length && to.buckets.caps[b] == buckets_[b].cap,
                     "token bucket ", b, " planned otherwise than prepared");
    }
    input_ = make_text_input(*source_, job_.batch_size, to);
    if (mpi_.rank() == 0) log_info("text: ", input_->describe());
  } else if (source_->encoded()) {
    // Every rank resolves the same spec from the prepared graph's input [B, 3, H, W].
    const PreprocessSpec spec = job_plan_.image_spec(graph_);
    preprocess_ = spec;
    input_ = make_image_input(*source_, spec, job_.batch_size, *device_, job_plan_.image_input);
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
  if (file_ && job_.export_format != "none") {
    // --export: the committed rows' files written from the writer side (export/live_export.h).
    std::vector<std::string> names, keys;
    for (const auto& sp : specs_) names.push_back(sp.name);
    const std::string exported = live_export_source(job_.export_format, names);
    if (mpi_.rank() == 0)
      for (int64_t i = 0; i < chunking_.total; ++i) keys.push_back(source_->key(i));
    const LiveExportOptions eo = live_export_options();
    open_live_export_dir(eo, keys);
    file_ = make_live_export(std::move(file_), eo, specs_, exported, source_->key_bytes());
  }

  // An image input's slots hold file bytes (or decoded pixels), a tensor input's one batch of input.
  const std::size_t in_slot_bytes = input_ ? input_->slot_bytes() : graph_.inputs[0].bytes();
  std::size_t out_row_bytes = 0;
  for (const auto& s : specs_) out_row_bytes += s.row_bytes();
  job_plan_.check_host_slots(in_slot_bytes, out_row_bytes, mpi_.local_size());
  allocating(job_plan_.slots_text(in_slot_bytes, out_row_bytes), [&] {
    if (!input_) input_ = make_tensor_input(*source_, job_.batch_size, engine_->input().bytes(), job_plan_.on_nan);
    if (!bucket_engines_.empty()) {
      std::vector<Engine*> engines;
      for (auto& e : bucket_engines_) engines.push_back(e.get());
      pipeline_ = std::make_unique<Pipeline>(*device_, engines, job_.batch_size, *source_, input_.get(), file_.get(),
                                             job_plan_.pipeline);
    } else {
      pipeline_ = std::make_unique<Pipeline>(*device_, *engine_, *source_, input_.get(), file_.get(), job_plan_.pipeline);
    }
  });
  t_setup_ += seconds_since(t0);
  log_debug("engine: ", (engine_ ? *engine_ : *bucket_engines_.at(0)).describe());
}

// The engine for the job's batch; or, cut by length, one per bucket and none at the full batch and
// length (whose activations, B x L tokens, are what cutting avoids).  Every bucket engine is made
// here, at start-up, rather than at its bucket's first piece: its memory is then found missing
// before the run starts, not in the middle of it, and the steady state allocates nothing; the set-up
// parts name what it cost.
void RunContext::build_engines(const EngineOptions& eo) {
  auto make = [&](const Graph& g, int64_t batch) {
    std::unique_ptr<Engine> e;
    allocating(str("the ", backend_ == "cuda" ? "GPU" : "CPU", " engine for --batch-size ", batch,
                   " (the model's tensors for one batch of ", shape_str(g.inputs[0].shape), ")"),
               [&] {
                 try {
                   const auto t_engine = Clock::now();
                   e = create_engine(backend_, g, eo);
                   const EngineSetupTimes t = e->setup_times();
                   setup_parts_.autotune_s += t.autotune_s;
                   setup_parts_.capture_s += t.capture_s;
                   setup_parts_.algos_measured += t.algos_measured;
                   setup_parts_.algos_cached += t.algos_cached;
                   setup_parts_.engine_build_s += std::max(0.0, seconds_since(t_engine) - t.autotune_s - t.capture_s);
                 } catch (const Error& x) {  // the engines' own "cannot allocate N bytes"
                   throw Error(str(x.what(), " (for --batch-size ", batch, ": the model's tensors for one batch of ",
                                   shape_str(g.inputs[0].shape), ")"),
                               x.exit_code(),
                               buckets_.empty() ? "the engine's memory grows with --batch-size: try a smaller one"
                                                : "the bucket engines' memory grows with --max-tokens-per-batch: try a smaller one");
                 }
               });
    return e;
  };
  if (backend_ == "cuda") setup_parts_.autotune = autotune_name(eo.autotune);
  if (buckets_.empty()) {
    engine_ = make(graph_, job_.batch_size);
    return;
  }
  for (BucketGraph& b : buckets_) {
    LentConstants lent(graph_, b);
    bucket_engines_.push_back(make(b.graph, b.cap));
    if (!buckets_text_.empty()) buckets_text_ += " ";
    buckets_text_ += str(b.length, "x", b.cap);
  }
  setup_parts_.engines = static_cast<int>(bucket_engines_.size());
  engine_.reset();
  if (mpi_.rank() == 0)
    log_info("--max-tokens-per-batch ", job_plan_.max_tokens, ": ", bucket_engines_.size(),
             " engines, one per length bucket (length x rows: ", buckets_text_, "), made in ",
             setup_parts_.engine_build_s + setup_parts_.autotune_s + setup_parts_.capture_s, " s");
}

void RunContext::export_complete_run() {
  if (job_.export_format == "none" || mpi_.rank() != 0) return;
  LiveExportOptions eo = live_export_options();
  eo.resume = true;  // the files there are this run's (the folder's marker says so)
  open_live_export_dir(eo, {});
  const int64_t n = finish_live_export(eo);
  log_info("export: ", eo.dir, " complete (", n, " file(s) written now)");
}

LiveExportOptions RunContext::live_export_options() const {
  LiveExportOptions o;
  o.format = job_.export_format;
  o.dir = job_.export_dir.empty() ? job_.output + "/export" : job_.export_dir;
  o.run_dir = job_.output;
  o.rank = mpi_.rank();
  o.resume = job_.resume;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.threads = job_.export_threads > 0 ? job_.export_threads : std::max(1, cores / std::max(1, mpi_.local_size()));
  return o;
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

namespace {

// Runs `step`; a failure is left on record (RunContext::note_failure) before it goes on up, so the
// attempt reads as failed even when no later attempt comes to settle it.
template <typename F>
auto noting_failure(const RunContext& ctx, F&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const std::exception& e) {
    ctx.note_failure(error_text(e));
    throw;
  }
}

}  // namespace

bool RunContext::drain() {
  return noting_failure(*this, [&] { return drain_now(); });
}

void RunContext::report() {
  noting_failure(*this, [&] { report_now(); });
}

bool RunContext::drain_now() {
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

void RunContext::report_now() {
  const bool complete_attempt = complete_;

  RankReport me;
  me.rank = mpi_.rank();
  me.host = mpi_.host();
  me.device = device_->describe();
  me.engine = (engine_ ? *engine_ : *bucket_engines_.at(0)).describe();
  if (pipeline_) {
    const Pipeline::TokenCounts t = pipeline_->token_counts();
    me.tokens_real = t.real;
    me.tokens_computed = t.computed;
    for (const auto& b : t.buckets) me.buckets.push_back({b.length, b.cap, b.pieces, b.rows});
  }
  me.setup_s = t_setup_;
  me.setup = setup_parts_;
  me.stats = stats_;
  me.reader_threads = job_.reader_threads;
  me.writer_threads = job_.writer_threads;
  me.start_unix = pipeline_start_unix_;
  me.local_rank = mpi_.local_rank();
  me.local_size = mpi_.local_size();
  // The GPU this rank drives; on the CPU backend the one the map gives its node-local rank.
  me.gpu = backend_ == "cuda" ? gpu_ : mapped_gpu();
  me.clock_offset_s = clock_offset();
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
  r.batch_note = graph_.batch_note;
  r.max_tokens_per_batch = buckets_.empty() ? 0 : job_plan_.max_tokens;
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
    if (job_.export_format != "none") {
      // What the run did not get to export (rows committed before a kill), and a table format's table.
      const auto t_export = Clock::now();
      const LiveExportOptions eo = live_export_options();
      const int64_t late = finish_live_export(eo);
      log_info("export: ", eo.dir, " complete (", job_.export_format,
               job_.export_format == "classes" ? ", classes.csv" : str("; ", late, " file(s) written at the end"), ", ",
               seconds_since(t_export), " s)");
    }
    int64_t runs = 0;
    for (const RankFileInfo& f : infos) runs += static_cast<int64_t>(f.chunks.size());
    log_info("outputs.h5: ", runs, " mapping(s) per dataset over ", infos.size(), " rank file(s); ledgers and outputs.h5 in ",
             seconds_since(t_end), " s; ", work_->steals(), " steal(s)");
  }
  if ((job_.sink == "hdf5" || job_.output_given) && !plan_.keep_report) write_report_json(r, job_.output + "/report.json");
  std::fputs(format_report_table(r).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace sluice
