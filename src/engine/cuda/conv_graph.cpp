// The fused convolution as a cuDNN graph (conv_graph.h): conv_fprop -> ADD bias -> ADD residual ->
// RELU, every intermediate virtual and in float, the ends in the engine's type and channels-last.
// Plans come from heuristics modes A and FALLBACK; every plan that builds is kept so that the
// caller can time them all on the real buffers (finalizing compiles runtime-fusion kernels with
// NVRTC: done once, at start-up, never per call).
#include "engine/cuda/conv_graph.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/cuda/cuda_raii.h"
#include "core/error.h"
#include "core/log.h"
#include "core/params.h"
#include "engine/cuda/algo_cache.h"
#include "engine/cuda/autotune.h"
#include "engine/cuda/engine_internal.h"

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
#include "engine/cuda/frontend_util.h"
#endif

namespace sluice::cuda {

namespace {
// SLUICE_CUDA_CONV_GRAPH: unset or 0 off, 1 the faster of graph and legacy, force the graph whenever
// cuDNN builds one (for testing it).
int graph_mode() {
#ifdef SLUICE_HAVE_CUDNN_FRONTEND
  static const int mode = [] {
    const std::string v = param_string("SLUICE_CUDA_CONV_GRAPH");   // one of 0|1|force
    return v == "force" ? 2 : v == "1" ? 1 : 0;
  }();
  return mode;
#else
  return 0;
#endif
}
}  // namespace

bool graph_conv_enabled() { return graph_mode() != 0; }

bool graph_conv_supports(const GraphConvSpec& s) {
  if (!graph_conv_enabled() || s.x.size() != 4 || s.w.size() != 4 || s.y.size() != 4) return false;
  if (s.precision == Precision::FP32) return false;   // TF32-free fp32 stays on the legacy FMA kernels
  if (s.pad.size() != 2 || s.stride.size() != 2 || s.dilation.size() != 2) return false;
  if (s.x[1] != s.w[1]) return false;   // ungrouped only
  switch (s.act.act) {
    case Act::Identity:
    case Act::Relu: return true;
    case Act::Clip: return s.act.a == 0.f;   // ReLU with an upper clip (ReLU6)
    default: return false;
  }
}

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;
using frontend::tensor;

enum Uid : int64_t { kX = 1, kW = 2, kBias = 3, kZ = 4, kY = 5 };

// Strides of a channels-last tensor with logical dims [N, C, H, W].
std::vector<int64_t> nhwc_strides(const std::vector<int64_t>& d) { return {d[1] * d[2] * d[3], 1, d[1] * d[3], d[1]}; }

class FrontendConv final : public GraphConv {
 public:
  explicit FrontendConv(std::shared_ptr<fe::graph::Graph> g) : g_(std::move(g)) {}

  int64_t plans() const override { return g_->get_execution_plan_count(); }

  std::size_t workspace_bytes(int64_t plan) const override {
    int64_t ws = 0;
    if (g_->get_workspace_size_plan_at_index(plan, ws).is_bad() || ws < 0) return std::numeric_limits<std::size_t>::max();
    return static_cast<std::size_t>(ws);
  }

  bool run(cudnnHandle_t h, const GraphConvBuffers& b, void* workspace, int64_t plan) override {
    std::unordered_map<int64_t, void*> pack = {{kX, b.x}, {kW, b.w}, {kY, b.y}};
    if (b.bias) pack[kBias] = b.bias;
    if (b.z) pack[kZ] = b.z;
    return g_->execute_plan_at_index(h, pack, workspace, plan).is_good();
  }

  std::string plan_name(int64_t plan) const override {
    std::string name;
    if (g_->get_plan_name_at_index(plan, name).is_bad()) return "?";
    return name;
  }

 private:
  std::shared_ptr<fe::graph::Graph> g_;
};

}  // namespace
#endif

std::unique_ptr<GraphConv> GraphConv::create(cudnnHandle_t h, const GraphConvSpec& s, std::string* why) {
#ifndef SLUICE_HAVE_CUDNN_FRONTEND
  (void)h;
  (void)s;
  *why = "built without the cuDNN frontend";
  return nullptr;
#else
  if (!graph_conv_supports(s)) {
    *why = "not a graph the engine builds";
    return nullptr;
  }
  try {
    auto g = frontend::float_graph(s.t);
    auto x = tensor(*g, "x", kX, s.x, nhwc_strides(s.x));
    auto w = tensor(*g, "w", kW, s.w, nhwc_strides(s.w));
    auto conv = fe::graph::Conv_fprop_attributes()
                    .set_padding(s.pad)
                    .set_stride(s.stride)
                    .set_dilation(s.dilation)
                    .set_compute_data_type(fe::DataType_t::FLOAT);
    auto cur = g->conv_fprop(x, w, conv);
    if (s.bias) {
      const int64_t k = s.y[1];
      auto b = tensor(*g, "bias", kBias, {1, k, 1, 1}, {k, 1, k, k});
      cur = g->pointwise(cur, b, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD)
                                     .set_compute_data_type(fe::DataType_t::FLOAT));
    }
    if (s.residual) {
      auto z = tensor(*g, "z", kZ, s.y, nhwc_strides(s.y));
      cur = g->pointwise(cur, z, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD)
                                     .set_compute_data_type(fe::DataType_t::FLOAT));
    }
    if (s.act.act != Act::Identity) {
      auto relu = fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD)
                      .set_compute_data_type(fe::DataType_t::FLOAT);
      if (s.act.act == Act::Clip) relu.set_relu_lower_clip(0.f).set_relu_upper_clip(s.act.b);
      cur = g->pointwise(cur, relu);
    }
    cur->set_output(true).set_uid(kY).set_data_type(frontend::data_type(s.t)).set_dim(s.y).set_stride(nhwc_strides(s.y));
    // Every plan that builds, for choose_graph_conv to time.
    if (!frontend::build_graph(*g, h, why, s.deterministic, fe::BuildPlanPolicy_t::ALL)) return nullptr;
    if (g->get_execution_plan_count() < 1) {
      *why = "no execution plan";
      return nullptr;
    }
    return std::make_unique<FrontendConv>(std::move(g));
  } catch (const std::exception& e) {   // the frontend throws for shapes it cannot describe
    *why = e.what();
    return nullptr;
  }
