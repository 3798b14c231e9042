// The CPU engine: runs a prepared graph in float32 NCHW on the host.  It is the reference every
// GPU kernel is checked against, so it favours exactness and determinism over speed: every op's
// work is split into tasks by shape alone (see thread_pool.h and gemm.h), and nothing about a
// sample's computation depends on the other samples of its batch.
//
// Everything is allocated when the engine is built: one arena for the intermediate tensors (offsets
// from memory_plan), one scratch buffer shared by the kernels (they run one after the other), and
// io_sets input/output buffers.  forward() only reads precomputed pointer tables.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"
#include "engine/cpu/memory_plan.h"
#include "engine/cpu/peaks.h"
#include "engine/engine.h"

namespace sluice {
namespace cpu {
namespace {

// This machine's memory in bytes (0 when unknown).
std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

// 64-byte aligned, zero-filled host memory.  A request beyond the machine's memory is refused up
// front: Linux would grant it lazily and the zero fill would page until the OOM killer ends the
// rank (a crafted model's padded tensors can ask for that much).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const std::size_t machine = physical_memory();
    if (machine > 0 && bytes > machine)
      throw Error(str("cpu engine: cannot allocate ", bytes, " bytes: more than this machine's ", machine, " bytes of memory"));
    ptr_ = std::aligned_alloc(64, align64(bytes));
    if (!ptr_) throw Error(str("cpu engine: cannot allocate ", bytes, " bytes"));
    std::memset(ptr_, 0, align64(bytes));
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr_); }
  char* data() const { return static_cast<char*>(ptr_); }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Where a tensor lives: fixed (constant, arena) or per io set (graph input, graph output).
struct Place {
  enum Kind { None, Fixed, Input, Output } kind = None;
  char* ptr = nullptr;  // Fixed
  int output = -1;      // Output
};

class CpuEngine final : public Engine {
 public:
  CpuEngine(const Graph& g, const EngineOptions& opt) : pool_(opt.threads) {
    use_single_threaded_blas();
    if (g.inputs.size() != 1) throw InputError(str("cpu engine: the graph must have exactly one input, it has ", g.inputs.size()));
    input_ = g.inputs[0];
    outputs_ = g.outputs;
    if (outputs_.empty()) throw InputError("cpu engine: the graph has no outputs");
    check_static(input_);
    for (auto& o : outputs_) {
      if (const ValueInfo* v = g.value(o.name)) {  // the inferred type and shape; the name stays the output's
        o.dtype = v->dtype;
        o.shape = v->shape;
      }
      check_static(o);
    }
    sets_ = std::max(1, opt.io_sets);

    // Constants: the engine keeps its own copy (the caller's graph may go away).
    std::unordered_set<std::string> read;
    for (const auto& node : g.nodes)
      for (const auto& in : node.inputs)
        if (!in.empty()) read.insert(in);
    for (const auto& o : outputs_) read.insert(o.name);
    for (const auto& kv : g.constants)
      if (read.count(kv.first)) constants_.emplace(kv.first, kv.second);

    // The arena.
    plan_ = plan_memory(intermediate_lifetimes(g));
    arena_ = AlignedBuffer(plan_.arena_bytes);
    std::unordered_map<std::string, Place> where;
    where[input_.name] = {Place::Input, nullptr, -1};
    for (auto& kv : constants_) where[kv.first] = {Place::Fixed, reinterpret_cast<char*>(kv.second.bytes.data()), -1};
    for (const auto& t : plan_.tensors) where[t.name] = {Place::Fixed, arena_.data() + t.offset, -1};
    for (std::size_t i = 0; i < outputs_.size(); ++i)
      if (!where.count(outputs_[i].name) || where[outputs_[i].name].kind == Place::None)
        if (g.producer(outputs_[i].name) >= 0) where[outputs_[i].name] = {Place::Output, nullptr, static_cast<int>(i)};

    // Kernels, in graph order (topological after prepare_graph).
    std::unordered_set<std::string> ready;
    ready.insert(input_.name);
    for (const auto& kv : constants_) ready.insert(kv.first);
    std::size_t scratch = 0;
    steps_.reserve(g.nodes.size());
    for (const Node& node : g.nodes) {
      KernelInit init{node, g.opset, {}, {}, {}};
      Step step;
      for (const auto& in : node.inputs) {
        if (in.empty()) {
          init.in.push_back(nullptr);
          init.cin.push_back(nullptr);
          step.in.push_back({});
          continue;
        }
        if (!ready.count(in)) throw InputError(str("cpu engine: ", node.describe(), " reads '", in, "' before it is computed"));
        init.in.push_back(info_of(g, in));
        auto c = constants_.find(in);
        init.cin.push_back(c == constants_.end() ? nullptr : &c->second);
        step.in.push_back(where.at(in));
      }
      for (std::size_t k = 0; k < node.outputs.size(); ++k) {
        const std::string& out = node.outputs[k];
        auto it = where.find(out);
        if (out.empty() || it == where.end()) {  // an optional output nobody reads
          init.out.push_back(nullptr);
          step.out.push_back({});
          continue;
        }
        init.out.push_back(info_of(g, out));
        step.out.push_back(it->second);
        ready.insert(out);
      }
      step.kernel = make_kernel(init);
      step.cost = step_cost(node, init);
      scratch = std::max(scratch, step.kernel->scratch_bytes(pool_.size()));
      steps_.push_back(std::move(step));
    }
    scratch_ = AlignedBuffer(scratch);

    // Graph outputs that no node writes into their buffer: inputs, constants, repeated names.
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      const Place& p = where.count(outputs_[i].name) ? where.at(outputs_[i].name) : Place{};
      if (p.kind == Place::Output && p.output == static_cast<int>(i)) continue;
      if (p.kind == Place::None) throw InputError(str("cpu engine: graph output '", outputs_[i].name, "' is never computed"));
      copies_.push_back({p, static_cast<int>(i)});
    }

