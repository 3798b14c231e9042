// cuDNN's fused attention for sluice.Attention (attention_graph.h).  The graph holds one SDPA node
// whose intermediates (scores, probabilities) never leave the kernel; io in the engine's half type,
// softmax and accumulation in float.
#include "engine/cuda/attention_graph.h"

#include "core/error.h"

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
#include "engine/cuda/frontend_util.h"
#endif

namespace sluice::cuda {

bool attention_graph_fits(const AttentionGraphSpec& s, const int64_t* offsets) {
  if (s.t != DType::BF16 && s.t != DType::F16) return false;
  if (!(s.d % 8 == 0 && s.dv % 8 == 0 && s.d <= 128 && s.dv <= 128 && s.s > 0 && s.s_kv > 0)) return false;
  if (s.strided) {
    // Rows of views start on 16-byte boundaries (8 elements of a 16-bit type), as the kernels'
    // vector loads want.
    for (int i = 0; i < 4; ++i) {
      if (offsets && offsets[i] % 8 != 0) return false;
      for (int j = 0; j < 3; ++j)
        if (s.strides[i][j] % 8 != 0 || s.strides[i][j] < 0) return false;
    }
  }
  return true;
}

#ifdef SLUICE_HAVE_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;
using frontend::tensor;

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
    auto g = frontend::float_graph(s.t);   // s.t is F16 or BF16 (attention_graph_fits)
    // Dims and strides of operand i (q, k, v, o).
    auto strides_of = [&](int i, const std::vector<int64_t>& dims) {
      if (!s.strided) return packed(dims);
      return std::vector<int64_t>{s.strides[i][0], s.strides[i][1], s.strides[i][2], 1};
    };
    auto input_tensor = [&](const char* name, int64_t uid, int i, const std::vector<int64_t>& dims) {
      return tensor(*g, name, uid, dims, strides_of(i, dims));
    };
    auto q = input_tensor("q", kQ, 0, {s.b, s.h, s.s, s.d});
    auto k = input_tensor("k", kK, 1, {s.b, s.h, s.s_kv, s.d});
    auto v = input_tensor("v", kV, 2, {s.b, s.h, s.s_kv, s.dv});
    auto attrs = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(s.scale);
    if (s.bias)
      attrs.set_bias(s.bias_per_sample
                         ? tensor(*g, "bias", kBias, {s.b, 1, s.s, s.s_kv}, {s.s * s.s_kv, s.s * s.s_kv, s.s_kv, 1})
                         : tensor(*g, "bias", kBias, {1, s.h, s.s, s.s_kv}, {s.h * s.s * s.s_kv, s.s * s.s_kv, s.s_kv, 1}));
    auto [o, stats] = g->sdpa(q, k, v, attrs);
    (void)stats;
    o->set_output(true).set_uid(kO).set_dim({s.b, s.h, s.s, s.dv}).set_stride(strides_of(3, {s.b, s.h, s.s, s.dv}));
    if (!frontend::build_graph(*g, h, why)) return nullptr;
    int64_t ws = 0;
    if (auto e = g->get_workspace_size(ws); e.is_bad() || ws < 0) {
      *why = str("workspace: ", e.get_message());
      return nullptr;
    }
    return std::make_unique<FrontendAttention>(std::move(g), static_cast<std::size_t>(ws));
  } catch (const std::exception& e) {   // the frontend throws for shapes it cannot describe
    *why = e.what();
    return nullptr;
  }
#endif
}

}  // namespace sluice::cuda
