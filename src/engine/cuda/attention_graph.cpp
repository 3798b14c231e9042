// cuDNN's fused attention for sluice.Attention (attention_graph.h).  The graph holds one SDPA node
// whose intermediates (scores, probabilities) never leave the kernel; io in the engine's half type,
// softmax and accumulation in float.
#include "engine/cuda/attention_graph.h"

#include "core/error.h"

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace sluice::cuda {

bool attention_graph_fits(const AttentionGraphSpec& s) {
  if (s.t != DType::BF16 && s.t != DType::F16) return false;
  return s.d % 8 == 0 && s.dv % 8 == 0 && s.d <= 128 && s.dv <= 128 && s.s > 0 && s.s_kv > 0;
}

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kBias = 5 };

std::vector<int64_t> packed(const std::vector<int64_t>& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

class FrontendAttention final : public AttentionGraph {
 public:
  FrontendAttention(std::shared_ptr<fe::graph::Graph> g, std::size_t ws) : g_(std::move(g)), ws_(ws) {}
  std::size_t workspace_bytes() const override { return ws_; }
  bool run(cudnnHandle_t h, const void* q, const void* k, const void* v, const void* bias, void* o, void* workspace) override {
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, o}};
    if (bias) pack[kBias] = const_cast<void*>(bias);
    return g_->execute(h, pack, workspace).is_good();
  }

 private:
  std::shared_ptr<fe::graph::Graph> g_;
  std::size_t ws_;
};

}  // namespace
#endif

std::unique_ptr<AttentionGraph> AttentionGraph::create(cudnnHandle_t h, const AttentionGraphSpec& s, std::string* why) {
#ifndef SLUICE_HAVE_CUDNN_FRONTEND
  (void)h;
  (void)s;
  *why = "built without the cuDNN frontend";
  return nullptr;
#else
  if (!attention_graph_fits(s)) {
    *why = "not a type and head size cuDNN's fused attention takes";
    return nullptr;
  }
  try {
    auto g = std::make_shared<fe::graph::Graph>();
    const fe::DataType_t io = s.t == DType::F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
    g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dims) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(packed(dims)));
    };
    auto q = tensor("q", kQ, {s.b, s.h, s.s, s.d});
    auto k = tensor("k", kK, {s.b, s.h, s.s_kv, s.d});
    auto v = tensor("v", kV, {s.b, s.h, s.s_kv, s.dv});
    auto attrs = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(s.scale);
    if (s.bias) {
      auto b = g->tensor(fe::graph::Tensor_attributes().set_name("bias").set_uid(kBias).set_dim({1, s.h, s.s, s.s_kv})
                             .set_stride({s.h * s.s * s.s_kv, s.s * s.s_kv, s.s_kv, 1}));
      attrs.set_bias(b);
    }
    auto [o, stats] = g->sdpa(q, k, v, attrs);
    (void)stats;
    o->set_output(true).set_uid(kO).set_dim({s.b, s.h, s.s, s.dv}).set_stride(packed({s.b, s.h, s.s, s.dv}));
    auto failed = [&](const char* stage, fe::error_t e) {
      *why = str(stage, ": ", e.get_message());
      return nullptr;
    };
    if (auto e = g->validate(); e.is_bad()) return failed("validate", e);
    if (auto e = g->build_operation_graph(h); e.is_bad()) return failed("operation graph", e);
    if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
      return failed("heuristics", e);
    if (auto e = g->check_support(h); e.is_bad()) return failed("support", e);
    if (auto e = g->build_plans(h); e.is_bad()) return failed("plans", e);
    int64_t ws = 0;
    if (auto e = g->get_workspace_size(ws); e.is_bad() || ws < 0) return failed("workspace", e);
    return std::make_unique<FrontendAttention>(std::move(g), static_cast<std::size_t>(ws));
  } catch (const std::exception& e) {   // the frontend throws for shapes it cannot describe
    *why = e.what();
    return nullptr;
  }
#endif
}

}  // namespace sluice::cuda
