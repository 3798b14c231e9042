// The CUDA engine: lowers a prepared graph into steps once, plans the activation memory, measures
// convolution algorithms, and captures each io set's forward pass as a CUDA graph that forward()
// replays.  Everything that allocates, measures or compiles happens in the constructor; forward()
// only enqueues.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/cuda/cuda_raii.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "core/timer.h"
#include "engine/cuda/algo_cache.h"
#include "engine/cuda/autotune.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/memory_plan.h"
#include "engine/cuda/peaks.h"

namespace sluice::cuda {
namespace {

constexpr std::size_t kAlign = 256;
// cuDNN's fastest fp16/bf16 tensor-core algorithms showed up only with a large workspace.
constexpr std::size_t kDefaultWorkspace = 256ull << 20;

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

std::string gib(std::size_t bytes) { return str(static_cast<double>(bytes) / (1ull << 30), " GiB"); }

class CudaEngine final : public Engine {
 public:
  CudaEngine(const sluice::Graph& graph, const EngineOptions& options)
      : options_(options), cache_(options.cache_dir) {
    if (options.io_sets < 1) throw UsageError(str("cuda engine: io_sets must be at least 1, not ", options.io_sets));
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (options.device < 0 || options.device >= count)
      throw UsageError(str("cuda engine: device ", options.device, " does not exist (", count, " GPUs visible)"));
    DeviceScope scope(options.device);
    NvtxRange range("engine build");

    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
    const std::size_t v = cudnnGetVersion();
    const std::string cudnn_version = str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
    description_ = str("cuda ", prop.name, " (sm_", prop.major, prop.minor, "), cuDNN ", cudnn_version, ", ",
                       precision_name(options.precision));

    if (graph.inputs.size() != 1) throw InputError(str("cuda engine: the graph must have one input, not ", graph.inputs.size()));
    input_ = graph.inputs[0];
    for (const auto& o : graph.outputs) {
      const ValueInfo* v = graph.value(o.name);
      outputs_.push_back(v ? *v : o);
      outputs_.back().name = o.name;
    }

    cudnn_ = make_cudnn();
    cublas_ = make_cublas();
    cublaslt_ = make_cublaslt();
    stream_ = make_stream();
    done_ = make_event();

    // ---- lower the graph into steps ----
    Builder b(graph, options.precision);
    b.lower_all();
    slots_ = std::move(b.slots);
    steps_ = std::move(b.steps);
    stats_.steps = static_cast<int>(steps_.size());

    // ---- memory: arena by the plan, weights, io sets, workspace ----
    std::vector<PlanItem> items;
    std::vector<int> planned;   // slot of each plan item
    plan_arena(b.step_slots, &items, &planned);
    const MemoryPlan plan = plan_memory(items, kAlign);
    for (std::size_t i = 0; i < planned.size(); ++i) slots_[static_cast<std::size_t>(planned[i])].offset = plan.offsets[i];
    stats_.arena_bytes = plan.arena_bytes;
    stats_.naive_bytes = plan.naive_bytes;

    std::vector<std::size_t> weight_offsets(b.weights.size());
    std::size_t weight_bytes = 0;
    for (std::size_t i = 0; i < b.weights.size(); ++i) {
      weight_offsets[i] = weight_bytes;
      weight_bytes += align_up(b.weights[i].size());
    }
    stats_.weight_bytes = weight_bytes;

    std::size_t io_bytes = align_up(input_.bytes());
    for (const auto& o : outputs_) io_bytes += align_up(o.bytes());
    stats_.io_bytes = io_bytes;

    std::size_t workspace = kDefaultWorkspace;
    for (const auto& s : steps_) workspace = std::max(workspace, s->workspace_bytes());
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::size_t needed = plan.arena_bytes + weight_bytes + io_bytes * static_cast<std::size_t>(options.io_sets);
    if (needed + (64ull << 20) > free_bytes)
      throw Error(str("cuda engine: the model needs ", gib(needed), " of GPU memory at batch ", input_.shape.empty() ? 0 : input_.shape[0],
                      " (activations ", gib(plan.arena_bytes), ", weights ", gib(weight_bytes), ", io sets ",
                      gib(io_bytes * static_cast<std::size_t>(options.io_sets)), ") but only ", gib(free_bytes),
                      " are free on device ", options.device, "; use a smaller batch size"));
    // The workspace only speeds up convolutions: shrink it rather than fail.
    workspace = std::min(workspace, (free_bytes - needed) / 2);
    stats_.workspace_bytes = workspace;

    arena_ = DeviceBuffer(plan.arena_bytes);
    weights_ = DeviceBuffer(weight_bytes);
    workspace_ = DeviceBuffer(workspace);
    for (std::size_t i = 0; i < b.weights.size(); ++i)
      if (!b.weights[i].empty())
        CUDA_CHECK(cudaMemcpy(static_cast<char*>(weights_.get()) + weight_offsets[i], b.weights[i].data(),
                              b.weights[i].size(), cudaMemcpyHostToDevice));
    // Cleared on the engine's own stream, and everything waited for: the weight uploads above run on
    // the legacy default stream (a cudaMemcpy from pageable memory may return before its DMA ends),
    // which orders nothing with the non-blocking streams the engine and the pipeline use.
    for (int s = 0; s < options.io_sets; ++s) {
      io_.emplace_back(io_bytes);
      CUDA_CHECK(cudaMemsetAsync(io_.back().get(), 0, io_bytes, stream_));
    }
    if (plan.arena_bytes) CUDA_CHECK(cudaMemsetAsync(arena_.get(), 0, plan.arena_bytes, stream_));
    CUDA_CHECK(cudaDeviceSynchronize());
    bind(weight_offsets);

    // ---- library set-up, algorithm measurement ----
    bind_stream(stream_);
    CUBLAS_CHECK(cublasSetMathMode(cublas_, options.precision == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
    ctx_.cudnn = cudnn_;
    ctx_.cublas = cublas_;
    ctx_.cublaslt = cublaslt_;
    ctx_.workspace = workspace_.get();
    ctx_.workspace_bytes = workspace;
    ctx_.precision = options.precision;
    ctx_.compute = b.compute;
    ctx_.deterministic = options.deterministic;
    ctx_.autotune = options.autotune;
    ctx_.product_autotune = options.product_autotune.value_or(options.autotune);
    {
      // Quick autotuning leaves the smallest layers to cuDNN's heuristics (autotune.h): every step's
      // FLOPs count in the total, so the share is of the whole forward pass.
      std::vector<double> flops;
      for (const auto& s : steps_) flops.push_back(s->flops);
      ctx_.negligible_flops = negligible_flops(flops, kNegligibleShare);
    }
    ctx_.cache = &cache_;
    AlgoCacheDevice key;
    key.gpu = prop.name;
    key.sm_major = prop.major;
    key.sm_minor = prop.minor;
    CUDA_CHECK(cudaDriverGetVersion(&key.driver));
    key.cudnn = cudnn_version;
    key.precision = precision_name(options.precision);
    key.deterministic = options.deterministic;
    ctx_.cache_prefix = algo_cache_prefix(key);
    ctx_.stats = &stats_;
    {
      NvtxRange r("engine autotune");
      const auto t0 = Clock::now();
      for (auto& s : steps_) s->prepare(ctx_, bindings_[0]);
      cache_.save();
      times_.autotune_s = seconds_since(t0);
    }

    // ---- a first run per set (loads the kernels' modules), then capture ----
    const auto t_capture = Clock::now();
    for (int s = 0; s < options.io_sets; ++s) run_steps(s, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (options.cuda_graphs) {
      NvtxRange r("engine capture");
      for (int s = 0; s < options.io_sets; ++s) capture(s);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      stats_.graphs_captured = true;
    }
    times_.capture_s = seconds_since(t_capture);
    times_.algos_measured = stats_.algos_measured;
    times_.algos_cached = stats_.algos_cached;
    log_debug("cuda engine: ", steps_.size(), " steps, activations ", gib(plan.arena_bytes), " (", gib(plan.naive_bytes),
              " unplanned), weights ", gib(weight_bytes), ", workspace ", gib(workspace), ", algorithms chosen (",
              autotune_name(options.autotune), ") ", stats_.algos_measured, " (", stats_.algos_untimed, " untimed, ",
              stats_.candidates_timed, " candidates timed), cached ", stats_.algos_cached, ", convolutions as cuDNN graphs ",
              stats_.graph_convolutions, ", as cuBLASLt products ", stats_.gemm_convolutions, ", cuBLASLt products timed ", stats_.products_measured, ", cached ",
              stats_.products_cached);
  }

  ~CudaEngine() override {
    // Replays may still run on the caller's stream; the buffers must outlive them.
    (void)cudaSetDevice(options_.device);
    if (ran_) (void)cudaEventSynchronize(done_);
    (void)cudaStreamSynchronize(stream_);
  }

  std::string describe() const override { return description_; }
  const ValueInfo& input() const override { return input_; }
  const std::vector<ValueInfo>& outputs() const override { return outputs_; }
  int io_sets() const override { return options_.io_sets; }
  void* input_buffer(int set) override { return in_ptr_.at(check_set(set)); }
  void* output_buffer(int set, int output) override {
    const auto& outs = out_ptr_.at(check_set(set));
    if (output < 0 || static_cast<std::size_t>(output) >= outs.size())
      SLUICE_THROW("cuda engine: output ", output, " does not exist (", outs.size(), " outputs)");
    return outs[static_cast<std::size_t>(output)];
  }

  void forward(int set, void* stream) override {
    check_set(set);
    NvtxRange range("engine forward", Stage::Compute);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    // All sets share the activation arena: a pass enqueued on another stream than the previous
    // one must wait for it (on the device, not the host).
    if (ran_ && s != last_stream_) CUDA_CHECK(cudaStreamWaitEvent(s, done_, 0));
    if (!execs_.empty()) {
      CUDA_CHECK(cudaGraphLaunch(execs_[static_cast<std::size_t>(set)], s));
    } else {
      bind_stream(s);
      run_steps(set, s);
    }
    CUDA_CHECK(cudaEventRecord(done_, s));
    last_stream_ = s;
    ran_ = true;
  }

  const EngineStats& stats() const { return stats_; }
  EngineSetupTimes setup_times() const override { return times_; }

  // Steps run eagerly with an event after each, `replays` times; the whole pass as forward() runs
  // it (the captured graph) timed separately.  Everything on the engine's own stream, then idle.
  EngineProfile profile(const ProfileOptions& o) override {
    DeviceScope scope(options_.device);
    const int replays = std::max(1, o.replays);
    if (ran_) CUDA_CHECK(cudaEventSynchronize(done_));
    bind_stream(stream_);
    EngineProfile p;
    p.engine = description_;
    p.precision = precision_name(options_.precision);
    p.replays = replays;
    if (o.peaks) p.peaks = measure_device_peaks(cublas_, stream_, options_.precision);

    const Bindings& bd = bindings_[0];
    std::vector<Event> ev;
    for (std::size_t i = 0; i <= steps_.size(); ++i) ev.push_back(make_event(true));
    std::vector<double> total(steps_.size(), 0.0);
    run_steps(0, stream_);   // warm-up
    for (int r = 0; r < replays; ++r) {
      CUDA_CHECK(cudaEventRecord(ev[0], stream_));
      for (std::size_t i = 0; i < steps_.size(); ++i) {
        steps_[i]->run(ctx_, bd, stream_);
        CUDA_CHECK(cudaEventRecord(ev[i + 1], stream_));
      }
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (std::size_t i = 0; i < steps_.size(); ++i) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
        total[i] += ms;
      }
    }
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      StepProfile sp;
      sp.name = steps_[i]->label();
      sp.kind = steps_[i]->kind;
      sp.bytes = steps_[i]->bytes;
      sp.flops = steps_[i]->flops;
      sp.ms = total[i] / replays;
      p.steps_ms += sp.ms;
      p.steps.push_back(std::move(sp));
    }

    std::vector<float> passes;
    for (int r = 0; r <= replays; ++r) {
      CUDA_CHECK(cudaEventRecord(ev[0], stream_));
      if (!execs_.empty()) CUDA_CHECK(cudaGraphLaunch(execs_[0], stream_));
      else run_steps(0, stream_);
      CUDA_CHECK(cudaEventRecord(ev[1], stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      if (r > 0) passes.push_back(ms);   // the first pass warms up
    }
    std::sort(passes.begin(), passes.end());
    p.forward_ms = passes[passes.size() / 2];
    last_stream_ = stream_;
    CUDA_CHECK(cudaEventRecord(done_, stream_));
    ran_ = true;
    return p;
  }

 private:
  int check_set(int set) const {
    if (set < 0 || set >= options_.io_sets)
      SLUICE_THROW("cuda engine: io set ", set, " does not exist (", options_.io_sets, " sets)");
    return set;
  }

  // Lifetimes of arena slots: from the first step touching them to the last; aliases extend
  // their root's lifetime.
  void plan_arena(const std::vector<std::vector<int>>& uses, std::vector<PlanItem>* items, std::vector<int>* planned) {
    std::vector<int> first(slots_.size(), -1), last(slots_.size(), -1);
    for (std::size_t step = 0; step < uses.size(); ++step)
      for (int id : uses[step]) {
        if (id < 0) continue;
        const TensorSlot& sl = slots_[static_cast<std::size_t>(id)];
        const std::size_t root = static_cast<std::size_t>(sl.where == Where::Alias ? sl.index : id);
        if (first[root] < 0) first[root] = static_cast<int>(step);
        last[root] = static_cast<int>(step);
      }
    for (std::size_t id = 0; id < slots_.size(); ++id) {
      if (slots_[id].where != Where::Arena || first[id] < 0) continue;
      items->push_back(PlanItem{slots_[id].bytes, first[id], last[id]});
      planned->push_back(static_cast<int>(id));
    }
  }

  void bind(const std::vector<std::size_t>& weight_offsets) {
    const std::size_t n_out = outputs_.size();
    for (int s = 0; s < options_.io_sets; ++s) {
      char* base = static_cast<char*>(io_[static_cast<std::size_t>(s)].get());
      in_ptr_.push_back(base);
      std::vector<void*> outs;
      std::size_t off = align_up(input_.bytes());
      for (std::size_t k = 0; k < n_out; ++k) {
        outs.push_back(base + off);
        off += align_up(outputs_[k].bytes());
      }
      out_ptr_.push_back(outs);

      Bindings bd;
      bd.ptr.assign(slots_.size(), nullptr);
      for (std::size_t id = 0; id < slots_.size(); ++id) {
        const TensorSlot& sl = slots_[id];
        switch (sl.where) {
          case Where::Arena: bd.ptr[id] = static_cast<char*>(arena_.get()) + sl.offset; break;
          case Where::Input: bd.ptr[id] = in_ptr_.back(); break;
          case Where::Output: bd.ptr[id] = outs[static_cast<std::size_t>(sl.index)]; break;
          case Where::Constant:
            bd.ptr[id] = static_cast<char*>(weights_.get()) + weight_offsets[static_cast<std::size_t>(sl.index)];
            break;
          case Where::Alias: break;   // below, once every root is bound
        }
      }
      for (std::size_t id = 0; id < slots_.size(); ++id)
        if (slots_[id].where == Where::Alias)
          bd.ptr[id] = static_cast<char*>(bd.ptr[static_cast<std::size_t>(slots_[id].index)]) + slots_[id].offset;
      bindings_.push_back(std::move(bd));
    }
  }

  // Points both libraries at `s`.  cublasSetStream drops a user workspace, so it is set again:
  // otherwise cuBLAS would take one from its pool, possibly in the middle of a capture.
  void bind_stream(cudaStream_t s) {
    CUDNN_CHECK(cudnnSetStream(cudnn_, s));
    CUBLAS_CHECK(cublasSetStream(cublas_, s));
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.get(), workspace_.bytes()));
  }

  void run_steps(int set, cudaStream_t s) {
    const Bindings& bd = bindings_[static_cast<std::size_t>(set)];
    for (auto& step : steps_) step->run(ctx_, bd, s);
  }

  void capture(int set) {
    // cuDNN and cuBLAS enqueue on the stream their handles hold: the capturing one.
    bind_stream(stream_);
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      run_steps(set, stream_);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream_, &broken);
      if (broken) (void)cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    graphs_.emplace_back(g);
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    execs_.emplace_back(exec);
    // Uploading now keeps the first replay from paying for it.
    CUDA_CHECK(cudaGraphUpload(exec, stream_));
  }

