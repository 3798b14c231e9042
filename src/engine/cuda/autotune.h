#pragma once
// The measurement policy of the engine's start-up choices (convolution algorithms, cuDNN graph
// plans): how thoroughly a layer is measured and the clock that times the candidates.
//
//   --autotune full   every algorithm cuDNN has, timed by cudnnFind*Ex on the layer's whole batch;
//                     cuDNN graph plans: every plan that builds, 2 warm-ups + 5 timed runs each;
//   --autotune quick  the same search on the first samples of the batch only
//                     (algo_cache.h, tuning_batch: at least 65,536 output positions and an eighth
//                     of the batch), so its cost falls with the batch while the kernels still fill
//                     the GPU; layers too small to matter (together at most kNegligibleShare of the
//                     model's FLOPs) take cuDNN's first choice untimed; graph plans: the first
//                     kQuickCandidates, 1 + 3 runs each;
//   --autotune off    cuDNN's first choice everywhere (cudnnGetConvolution*Algorithm_v7), nothing
//                     timed.
// Timing only the heuristics' three best-ranked legacy algorithms on the whole batch (a check run,
// a warm-up and three timed runs each) was measured slower than cudnnFind over all of them on the
// H200: 19.4 s against 7.9 s for DeepLabV3-ResNet50 at batch 64, so the candidates behind the first
// must be slow ones; cudnnFind stays the search, and the batch is what quick cuts.
// The job's default, auto, picks full or off by the run's length (app/job_plan.h, autotune_for_job):
// quick's choices at a quarter of DeepLabV3's batch ran its forward pass 16 % slower at the whole
// batch than full's, and cuDNN's first choice as fast as full's.
// Whatever was chosen goes to the algorithm cache with its level (algo_cache.h, TuneLevel), and a
// cached choice is used whenever it was made at least as thoroughly as this start asks.
#include <cuda_runtime.h>

#include <functional>

#include "engine/algo_cache.h"
#include "engine/engine.h"

namespace sluice::cuda {

struct Context;

// Quick: how many of a cuDNN graph's best-ranked plans are timed.
constexpr int kQuickCandidates = 3;
// Quick: the share of the model's FLOPs that its smallest layers may add up to and still be chosen
// by the heuristics alone.
constexpr double kNegligibleShare = 0.01;

// How thoroughly a layer of `flops` FLOPs (0: unknown) is measured at this start under `autotune`
// (a convolution: ctx.autotune; a cuBLASLt product: ctx.product_autotune).
TuneLevel tune_level(const Context& ctx, Autotune autotune, double flops);
TuneLevel tune_level(const Context& ctx, double flops);   // a convolution's: under ctx.autotune

// Median time of f() in ms over `level`'s repetitions (full: 2 warm-ups and 5 timed runs, quick: 1
// and 3), on stream s with CUDA events.
float time_candidate(cudaStream_t s, TuneLevel level, const std::function<void()>& f);

}  // namespace sluice::cuda
