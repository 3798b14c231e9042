// Convolutions on cuDNN's legacy API (or as a cuDNN graph where that measured faster: conv_graph.h;
// dilated ones by space-to-batch: ops_atrous.cpp; depthwise ones: ops_depthwise.cpp; channels-last 1x1
// ones also as one cuBLASLt product, see ConvGemm below): Conv and sluice.FusedConv through
// cudnnConvolutionBiasActivationForward (ReLU, bias and residual in one call) or
// cudnnConvolutionForward plus one epilogue kernel, ConvTranspose through
// cudnnConvolutionBackwardData.  Algorithms are chosen once at start-up as --autotune says
// (autotune.h: cudnnFind*Ex on the whole batch or on its first samples, or cuDNN's heuristics) and
// kept in the algorithm cache (docs/engine.md, "The algorithm cache"; what was measured: BENCHMARKS.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda/cuda_raii.h"
#include "core/log.h"
#include "core/params.h"
#include "engine/cuda/algo_cache.h"
#include "engine/cuda/autotune.h"
#include "engine/cuda/conv_graph.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {

ConvGeom conv_geometry(const Builder& b, const Node& n, const Shape& x, const Shape& w, const Shape& y, bool transpose) {
  const std::size_t sp = x.size() - 2;
  ConvGeom g;
  g.kernel.assign(w.begin() + 2, w.end());
  g.stride = n.get_ints("strides", std::vector<int64_t>(sp, 1));
  g.dilation = n.get_ints("dilations", std::vector<int64_t>(sp, 1));
  g.groups = n.get_int("group", 1);
  std::vector<int64_t> pads = n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (g.stride.size() != sp || g.dilation.size() != sp || pads.size() != 2 * sp)
    b.fail(n, "strides, dilations or pads do not match ", sp, " spatial dims");
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(sp));
  g.pad_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(sp), pads.end());
  for (std::size_t d = 0; d < sp; ++d) {
    const int64_t in = x[d + 2], out = y[d + 2], k = (g.kernel[d] - 1) * g.dilation[d] + 1;
    int64_t total = -1;
    if (!transpose && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"))
      total = std::max<int64_t>(0, (out - 1) * g.stride[d] + k - in);
    if (transpose && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || n.has("output_shape"))) {
      const std::vector<int64_t> op = n.get_ints("output_padding", std::vector<int64_t>(sp, 0));
      total = std::max<int64_t>(0, g.stride[d] * (in - 1) + op[d] + k - out);
    }
    if (auto_pad == "VALID") g.pad_begin[d] = g.pad_end[d] = 0;
    if (total >= 0) {
      // ONNX: the odd pixel goes to the end for SAME_UPPER, to the beginning otherwise.
      const bool upper = auto_pad == "SAME_UPPER";
      const int64_t small = total / 2;
      g.pad_begin[d] = upper ? small : total - small;
      g.pad_end[d] = total - g.pad_begin[d];
    }
  }
  return g;
}

namespace {

cudnnMathType_t math_type(Precision p) {
  switch (p) {
    case Precision::FP32: return CUDNN_FMA_MATH;        // no TF32
    case Precision::TF32: return CUDNN_DEFAULT_MATH;    // TF32 tensor cores allowed
    default: return CUDNN_TENSOR_OP_MATH;
  }
}

// Logical NCHW dims; channels-last tensors get NHWC strides.
void set_tensor(cudnnTensorDescriptor_t d, DType t, const std::vector<int>& dims, bool nhwc = false) {
  std::vector<int> strides(dims.size(), 1);
  if (nhwc && dims.size() == 4) {
    strides = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  } else {
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  }
  CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, cudnn_type(t), static_cast<int>(dims.size()), dims.data(), strides.data()));
}

// cuDNN wants at least 2 spatial dims: a 1-D convolution becomes a 2-D one with height 1.
std::vector<int> dims_of(const Shape& s) {
  std::vector<int> d;
  for (int64_t v : s) d.push_back(static_cast<int>(v));
  if (d.size() == 3) d.insert(d.begin() + 2, 1);
  return d;
}
std::vector<int> spatial_of(const std::vector<int64_t>& v, int64_t one) {
  std::vector<int> d;
  for (int64_t x : v) d.push_back(static_cast<int>(x));
  if (d.size() == 1) d.insert(d.begin(), static_cast<int>(one));
  return d;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

Shape with_batch(Shape s, int64_t n) {
  s[0] = n;
  return s;
}
// Output positions per sample: the product of the spatial dims.
int64_t positions(const Shape& y) {
  int64_t p = 1;
  for (std::size_t i = 2; i < y.size(); ++i) p *= y[i];
  return p;
}

// Descriptors shared by forward and transposed convolutions.
struct ConvDescs {
  TensorDesc x = make_tensor_desc(), y = make_tensor_desc(), bias = make_tensor_desc();
  FilterDesc w = make_filter_desc();
  ConvDesc conv = make_conv_desc();
  std::string key;   // shapes and geometry, for the algorithm cache

  // `in`/`out` are cuDNN's x and y of the forward convolution (for a transposed one: its output
  // and its input).
  ConvDescs(DType t, Precision p, const Shape& in, const Shape& w_shape, const Shape& out, const ConvGeom& g,
            const std::vector<int64_t>& pads, bool nhwc = false) {
    const std::vector<int> xd = dims_of(in), yd = dims_of(out), wd = dims_of(w_shape);
    set_tensor(x, t, xd, nhwc);
    set_tensor(y, t, yd, nhwc);
    std::vector<int> bd(yd.size(), 1);
    bd[1] = yd[1];
    set_tensor(bias, t, bd);
    // Channels-last filters are K R S C in memory (the builder permutes the weights).
    CUDNN_CHECK(cudnnSetFilterNdDescriptor(w, cudnn_type(t), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           static_cast<int>(wd.size()), wd.data()));
    const std::vector<int> pad = spatial_of(pads, 0), stride = spatial_of(g.stride, 1), dil = spatial_of(g.dilation, 1);
    CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv, static_cast<int>(pad.size()), pad.data(), stride.data(), dil.data(),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, static_cast<int>(g.groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type(p)));
    key = str(dtype_name(t), nhwc ? "|nhwc" : "", "|x", join(xd), "|w", join(wd), "|y", join(yd), "|p", join(pad), "|s", join(stride), "|d",
              join(dil), "|g", g.groups);
  }
};