  EngineOptions options_;
  std::string description_;
  ValueInfo input_;
  std::vector<ValueInfo> outputs_;
  AlgoCache cache_;
  EngineSetupTimes times_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  CublasLtHandle cublaslt_;
  Stream stream_;
  Event done_;
  std::vector<TensorSlot> slots_;
  std::vector<std::unique_ptr<Step>> steps_;
  DeviceBuffer arena_, weights_, workspace_;
  std::vector<DeviceBuffer> io_;
  std::vector<void*> in_ptr_;
  std::vector<std::vector<void*>> out_ptr_;
  std::vector<Bindings> bindings_;
  Context ctx_;
  std::vector<CudaGraph> graphs_;
  std::vector<CudaGraphExec> execs_;
  cudaStream_t last_stream_ = nullptr;
  bool ran_ = false;
  EngineStats stats_;
};

}  // namespace

const EngineStats* engine_stats(const Engine& e) {
  const auto* c = dynamic_cast<const CudaEngine*>(&e);
  return c ? &c->stats() : nullptr;
}

}  // namespace sluice::cuda

namespace sluice {

std::unique_ptr<Engine> create_cuda_engine(const Graph& graph, const EngineOptions& options) {
  return std::make_unique<cuda::CudaEngine>(graph, options);
}

}  // namespace sluice
