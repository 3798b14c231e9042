#include "app/run_context.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "app/ledgers.h"
#include "core/log.h"
#include "core/timer.h"
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

}  // namespace

RunContext::RunContext(const JobConfig& job, std::string job_toml, const MpiContext& mpi)
    : job_(job), job_toml_(std::move(job_toml)), mpi_(mpi) {
  started_ = iso8601(unix_time_now());
}

RunContext::~RunContext() = default;

void RunContext::open_source() {
  const auto t0 = Clock::now();
  if (job_.input == "synthetic") {
    source_ = make_synthetic_source(job_.samples, job_.sample_shape, dtype_from_name(job_.input_dtype), job_.seed);
  } else {
    source_ = open_hdf5_source(job_.input, job_.input_dataset);
  }
  chunking_.total = source_->size();
  chunking_.batch = job_.batch_size;
  chunking_.chunk_samples = job_.batch_size * job_.chunk_batches;
  t_setup_ += seconds_since(t0);
}

void RunContext::load_model() {
  if (mpi_.rank() != 0) return;  // the others receive the prepared model in share_model()
  const auto t0 = Clock::now();
  if (!file_readable(job_.model)) throw InputError(str("cannot read the model file ", job_.model));
  Graph model = load_onnx(job_.model);
  model_sha256_ = sha256_file(job_.model);
  t_model_load_ = seconds_since(t0);

  PrepareOptions po;
  po.batch_size = job_.batch_size;
  po.sample_shape = source_->sample_shape();
  po.input_dtype = source_->dtype();
  po.normalize = job_.scale != 1.0f || !job_.mean.empty() || !job_.stddev.empty();
  po.scale = job_.scale;
  po.mean = job_.mean;
  po.stddev = job_.stddev;
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
    } else if (name == "topk") {
      s.kind = OutputSpec::Kind::TopK;
      s.dtype = float_out;
      s.top_k = job_.top_k;
    }
    po.outputs.push_back(s);
  }
  graph_ = prepare_graph(std::move(model), po);
  t_setup_ += seconds_since(t0);
}

void RunContext::make_specs() {
  specs_.clear();
  for (const ValueInfo& o : graph_.outputs) {
    const ValueInfo* v = graph_.value(o.name);
    const ValueInfo& info = v ? *v : o;
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
  t_setup_ += seconds_since(t0);
}

void RunContext::plan() {
  std::string serialized;
  if (mpi_.rank() == 0) serialized = plan_output_dir(job_, chunking_, model_sha256_, specs_).serialize();
  plan_ = RunPlan::deserialize(mpi_.broadcast_string(serialized));
  // --resume: every rank recovers and reads its share of the rank files (app/ledgers.h).
  if (!plan_.resume_files.empty()) plan_resume(mpi_, job_, chunking_, model_sha256_, specs_, plan_);
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
  engine_ = create_engine(backend_, graph_, eo);

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
  meta.attempt = plan_.attempt;
  meta.start_time = unix_time_now();
  meta.fsync_commits = job_.fsync;
  if (job_.sink == "hdf5") {
    const std::string path = rank_file_path(job_.output, mpi_.rank());
    const bool exists = access(path.c_str(), F_OK) == 0;
    file_ = open_rank_file(path, specs_, job_.batch_size, meta, exists);
  }

  PipelineOptions po;
  po.prefetch = job_.prefetch;
  po.egress_buffers = job_.egress_buffers;
  po.reader_threads = job_.reader_threads;
  po.writer_threads = job_.writer_threads;
  po.commit_batches = job_.chunk_batches;
  for (std::size_t i = 0; i < job_.throttle_ranks.size() && !job_.throttle_ms.empty(); ++i)
    if (job_.throttle_ranks[i] == mpi_.rank()) po.throttle_ms = job_.throttle_ms[std::min(i, job_.throttle_ms.size() - 1)];
  pipeline_ = std::make_unique<Pipeline>(*device_, *engine_, *source_, file_.get(), po);
  work_ = make_work_distributor(job_.sharding == "static" ? Sharding::Static : Sharding::Dynamic, mpi_, chunking_,
                                plan_.pending);
  t_setup_ += seconds_since(t0);
  log_debug("engine: ", engine_->describe());
}

void RunContext::run() {
  work_->start();  // collective: every rank built its distributor (build() was agreed)
  stats_ = pipeline_->run(*work_);
}

void RunContext::stop() {
  stopped_ = true;
  if (pipeline_) pipeline_->stop();
  if (work_) work_->request_stop();
}

bool RunContext::drain() {
  if (file_) file_->close();
  complete_ = work_->finish();
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
  const std::vector<std::string> all = mpi_.gather_strings(me.to_json().dump());
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
  for (const auto& s : all) r.ranks.push_back(RankReport::from_json(nlohmann::json::parse(s)));

  if (complete_attempt && file_) {
    const Coverage cov = check_coverage(infos, chunking_.total);
    if (!cov.complete())
      throw Error(str("the rank files in ", job_.output, " do not cover every sample once (", cov.present, " of ",
                      cov.total, " present, ", cov.gaps.size(), " gap(s), ", cov.duplicates.size(), " duplicate(s))"));
    write_virtual_outputs(job_.output, infos, chunking_.total);
    int64_t runs = 0;
    for (const RankFileInfo& f : infos) runs += static_cast<int64_t>(f.chunks.size());
    log_info("outputs.h5: ", runs, " mapping(s) per dataset over ", infos.size(), " rank file(s); ledgers and outputs.h5 in ",
             seconds_since(t_end), " s; ", work_->steals(), " steal(s)");
  }
  write_report_json(r, job_.output + "/report.json");
  std::fputs(format_report_table(r).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace sluice