constexpr float kOne = 1.f, kZero = 0.f;

// A channels-last 1x1 convolution (stride 1, no padding, ungrouped) is the row-major product
// Y[N*H*W, K] = X[N*H*W, C] W[K, C]^T: one cuBLASLt step (gemm_lt.h) with the bias, the residual
// (C, beta = 1) and the ReLU in its epilogue (cuBLASLt adds the bias and C before the ReLU:
// D = relu(A B + C + bias), tested against cuDNN and the CPU engine in tests/gpu/test_cuda_conv_gemm.cpp).
// SLUICE_CUDA_CONV_GEMM (read at each step's preparation): unset or 1, the product is a candidate of
// the start-up choice, timed against cuDNN's choice (legacy call or graph) on the real buffers and kept
// when faster; 0, cuDNN only; force, the product wherever it applies (tests, measurements).
enum class ConvGemm { Off, Auto, Force };
ConvGemm conv_gemm_mode() {
  const std::string v = param_string("SLUICE_CUDA_CONV_GEMM");   // one of 0|1|force
  if (v == "0") return ConvGemm::Off;
  if (v == "force") return ConvGemm::Force;
  return ConvGemm::Auto;
}

class ConvStep final : public Step {
 public:
  ConvStep(std::string label, DType t, Precision p, const Shape& xs, const Shape& ws, const Shape& ys, const ConvGeom& g,
           int x, int w, int bias, int z, int y, ActParams act, bool nhwc)
      : Step(std::move(label)), t_(t), p_(p), d_(t, p, xs, ws, ys, g, g.pad_begin, nhwc), xs_(xs), ws_(ws), ys_(ys), g_(g),
        nhwc_(nhwc), x_(x), w_(w), bias_(bias), z_(z), y_(y), act_(act), channels_(ys[1]), outer_(ys[0]) {
    inner_ = 1;
    for (std::size_t i = 2; i < ys.size(); ++i) inner_ *= ys[i];
    if (nhwc) {   // the epilogue sees [N*H*W, C, 1]
      outer_ = ys[0] * inner_;
      inner_ = 1;
    }
    act_desc_ = make_activation_desc();
    // Fusable in one cuDNN call: ReLU (any algorithm) or no activation (one algorithm only).
    fusable_ = act.act == Act::Relu || act.act == Act::Identity;
    CUDNN_CHECK(cudnnSetActivationDescriptor(act_desc_, act.act == Act::Relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                             CUDNN_PROPAGATE_NAN, 0.0));
    // The same convolution as a cuDNN graph, for the start-up comparison (channels-last 2-D only).
    if (nhwc && xs.size() == 4 && g.groups == 1 && g.symmetric()) {
      spec_.t = t;
      spec_.precision = p;
      spec_.x.assign(xs.begin(), xs.end());
      spec_.w.assign(ws.begin(), ws.end());
      spec_.y.assign(ys.begin(), ys.end());
      spec_.pad = g.pad_begin;
      spec_.stride = g.stride;
      spec_.dilation = g.dilation;
      spec_.bias = bias >= 0;
      spec_.residual = z >= 0;
      spec_.act = act;
      graph_candidate_ = graph_conv_supports(spec_);
    }
    // The same convolution as one cuBLASLt product, for the start-up choice (ConvGemm above).
    const bool one_by_one = nhwc && xs.size() == 4 && ws.size() == 4 && ws[2] == 1 && ws[3] == 1 && g.groups == 1 &&
                            xs[1] == ws[1] && xs[2] == ys[2] && xs[3] == ys[3] &&
                            std::all_of(g.stride.begin(), g.stride.end(), [](int64_t v) { return v == 1; }) &&
                            std::all_of(g.dilation.begin(), g.dilation.end(), [](int64_t v) { return v == 1; }) &&
                            std::all_of(g.pad_begin.begin(), g.pad_begin.end(), [](int64_t v) { return v == 0; }) &&
                            std::all_of(g.pad_end.begin(), g.pad_end.end(), [](int64_t v) { return v == 0; });
    const bool gemm_type = t == DType::F16 || t == DType::BF16 || (t == DType::F32 && p == Precision::TF32);
    gemm_fits_ = one_by_one && gemm_type && (act.act == Act::Identity || act.act == Act::Relu);
    if (gemm_fits_) {
      gemm_spec_.m = ys[0] * ys[2] * ys[3];
      gemm_spec_.n = ys[1];
      gemm_spec_.k = xs[1];
      gemm_spec_.trans_b = true;   // the K x C weights (K R S C with R = S = 1)
      gemm_spec_.ab = gemm_spec_.y = t;
      gemm_spec_.precision = p;
      gemm_spec_.epilogue = bias < 0 ? GemmEpilogue::None : act.act == Act::Relu ? GemmEpilogue::BiasRelu : GemmEpilogue::Bias;
      // The builder gives a ReLU or a residual a (zero) bias, so the epilogue is never ReLU alone.
      gemm_fits_ = bias >= 0 || (act.act == Act::Identity && z < 0);
    }
  }

