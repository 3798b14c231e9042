#pragma once
// An engine runs a prepared graph (model/prepare.h) on one device for a fixed batch size.
//
// It owns `io_sets` sets of input/output buffers in its device's memory.  The pipeline copies a
// batch into input_buffer(s), calls forward(s, stream), and copies the outputs out of
// output_buffer(s, i).  Several sets let copies of one batch overlap the compute of another; the
// pipeline orders reuse of a set with events.  On the CUDA engine the buffers are device memory and
// forward() only enqueues work (it may replay a captured CUDA graph per set); on the CPU engine the
// buffers are host memory and forward() runs to completion.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/profile.h"
#include "model/graph.h"

namespace sluice {

enum class Precision { FP32, TF32, FP16, BF16 };
const char* precision_name(Precision p);
Precision precision_from_name(const std::string& name);  // throws UsageError

// How the cuda engine chooses convolution algorithms that the algorithm cache does not hold:
// quick times cuDNN's few best-ranked candidates on the real buffers (and takes cuDNN's first choice
// for layers too small to matter), full times every algorithm cuDNN has (cudnnFind: seconds per
// model, for long jobs that want the last per cent), off times nothing and takes cuDNN's first
// choice everywhere.
enum class Autotune { Quick, Full, Off };
const char* autotune_name(Autotune a);
Autotune autotune_from_name(const std::string& name);   // throws UsageError

struct EngineOptions {
  Precision precision = Precision::FP32;
  int device = 0;              // CUDA device ordinal (cuda engine)
  int io_sets = 2;             // input/output buffer sets
  std::string cache_dir;       // where the cuda engine keeps its algorithm cache ("" = none)
  bool cuda_graphs = true;     // capture forward() once per set and replay it
  bool deterministic = false;  // skip nondeterministic algorithms
  Autotune autotune = Autotune::Quick;   // cuda engine: how uncached convolution algorithms are chosen
  // cuda engine: the same for the cuBLASLt products.  Timing a product's candidates costs
  // milliseconds (all 72 of CLIP's in 2.2 s with the whole build), so --autotune auto keeps them at
  // least quick where it leaves the convolutions to cuDNN's first choice (app/job_plan.h).  Unset:
  // as `autotune`.
  std::optional<Autotune> product_autotune;
  int threads = 0;             // cpu engine: compute threads (0: all cores)
};

// Where an engine's construction spent its time, for the report's set-up parts (the rest of the
// construction is the engine build proper).  Zeros for an engine that does neither.
struct EngineSetupTimes {
  double autotune_s = 0;   // choosing algorithms: measuring them, or reading them from the cache
  double capture_s = 0;    // the first pass of each io set and capturing it as a CUDA graph
  // Convolutions whose algorithm was chosen at this start (timed, or cuDNN's first choice where
  // timing was not asked for) and those read from the algorithm cache.
  int algos_measured = 0, algos_cached = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string describe() const = 0;             // "cpu (2 threads)", "cuda NVIDIA H200, cuDNN 9.19.0, tf32"
  virtual const ValueInfo& input() const = 0;           // [B, ...]
  virtual const std::vector<ValueInfo>& outputs() const = 0;
  virtual int io_sets() const = 0;
  virtual void* input_buffer(int set) = 0;
  virtual void* output_buffer(int set, int output) = 0;
  // Runs (cpu) or enqueues on `stream` (cuda: a cudaStream_t) one forward pass of set `set`.
  virtual void forward(int set, void* stream) = 0;
  // Times every step of a forward pass over `o.replays` passes and measures the device's ceilings
  // (engine/profile.h).  Synchronous; uses io set 0, whose buffers it overwrites.  Not while the
  // pipeline runs.
  virtual EngineProfile profile(const ProfileOptions& o);
  virtual EngineSetupTimes setup_times() const { return {}; }
};

// backend: "cpu" or "cuda".  The graph must come from prepare_graph().  Weights may be replaced
// before the engine is created (the NCCL broadcast fills them on ranks that did not read the file).
std::unique_ptr<Engine> create_engine(const std::string& backend, const Graph& graph, const EngineOptions& options);

std::unique_ptr<Engine> create_cpu_engine(const Graph& graph, const EngineOptions& options);
#ifdef SLUICE_HAVE_CUDA
std::unique_ptr<Engine> create_cuda_engine(const Graph& graph, const EngineOptions& options);
// Makes `device`'s context and loads cuDNN and cuBLAS (a first handle of each, destroyed), so that a
// later create_cuda_engine does not wait for them; meant for a thread of its own while the model
// loads.  Never throws: a failure shows again, with its message, when the engine is built.
void warm_up_cuda(int device);
#endif

}  // namespace sluice