    // The io sets and, per set, every node's pointer table.
    for (int s = 0; s < sets_; ++s) {
      IoSet set;
      set.input = AlignedBuffer(input_.bytes());
      for (const auto& o : outputs_) set.outputs.emplace_back(o.bytes());
      for (const Step& step : steps_) {
        std::vector<const void*> in;
        std::vector<void*> out;
        for (const Place& p : step.in) in.push_back(resolve_present(p, set));
        for (const Place& p : step.out) out.push_back(resolve_present(p, set));
        set.in_ptrs.push_back(std::move(in));
        set.out_ptrs.push_back(std::move(out));
      }
      io_.push_back(std::move(set));
    }
    log_debug("cpu engine: ", steps_.size(), " nodes, arena ", plan_.arena_bytes, " bytes (tensors ", plan_.total_bytes,
              "), scratch ", scratch, " bytes, ", pool_.size(), " threads");
  }

  std::string describe() const override { return str("cpu (", pool_.size(), pool_.size() == 1 ? " thread)" : " threads)"); }
  const ValueInfo& input() const override { return input_; }
  const std::vector<ValueInfo>& outputs() const override { return outputs_; }
  int io_sets() const override { return sets_; }

  void* input_buffer(int set) override { return io_.at(check_set(set)).input.data(); }
  void* output_buffer(int set, int output) override {
    auto& outs = io_.at(check_set(set)).outputs;
    SLUICE_CHECK(output >= 0 && output < static_cast<int>(outs.size()), "output ", output, " of ", outs.size());
    return outs[output].data();
  }