  void prepare(Context& ctx, const Bindings& b) override {
    ctx.stats->convolutions++;
    if (base_kind_.empty()) base_kind_ = kind;
    kind = base_kind_;
    gemm_on_ = false;
    graph_.reset();
    plan_ = -1;
    const ConvGemm mode = gemm_fits_ ? conv_gemm_mode() : ConvGemm::Off;
    if (mode == ConvGemm::Force && make_gemm(ctx, b)) return take_gemm(ctx);
    // The choice between the product and cuDNN: timed at the convolutions' level or the products',
    // whichever is the more thorough (`auto` leaves the convolutions of a short run untimed but
    // times its products; the two paths then still meet on the real buffers).  Under
    // --deterministic cuDNN's choice alone (the same path at every start).
    const bool choosing = mode == ConvGemm::Auto && !ctx.deterministic;
    const TuneLevel level = std::max(tune_level(ctx, flops), tune_level(ctx, ctx.product_autotune, flops));
    const std::string key = str(ctx.cache_prefix, "|convgemm ", cublasLtGetVersion(), "|", d_.key, bias_ >= 0 ? "|bias" : "",
                                z_ >= 0 ? "|z" : "", "|act", static_cast<int>(act_.act));
    bool cudnn_cached = false;
    if (choosing) {
      if (auto hit = ctx.cache->get(key)) {
        const Tuned t = parse_tuned(*hit);
        if (t.level >= level && t.choice == "gemm" && make_gemm(ctx, b)) {
          ctx.stats->algos_cached++;
          return take_gemm(ctx);
        }
        cudnn_cached = t.level >= level && t.choice == "cudnn";
      }
    }
    prepare_cudnn(ctx, b);
    if (!choosing || cudnn_cached) return;
    if (level == TuneLevel::Heuristic || !make_gemm(ctx, b)) {   // nothing timed, or no product: cuDNN stays
      ctx.cache->put(key, tuned_value(level, "cudnn"));
      return;
    }
    cudaStream_t s = nullptr;
    CUDNN_CHECK(cudnnGetStream(ctx.cudnn, &s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const float cudnn_ms = time_candidate(s, level, [&] { run_cudnn(ctx, b, s); });
    const float gemm_ms = time_candidate(s, level, [&] { gemm_->run(ctx, b, s); });
    ctx.stats->candidates_timed += 2;
    const bool gemm_wins = gemm_ms < cudnn_ms;
    log_debug("cuda engine: ", label(), ": 1x1 convolution as a cuBLASLt product ", gemm_ms, " ms, cuDNN (",
              graph_ ? "graph" : "legacy", ") ", cudnn_ms, " ms: ", gemm_wins ? "product" : "cuDNN");
    ctx.cache->put(key, tuned_value(level, gemm_wins ? "gemm" : "cudnn"));
    if (gemm_wins) take_gemm(ctx);
    else gemm_.reset();
  }

  void run(Context& ctx, const Bindings& b, cudaStream_t s) override {
    if (gemm_on_) {
      gemm_->run(ctx, b, s);
      return;
    }
    run_cudnn(ctx, b, s);
  }

 private:
  // cuDNN's choice: the legacy algorithm, then the graph when SLUICE_CUDA_CONV_GRAPH asks and it is faster.
  void prepare_cudnn(Context& ctx, const Bindings& b) {
    choose_legacy(ctx, b);
    if (!graph_candidate_) return;
    spec_.deterministic = ctx.deterministic;
    const std::string key = str(ctx.cache_prefix, "|convgraph|", d_.key, bias_ >= 0 ? "|bias" : "", z_ >= 0 ? "|z" : "",
                                "|act", static_cast<int>(act_.act), ",", act_.a, ",", act_.b);
    const GraphChoice c =
        choose_graph_conv(ctx, spec_, key, tune_level(ctx, flops), buffers(b), [&](cudaStream_t s) { run_legacy(ctx, b, s); });
    graph_ = c.graph;
    plan_ = c.plan;
  }

  void run_cudnn(Context& ctx, const Bindings& b, cudaStream_t s) {
    if (graph_) {
      if (!graph_->run(ctx.cudnn, buffers(b), ctx.workspace, plan_))
        SLUICE_THROW("cuDNN refused the graph plan it accepted at start-up for convolution ", label(), " (", d_.key, ")");
      return;
    }
    run_legacy(ctx, b, s);
  }

  // The product step, prepared (its algorithm chosen as gemm_lt.h says); false, with the reason
  // logged, when cuBLASLt offers nothing for it.
  bool make_gemm(Context& ctx, const Bindings& b) {
    if (!gemm_) {
      gemm_ = make_lt_gemm_step(label() + " (cuBLASLt)", gemm_spec_, x_, w_, bias_, y_, z_);
      gemm_->flops = flops;
      gemm_->bytes = bytes;
    }
    try {
      gemm_->prepare(ctx, b);
      return true;
    } catch (const std::exception& e) {
      (void)cudaGetLastError();
      log_debug("cuda engine: ", label(), ": no cuBLASLt product for the 1x1 convolution: ", e.what());
      gemm_.reset();
      return false;
    }
  }
  void take_gemm(Context& ctx) {
    gemm_on_ = true;
    graph_.reset();
    kind = base_kind_ + " GEMM";   // the profile names the path
    ctx.stats->gemm_convolutions++;
  }

  GraphConvBuffers buffers(const Bindings& b) const {
    return {b.at(x_), b.at(w_), bias_ >= 0 ? b.at(bias_) : nullptr, z_ >= 0 ? b.at(z_) : nullptr, b.at(y_)};
  }

  // The legacy API: an algorithm chosen at start-up (autotune.h) or read from the cache, fused with
  // the epilogue in one call when cuDNN allows it.
  void choose_legacy(Context& ctx, const Bindings& b) {
    const std::string key = str(ctx.cache_prefix, "|conv|", d_.key, bias_ >= 0 ? "|bias" : "", z_ >= 0 ? "|z" : "",
                                "|act", static_cast<int>(act_.act));
    const TuneLevel level = tune_level(ctx, flops);
    if (auto hit = ctx.cache->get(key)) {
      const Tuned t = parse_tuned(*hit);
      int algo = -1, math = -1, fused = 0;
      if (t.level >= level && std::sscanf(t.choice.c_str(), "%d %d %d", &algo, &math, &fused) == 3 &&
          try_use(ctx, b, static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math), fused != 0)) {
        ctx.stats->algos_cached++;
        return;
      }
    }
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ok;
    if (level == TuneLevel::Heuristic) {
      ok = heuristics(ctx);
    } else {
      // Quick: the same search on the first samples of the batch (autotune.h).
      const int64_t n = ys_[0], tb = level == TuneLevel::Quick ? tuning_batch(n, positions(ys_)) : n;
      ctx.stats->samples_timed += tb;
      ctx.stats->samples_full += n;
      if (tb == n) {
        ok = find_all(ctx, b, d_);
      } else {
        const ConvDescs part(t_, p_, with_batch(xs_, tb), ws_, with_batch(ys_, tb), g_, g_.pad_begin, nhwc_);
        ok = find_all(ctx, b, part);
      }
    }
    if (ok.empty()) SLUICE_THROW("cuDNN found no usable algorithm for convolution ", label(), " (", d_.key, ")");
    // Prefer the fused call when the fastest algorithm allows it; otherwise convolution + epilogue.
    bool chosen = false;
    for (const auto& r : ok) {
      const bool fuse = fusable_ && (act_.act == Act::Relu || r.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) &&
                        (bias_ >= 0 || z_ >= 0 || act_.act == Act::Relu);
      if (try_use(ctx, b, r.algo, math_for(r.mathType), fuse)) { chosen = true; break; }
      if (fuse && try_use(ctx, b, r.algo, math_for(r.mathType), false)) { chosen = true; break; }
    }
    if (!chosen) SLUICE_THROW("cuDNN rejected every measured algorithm for convolution ", label(), " (", d_.key, ")");
    ctx.stats->algos_measured++;
    if (level == TuneLevel::Heuristic) ctx.stats->algos_untimed++;
    ctx.cache->put(key, tuned_value(level, str(static_cast<int>(algo_), " ", static_cast<int>(math_), " ", fused_ ? 1 : 0)));
  }

  // What the engine may run: cuDNN succeeded, the workspace suffices, deterministic when asked, and
  // fp32 neither on TF32 tensor cores nor down-converted to fp16.
  bool usable(const Context& ctx, const cudnnConvolutionFwdAlgoPerf_t& r) const {
    if (r.status != CUDNN_STATUS_SUCCESS || r.memory > ctx.workspace_bytes) return false;
    if (ctx.deterministic && r.determinism != CUDNN_DETERMINISTIC) return false;
    if (p_ == Precision::FP32 && r.mathType == CUDNN_TENSOR_OP_MATH) return false;
    return r.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }

  // Every algorithm timed by cuDNN on the real buffers (their content does not matter), fastest
  // first; `d` is this convolution's descriptors, or those of the first samples of its batch.
  std::vector<cudnnConvolutionFwdAlgoPerf_t> find_all(Context& ctx, const Bindings& b, const ConvDescs& d) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn, d.x, b.at(x_), d.w, b.at(w_), d.conv, d.y, b.at(y_),
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ctx.workspace,
                                                       ctx.workspace_bytes));
    ctx.stats->candidates_timed += returned;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ok;
    for (int i = 0; i < returned; ++i)
      if (usable(ctx, perf[i])) ok.push_back(perf[i]);
    return ok;
  }

  // The untimed choice (off, and the negligible layers under quick): cuDNN's heuristics' ranking,
  // best first; nothing runs.
  std::vector<cudnnConvolutionFwdAlgoPerf_t> heuristics(Context& ctx) {
    int most = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &most));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(most, 1)));
    int returned = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(d_.conv, math_type(p_)));
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, d_.x, d_.w, d_.conv, d_.y, static_cast<int>(perf.size()),
                                                       &returned, perf.data()));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ok;
    for (int i = 0; i < returned; ++i)
      if (usable(ctx, perf[i])) ok.push_back(perf[i]);
    return ok;
  }

  void run_legacy(Context& ctx, const Bindings& b, cudaStream_t s) {
    CUDNN_CHECK(enqueue(ctx, b, algo_, fused_));
    if (!fused_ && (bias_ >= 0 || z_ >= 0 || act_.act != Act::Identity))
      bias_act(t_, b.at(y_), bias_ >= 0 ? b.at(bias_) : nullptr, z_ >= 0 ? b.at(z_) : nullptr, outer_, channels_, inner_,
               act_, s);
  }

  cudnnMathType_t math_for(cudnnMathType_t found) const { return p_ == Precision::FP32 ? CUDNN_FMA_MATH : found; }

  cudnnStatus_t enqueue(Context& ctx, const Bindings& b, cudnnConvolutionFwdAlgo_t algo, bool fused) {
    std::size_t ws = 0;
    cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, d_.x, d_.w, d_.conv, d_.y, algo, &ws);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (ws > ctx.workspace_bytes) return CUDNN_STATUS_NOT_SUPPORTED;
    if (!fused)
      return cudnnConvolutionForward(ctx.cudnn, &kOne, d_.x, b.at(x_), d_.w, b.at(w_), d_.conv, algo, ctx.workspace, ws,
                                     &kZero, d_.y, b.at(y_));
    // Without a residual, z is y itself with weight 0 (cuDNN requires a z pointer).
    const float alpha2 = z_ >= 0 ? 1.f : 0.f;
    return cudnnConvolutionBiasActivationForward(ctx.cudnn, &kOne, d_.x, b.at(x_), d_.w, b.at(w_), d_.conv, algo,
                                                 ctx.workspace, ws, &alpha2, d_.y, z_ >= 0 ? b.at(z_) : b.at(y_),
                                                 d_.bias, b.at(bias_), act_desc_, d_.y, b.at(y_));
  }

  // Checks that cuDNN accepts the call with this algorithm, and keeps it if so.
  bool try_use(Context& ctx, const Bindings& b, cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, bool fused) {
    if (fused && bias_ < 0) return false;   // the builder gives fusable convolutions a bias
    if (fused && act_.act == Act::Identity && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) return false;
    CUDNN_CHECK(cudnnSetConvolutionMathType(d_.conv, math));
    if (enqueue(ctx, b, algo, fused) != CUDNN_STATUS_SUCCESS) return false;
    algo_ = algo;
    math_ = math;
    fused_ = fused;
    return true;
  }

  DType t_;
  Precision p_;
  ConvDescs d_;
  Shape xs_, ws_, ys_;   // for the descriptors of a part of the batch (quick autotuning)
  ConvGeom g_;
  bool nhwc_;
  ActivationDesc act_desc_;
  int x_, w_, bias_, z_, y_;
  ActParams act_;
  int64_t channels_, outer_, inner_ = 1;
  bool fusable_ = false;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  bool fused_ = false;
  GraphConvSpec spec_;
  bool graph_candidate_ = false;
  std::shared_ptr<GraphConv> graph_;   // set when the graph won at start-up
  int64_t plan_ = -1;
  bool gemm_fits_ = false;             // a 1x1 convolution the product can run (ConvGemm)
  LtGemmSpec gemm_spec_;
  std::unique_ptr<Step> gemm_;         // set while it is a candidate or the path taken
  bool gemm_on_ = false;               // the product won (or was forced)
  std::string base_kind_;              // the builder's kind, before the path is named
};

