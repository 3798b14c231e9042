#include "engine/cuda/autotune.h"

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/engine_internal.h"

namespace sluice::cuda {

TuneLevel tune_level(const Context& ctx, double flops) {
  switch (ctx.autotune) {
    case Autotune::Full: return TuneLevel::Full;
    case Autotune::Off: return TuneLevel::Heuristic;
    case Autotune::Quick: break;
  }
  return flops > 0 && flops <= ctx.negligible_flops ? TuneLevel::Heuristic : TuneLevel::Quick;
}

float time_candidate(cudaStream_t s, TuneLevel level, const std::function<void()>& f) {
  const bool full = level == TuneLevel::Full;
  const int warmups = full ? 2 : 1, reps = full ? 5 : 3;
  Event a = make_event(true), b = make_event(true);
  for (int i = 0; i < warmups; ++i) f();
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace sluice::cuda