#endif
}

GraphChoice choose_graph_conv(Context& ctx, const GraphConvSpec& spec, const std::string& measured_key, TuneLevel level,
                              const GraphConvBuffers& b, const std::function<void(cudaStream_t)>& legacy) {
  GraphChoice none;
  if (!graph_conv_supports(spec)) return none;
  const bool forced = graph_mode() == 2;
  // A forced choice was not measured against the legacy call: it is cached apart.
  const std::string key = forced ? measured_key + "|force" : measured_key;
  const auto hit = ctx.cache->get(key);
  const Tuned cached = hit ? parse_tuned(*hit) : Tuned{};
  const bool trusted = hit && cached.level >= level;   // made at least as thoroughly as asked
  if (trusted && cached.choice == "legacy") return none;
  // Nothing timed: the legacy call stays (building the graph would compile kernels for nothing).
  if (level == TuneLevel::Heuristic && !forced) {
    ctx.stats->algos_measured++;
    ctx.stats->algos_untimed++;
    ctx.cache->put(key, tuned_value(level, "legacy"));
    return none;
  }
  std::shared_ptr<GraphConv>& g = ctx.graph_convs[key];
  if (!g) {
    std::string why;
    g = GraphConv::create(ctx.cudnn, spec, &why);
    if (!g) {
      log_debug("cuda engine: no cuDNN graph for ", key, ": ", why);
      ctx.cache->put(key, tuned_value(level, "legacy"));
      return none;
    }
  }
  cudaStream_t s = nullptr;
  CUDNN_CHECK(cudnnGetStream(ctx.cudnn, &s));
  auto usable = [&](int64_t plan) {
    return plan >= 0 && plan < g->plans() && g->workspace_bytes(plan) <= ctx.workspace_bytes &&
           g->run(ctx.cudnn, b, ctx.workspace, plan) && cudaStreamSynchronize(s) == cudaSuccess;
  };
  long long plan = -1;
  if (trusted && std::sscanf(cached.choice.c_str(), "graph %lld", &plan) == 1 && usable(plan) &&
      cached.choice.substr(cached.choice.find(' ', 6) + 1) == g->plan_name(plan)) {
    ctx.stats->graph_convolutions++;
    return {g, plan};
  }
  (void)cudaGetLastError();
  // Measure: the legacy call as the step runs it, then the plans in the heuristics' order that fit
  // the workspace (all of them at full, the first few at quick, the first alone when forced and
  // nothing is timed).
  const int most = level == TuneLevel::Full ? std::numeric_limits<int>::max()
                   : level == TuneLevel::Quick ? kQuickCandidates : 1;
  const bool timing = level != TuneLevel::Heuristic;
  float legacy_ms = std::numeric_limits<float>::infinity();
  if (!forced) {
    legacy_ms = time_candidate(s, level, [&] { legacy(s); });
    ctx.stats->candidates_timed++;
  }
  float best_ms = legacy_ms;
  int64_t best = -1;
  int tried = 0;
  for (int64_t p = 0; p < g->plans() && tried < most; ++p) {
    if (!usable(p)) {
      (void)cudaGetLastError();
      continue;
    }
    ++tried;
    const float ms = timing ? time_candidate(s, level, [&] { g->run(ctx.cudnn, b, ctx.workspace, p); }) : 0.f;
    if (timing) ctx.stats->candidates_timed++;
    if (ms < best_ms) {
      best_ms = ms;
      best = p;
    }
  }
  ctx.stats->algos_measured++;
  if (!timing) ctx.stats->algos_untimed++;
  if (best < 0) {
    ctx.cache->put(key, tuned_value(level, "legacy"));
    return none;
  }
  log_debug("cuda engine: cuDNN graph plan ", g->plan_name(best), " ", best_ms, " ms against the legacy call's ", legacy_ms,
            " ms for ", key);
  ctx.cache->put(key, tuned_value(level, str("graph ", best, " ", g->plan_name(best))));
  ctx.stats->graph_convolutions++;
  return {g, best};
}

}  // namespace sluice::cuda