class ConvTransposeStep final : public Step {
 public:
  // y_full: the uncropped output (cuDNN's dx), cropped into y by a later step when pads differ.
  ConvTransposeStep(std::string label, DType t, Precision p, const Shape& xs, const Shape& ws, const Shape& full,
                    const ConvGeom& g, const std::vector<int64_t>& pads, int x, int w, int y_full)
      : Step(std::move(label)), t_(t), p_(p), d_(t, p, full, ws, xs, g, pads), xs_(xs), ws_(ws), full_(full), g_(g),
        pads_(pads), x_(x), w_(w), y_(y_full) {}

  void prepare(Context& ctx, const Bindings& b) override {
    ctx.stats->convolutions++;
    const std::string key = str(ctx.cache_prefix, "|convT|", d_.key);
    const TuneLevel level = tune_level(ctx, flops);
    if (auto hit = ctx.cache->get(key)) {
      const Tuned t = parse_tuned(*hit);
      int algo = -1, math = -1;
      if (t.level >= level && std::sscanf(t.choice.c_str(), "%d %d", &algo, &math) == 2 &&
          try_use(ctx, b, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), static_cast<cudnnMathType_t>(math))) {
        ctx.stats->algos_cached++;
        return;
      }
    }
    // Full: every algorithm timed by cuDNN; quick: the same on the first samples of the batch
    // (autotune.h); off: the heuristics' ranking as it is.
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int returned = 0;
    if (level != TuneLevel::Heuristic) {
      const int64_t n = xs_[0], tb = level == TuneLevel::Quick ? tuning_batch(n, positions(xs_)) : n;
      ctx.stats->samples_timed += tb;
      ctx.stats->samples_full += n;
      std::unique_ptr<ConvDescs> part;
      if (tb < n) part = std::make_unique<ConvDescs>(t_, p_, with_batch(full_, tb), ws_, with_batch(xs_, tb), g_, pads_);
      const ConvDescs& d = part ? *part : d_;
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(ctx.cudnn, d.w, b.at(w_), d.y, b.at(x_), d.conv, d.x,
                                                              b.at(y_), static_cast<int>(perf.size()), &returned,
                                                              perf.data(), ctx.workspace, ctx.workspace_bytes));
      ctx.stats->candidates_timed += returned;
    } else {
      int most = 0;
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn, &most));
      perf.resize(static_cast<std::size_t>(std::max<int>(most, static_cast<int>(perf.size()))));
      CUDNN_CHECK(cudnnSetConvolutionMathType(d_.conv, math_type(p_)));
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn, d_.w, d_.y, d_.conv, d_.x,
                                                              static_cast<int>(perf.size()), &returned, perf.data()));
    }
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ok;
    for (int i = 0; i < returned; ++i) {
      const auto& r = perf[static_cast<std::size_t>(i)];
      if (r.status != CUDNN_STATUS_SUCCESS || r.memory > ctx.workspace_bytes) continue;
      if (ctx.deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
      if (p_ == Precision::FP32 && r.mathType == CUDNN_TENSOR_OP_MATH) continue;
      if (r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      ok.push_back(r);
    }
    bool chosen = false;
    for (std::size_t i = 0; i < ok.size() && !chosen; ++i) chosen = try_use(ctx, b, ok[i].algo, math_for(ok[i].mathType));
    if (!chosen) SLUICE_THROW("cuDNN found no usable algorithm for transposed convolution ", label(), " (", d_.key, ")");
    ctx.stats->algos_measured++;
    if (level == TuneLevel::Heuristic) ctx.stats->algos_untimed++;
    ctx.cache->put(key, tuned_value(level, str(static_cast<int>(algo_), " ", static_cast<int>(math_))));
  }

  void run(Context& ctx, const Bindings& b, cudaStream_t) override { CUDNN_CHECK(enqueue(ctx, b, algo_)); }

 private:
  cudnnStatus_t enqueue(Context& ctx, const Bindings& b, cudnnConvolutionBwdDataAlgo_t algo) {
    std::size_t ws = 0;
    cudnnStatus_t st = cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn, d_.w, d_.y, d_.conv, d_.x, algo, &ws);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (ws > ctx.workspace_bytes) return CUDNN_STATUS_NOT_SUPPORTED;
    return cudnnConvolutionBackwardData(ctx.cudnn, &kOne, d_.w, b.at(w_), d_.y, b.at(x_), d_.conv, algo, ctx.workspace, ws,
                                        &kZero, d_.x, b.at(y_));
  }
  bool try_use(Context& ctx, const Bindings& b, cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t math) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(d_.conv, math));
    if (enqueue(ctx, b, algo) != CUDNN_STATUS_SUCCESS) return false;
    algo_ = algo;
    math_ = math;
    return true;
  }

  cudnnMathType_t math_for(cudnnMathType_t found) const { return p_ == Precision::FP32 ? CUDNN_FMA_MATH : found; }

  DType t_;
  Precision p_;
  ConvDescs d_;   // cuDNN's view: x = our output (dx), y = our input (dy)
  Shape xs_, ws_, full_;   // for the descriptors of a part of the batch (quick autotuning)
  ConvGeom g_;
  std::vector<int64_t> pads_;
  int x_, w_, y_;
  cudnnConvolutionBwdDataAlgo_t algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
};

}  // namespace

