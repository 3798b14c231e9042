#include "engine/cuda/autotune.h"

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/engine_internal.h"

namespace sluice::cuda {

TuneLevel tune_level(const Context& ctx, Autotune autotune, double flops) {
  switch (autotune) {
    case Autotune::Full: return TuneLevel::Full;
    case Autotune::Off: return TuneLevel::Heuristic;
    case Autotune::Quick: break;
  }
  return flops > 0 && flops <= ctx.negligible_flops ? TuneLevel::Heuristic : TuneLevel::Quick;
}

TuneLevel tune_level(const Context& ctx, double flops) { return tune_level(ctx, ctx.autotune, flops); }

float time_candidate(cudaStream_t s, TuneLevel level, const std::function<void()>& f) {
  const bool full = level == TuneLevel::Full;
  return median_elapsed_ms(s, full ? 2 : 1, full ? 5 : 3, f);
}

}  // namespace sluice::cuda