  void forward(int set, void*) override {
    IoSet& io = io_.at(check_set(set));
    // The arena and scratch are shared by the sets: one forward at a time.
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const KernelArgs args{io.in_ptrs[i].data(), io.out_ptrs[i].data(), scratch_.data(), pool_};
      steps_[i].kernel->run(args);
    }
    for (const auto& c : copies_)
      if (outputs_[c.output].bytes()) std::memcpy(io.outputs[c.output].data(), resolve(c.from, io), outputs_[c.output].bytes());
  }

  const MemoryPlan& plan() const { return plan_; }

  // Each kernel timed with the host clock around its run, over `replays` passes after a warm-up.
  EngineProfile profile(const ProfileOptions& o) override {
    using Clock = std::chrono::steady_clock;
    const int replays = std::max(1, o.replays);
    EngineProfile p;
    p.engine = describe();
    p.precision = "fp32";
    p.replays = replays;
    if (o.peaks) p.peaks = measure_host_peaks(pool_);
    IoSet& io = io_.at(0);
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> total(steps_.size(), 0.0), passes;
    for (int r = 0; r <= replays; ++r) {   // pass 0 warms up
      const auto pass0 = Clock::now();
      for (std::size_t i = 0; i < steps_.size(); ++i) {
        const KernelArgs args{io.in_ptrs[i].data(), io.out_ptrs[i].data(), scratch_.data(), pool_};
        const auto t0 = Clock::now();
        steps_[i].kernel->run(args);
        if (r > 0) total[i] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
      if (r > 0) passes.push_back(std::chrono::duration<double, std::milli>(Clock::now() - pass0).count());
    }
    std::sort(passes.begin(), passes.end());
    p.forward_ms = passes[passes.size() / 2];
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      StepProfile sp = steps_[i].cost;
      sp.ms = total[i] / replays;
      p.steps_ms += sp.ms;
      p.steps.push_back(std::move(sp));
    }
    return p;
  }

 private:
  struct Step {
    std::unique_ptr<Kernel> kernel;
    std::vector<Place> in, out;
    StepProfile cost;   // name, kind, bytes and FLOPs (no time)
  };

  // Every distinct tensor the node reads or writes counted once, at its size (float32 here).
  static StepProfile step_cost(const Node& node, const KernelInit& init) {
    StepProfile c;
    c.name = node.name;
    c.kind = node.op;
    std::vector<Shape> in, out;
    std::unordered_set<std::string> seen;
    for (std::size_t i = 0; i < init.in.size(); ++i) {
      in.push_back(init.in[i] ? init.in[i]->shape : Shape{});
      if (init.in[i] && seen.insert(node.inputs[i]).second) c.bytes += static_cast<double>(init.in[i]->bytes());
    }
    for (std::size_t i = 0; i < init.out.size(); ++i) {
      out.push_back(init.out[i] ? init.out[i]->shape : Shape{});
      if (init.out[i] && seen.insert(node.outputs[i]).second) c.bytes += static_cast<double>(init.out[i]->bytes());
    }
    c.flops = node_flops(node, in, out);
    return c;
  }
  struct IoSet {
    AlignedBuffer input;
    std::vector<AlignedBuffer> outputs;
    std::vector<std::vector<const void*>> in_ptrs;
    std::vector<std::vector<void*>> out_ptrs;
  };
  struct Copy {
    Place from;
    int output;
  };

  static void check_static(const ValueInfo& v) {
    for (int64_t d : v.shape)
      if (d < 0) throw InputError(str("cpu engine: tensor '", v.name, "' has a dynamic shape ", shape_str(v.shape)));
    if (dtype_size(v.dtype) == 0) throw InputError(str("cpu engine: tensor '", v.name, "' has no element type"));
  }

  const ValueInfo* info_of(const Graph& g, const std::string& name) {
    if (name == input_.name) return &input_;
    if (const ValueInfo* v = g.value(name)) {
      check_static(*v);
      return v;
    }
    auto c = constants_.find(name);
    if (c != constants_.end()) {  // a constant without a ValueInfo: describe it from its tensor
      auto& v = const_infos_[name];
      v.name = name;
      v.dtype = c->second.dtype;
      v.shape = c->second.shape;
      return &v;
    }
    throw InputError(str("cpu engine: no type and shape for tensor '", name, "'"));
  }

  // An empty tensor has no buffer, yet kernels do pointer arithmetic on its address (reading
  // nothing); null would make that undefined, so it gets the address of a small zeroed block.
  static char* resolve_present(const Place& p, IoSet& set) {
    alignas(64) static char empty_block[64] = {};
    char* ptr = resolve(p, set);
    return ptr || p.kind == Place::None ? ptr : empty_block;
  }

  static char* resolve(const Place& p, IoSet& set) {
    switch (p.kind) {
      case Place::Fixed: return p.ptr;
      case Place::Input: return set.input.data();
      case Place::Output: return set.outputs[p.output].data();
      default: return nullptr;
    }
  }

  int check_set(int set) const {
    SLUICE_CHECK(set >= 0 && set < sets_, "io set ", set, " of ", sets_);
    return set;
  }

  ThreadPool pool_;
  ValueInfo input_;
  std::vector<ValueInfo> outputs_;
  int sets_ = 1;
  std::unordered_map<std::string, Tensor> constants_;
  std::unordered_map<std::string, ValueInfo> const_infos_;
  MemoryPlan plan_;
  AlignedBuffer arena_, scratch_;
  std::vector<Step> steps_;
  std::vector<Copy> copies_;
  std::vector<IoSet> io_;
  std::mutex mu_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Engine> create_cpu_engine(const Graph& graph, const EngineOptions& options) {
  return std::make_unique<cpu::CpuEngine>(graph, options);
}

}  // namespace sluice