ActParams fused_activation(const Builder& b, const Node& n) {
  ActParams p;
  const std::string a = n.get_string("activation", "");
  if (a.empty()) p.act = Act::Identity;
  else if (a == "Relu") p.act = Act::Relu;
  else if (a == "Clip") { p.act = Act::Clip; p.a = n.get_float("clip_min", -INFINITY); p.b = n.get_float("clip_max", INFINITY); }
  else if (a == "LeakyRelu") { p.act = Act::LeakyRelu; p.a = n.get_float("alpha", 0.01f); }
  else if (a == "Gelu") p.act = Act::Gelu;
  else if (a == "GeluTanh") p.act = Act::GeluTanh;
  else b.fail(n, "activation '", a, "' is not supported (Relu, Clip, LeakyRelu, Gelu, GeluTanh)");
  return p;
}

namespace {

void check_float(const Builder& b, const Node& n, int slot) {
  if (b.slot(slot).dtype != b.compute)
    b.fail(n, "tensor '", b.slot(slot).name, "' is ", dtype_name(b.slot(slot).dtype), "; convolutions run on ",
           dtype_name(b.compute));
}

// [K, C, R, S] weights as [K, c, R, S], c > C, the extra input channels zero.
Tensor pad_channels(const Tensor& w, int64_t c) {
  const int64_t k = w.shape[0], c0 = w.shape[1], rs = w.shape[2] * w.shape[3];
  Tensor out(w.dtype, {k, c, w.shape[2], w.shape[3]});   // zero-filled
  const std::size_t es = dtype_size(w.dtype);
  for (int64_t ki = 0; ki < k; ++ki)
    std::memcpy(out.bytes.data() + static_cast<std::size_t>(ki * c * rs) * es,
                w.bytes.data() + static_cast<std::size_t>(ki * c0 * rs) * es, static_cast<std::size_t>(c0 * rs) * es);
  return out;
}

// [K, C, R, S] weights as K R S C bytes, for channels-last convolutions.
Tensor to_krsc(const Tensor& w) {
  const int64_t k = w.shape[0], c = w.shape[1], r = w.shape[2], s = w.shape[3];
  Tensor out(w.dtype, w.shape);
  const std::size_t es = dtype_size(w.dtype);
  for (int64_t ki = 0; ki < k; ++ki)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t ri = 0; ri < r; ++ri)
        for (int64_t si = 0; si < s; ++si)
          std::memcpy(out.bytes.data() + static_cast<std::size_t>(((ki * r + ri) * s + si) * c + ci) * es,
                      w.bytes.data() + static_cast<std::size_t>(((ki * c + ci) * r + ri) * s + si) * es, es);
  return out;
}

