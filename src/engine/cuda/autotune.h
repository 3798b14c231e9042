#pragma once
// The measurement policy of the engine's start-up choices (convolution algorithms, cuDNN graph
// plans): how thoroughly a layer is measured and the clock that times the candidates.
//
//   --autotune full   every candidate cuDNN has (cudnnFind*Ex for the legacy calls, every graph
//                     plan that builds), each timed 2 + 5 times: seconds for a ResNet at batch 64;
//   --autotune quick  (default) the few candidates cuDNN's heuristics rank first, each timed 1 + 3
//                     times; layers too small to matter (together at most kNegligibleShare of the
//                     model's FLOPs) take cuDNN's first choice untimed;
//   --autotune off    cuDNN's first choice everywhere, nothing timed.
// Whatever was chosen goes to the algorithm cache with its level (algo_cache.h, TuneLevel), and a
// cached choice is used whenever it was made at least as thoroughly as this start asks.
#include <cuda_runtime.h>

#include <functional>

#include "engine/algo_cache.h"

namespace sluice::cuda {

struct Context;

// Quick: how many of the heuristics' best-ranked usable candidates are timed.
constexpr int kQuickCandidates = 3;
// Quick: the share of the model's FLOPs that its smallest layers may add up to and still be chosen
// by the heuristics alone.
constexpr double kNegligibleShare = 0.01;

// How thoroughly a layer of `flops` FLOPs (0: unknown) is measured at this start.
TuneLevel tune_level(const Context& ctx, double flops);

// Median time of f() in ms over `level`'s repetitions (full: 2 warm-ups and 5 timed runs, quick: 1
// and 3), on stream s with CUDA events.
float time_candidate(cudaStream_t s, TuneLevel level, const std::function<void()>& f);

}  // namespace sluice::cuda