void lower_conv_forward(Builder& b, const Node& n) {
  if (lower_depthwise(b, n)) return;
  const bool fused_op = n.op == "FusedConv";
  const Tensor* wconst = b.const_input(n, 1);
  const bool nhwc = b.conv_runs_nhwc(n);
  int x = b.input_as(n, 0, nhwc);
  // Channels-last weights: the same values in K R S C order, permuted on the host; with zero
  // weights for the zero channels of a padded stem input (Builder::stem_channels).
  const int64_t cin = b.slot(x).shape.size() == 4 ? b.slot(x).shape[1] : 0;
  const bool padded = nhwc && cin > wconst->shape[1];
  const int w = nhwc ? b.constant(n.input(1) + (padded ? " (krsc, padded)" : " (krsc)"),
                                  to_krsc(padded ? pad_channels(b.to_compute(*wconst), cin) : b.to_compute(*wconst)))
                     : b.input(n, 1);
  check_float(b, n, x);
  check_float(b, n, w);
  Shape xs = b.slot(x).shape;
  const Shape ws = b.slot(w).shape;
  const int y = b.output(n, 0, nhwc);
  const Shape ys = b.slot(y).shape;
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size()) b.fail(n, "input ", shape_str(xs), " and weights ", shape_str(ws), " are not a 1-D to 3-D convolution");
  ConvGeom g = conv_geometry(b, n, xs, ws, ys, false);
  int bias = b.has_input(n, 2) ? b.input(n, 2) : -1;
  const int z = fused_op && b.has_input(n, 3) ? b.input_as(n, 3, nhwc) : -1;
  const ActParams act = fused_op ? fused_activation(b, n) : ActParams{};
  if (bias >= 0) check_float(b, n, bias);
  if (z >= 0) {
    check_float(b, n, z);
    if (b.slot(z).shape != ys) b.fail(n, "residual ", shape_str(b.slot(z).shape), " does not match the output ", shape_str(ys));
  }
  if (bias < 0 && (act.act == Act::Relu || z >= 0)) {
    // The fused cuDNN call needs a bias: give it zeros.
    Tensor zeros(b.compute, {ys[1]});
    bias = b.constant(n.name + " (zero bias)", zeros);
  }
  if (lower_atrous(b, n, g, xs, ws, ys, x, w, bias, z, y, act, nhwc)) return;   // ops_atrous.cpp
  if (!g.symmetric()) {
    // cuDNN pads symmetrically: pad explicitly first (e.g. TensorFlow's SAME_UPPER exports).  The
    // pad kernel works on the dims in memory order.
    Shape padded = xs;
    for (std::size_t d = 2; d < xs.size(); ++d) padded[d] += g.pad_begin[d - 2] + g.pad_end[d - 2];
    const int xp = b.temp(b.compute, padded, n.name + " (padded input)");
    b.slots[static_cast<std::size_t>(xp)].nhwc = nhwc;
    const Shape in_phys = b.slot(x).physical(), out_phys = b.slot(xp).physical();
    PadShape ps;
    ps.rank = static_cast<int>(xs.size());
    for (std::size_t d = 0; d < xs.size(); ++d) {
      ps.in[d] = in_phys[d];
      ps.out[d] = out_phys[d];
    }
    for (std::size_t d = 2; d < xs.size(); ++d) ps.begin[nhwc ? d - 1 : d] = g.pad_begin[d - 2];
    const std::size_t es = dtype_size(b.compute);
    const int src = x;
    b.add(n.name + " pad", {src, xp}, [=](Context&, const Bindings& bd, cudaStream_t s) { pad(es, bd.at(src), bd.at(xp), ps, s); }, "Pad");
    x = xp;
    xs = padded;
    std::fill(g.pad_begin.begin(), g.pad_begin.end(), 0);
    std::fill(g.pad_end.begin(), g.pad_end.end(), 0);
  }
  std::vector<int> uses = {x, w, y};
  if (bias >= 0) uses.push_back(bias);
  if (z >= 0) uses.push_back(z);
  b.add(std::make_unique<ConvStep>(n.name, b.compute, b.precision, xs, ws, ys, g, x, w, bias, z, y, act, nhwc), uses);
}

void lower_conv_transpose(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  const int w = b.input(n, 1);
  check_float(b, n, x);
  check_float(b, n, w);
  const Shape xs = b.slot(x).shape, ws = b.slot(w).shape;
  const int y = b.output(n, 0);
  const Shape ys = b.slot(y).shape;
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size()) b.fail(n, "input ", shape_str(xs), " and weights ", shape_str(ws), " are not a 1-D to 3-D transposed convolution");
  const ConvGeom g = conv_geometry(b, n, xs, ws, ys, true);
  const std::size_t sp = xs.size() - 2;
  // cuDNN's filter for the backward-data view: [C_in, C_out / group, k...] is exactly ONNX's layout.
  const int bias = b.has_input(n, 2) ? b.input(n, 2) : -1;
  int64_t inner = 1;
  for (std::size_t d = 2; d < ys.size(); ++d) inner *= ys[d];
  if (g.symmetric()) {
    b.add(std::make_unique<ConvTransposeStep>(n.name, b.compute, b.precision, xs, ws, ys, g, g.pad_begin, x, w, y), {x, w, y});
  } else {
    // Unequal pads: compute the unpadded output, then crop it.
    Shape full = ys;
    CopyShape cs;
    cs.rank = static_cast<int>(ys.size());
    int64_t offset = 0, stride = 1;
    std::vector<int64_t> strides(ys.size());
    for (std::size_t d = ys.size(); d-- > 0;) {
      if (d >= 2) full[d] = ys[d] + g.pad_begin[d - 2] + g.pad_end[d - 2];
      strides[d] = stride;
      stride *= full[d];
    }
    for (std::size_t d = 0; d < ys.size(); ++d) {
      cs.out[d] = ys[d];
      cs.in_dim[d] = ys[d];
      cs.in_stride[d] = strides[d];
      if (d >= 2) offset += g.pad_begin[d - 2] * strides[d];
    }
    const int tmp = b.temp(b.compute, full, n.name + " (uncropped)");
    b.add(std::make_unique<ConvTransposeStep>(n.name, b.compute, b.precision, xs, ws, full, g, std::vector<int64_t>(sp, 0), x,
                                              w, tmp),
          {x, w, tmp});
    const std::size_t es = dtype_size(b.compute);
    b.add(n.name + " crop", {tmp, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      strided_copy(es, static_cast<const char*>(bd.at(tmp)) + offset * static_cast<int64_t>(es), bd.at(y), cs, s);
    });
  }
  if (bias >= 0) {
    const DType t = b.compute;
    const int64_t outer = ys[0], channels = ys[1];
    b.add(n.name + " bias", {bias, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      bias_act(t, bd.at(y), bd.at(bias), nullptr, outer, channels, inner, ActParams{}, s);
    });
  }
}

}  // namespace

std::unique_ptr<Step> make_conv_step(std::string label, DType t, Precision p, const Shape& xs, const Shape& ws,
                                     const Shape& ys, const ConvGeom& g, int x, int w, int bias, int z, int y, ActParams act,
                                     bool nhwc) {
  return std::make_unique<ConvStep>(std::move(label), t, p, xs, ws, ys, g, x, w, bias, z, y, act, nhwc);
}

bool lower_conv(Builder& b, const Node& n) {
  if (n.op == "Conv" && n.domain.empty()) lower_conv_forward(b, n);
  else if (n.op == "FusedConv" && n.domain == "sluice") lower_conv_forward(b, n);
  else if (n.op == "ConvTranspose" && n.domain.empty()) lower_conv_transpose(b, n);
  else return false;
  return true;
}

}  // namespace sluice::cuda
