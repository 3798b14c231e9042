// sluice.Attention (model/graph.h) as one step: cuDNN's fused attention where it takes the shape
// (fp16/bf16, head sizes multiples of 8 up to 128, layout bhsd, or strided views whose rows start
// 16-byte aligned with a bias per head at most) and is faster, else two strided batched GEMMs around
// the engine's own softmax kernel (one pair per head for views of [N, rows, heads, cols] tensors):
//   scores = scale * q k^T            cublasGemmStridedBatchedEx, fp32 accumulation, stored in the
//                                     compute type (as the unfused MatMul stores them)
//   p      = softmax(scores + bias)   attention_softmax: read in that type, fp32 statistics, the
//                                     bias in fp32 when constant; p written over the scores
//   y      = p v                      cublasGemmStridedBatchedEx
// or, for short sequences (up to 128 tokens, Swin's 49-token windows), the engine's own kernel
// doing all of it in one pass ("Attn window", window_attention in kernels_attention.cu: tensor-core
// products with fp32 accumulation, any bias period, any strided view, the bias in fp32).
// The choice is timed at start-up on the real buffers.  SLUICE_CUDA_ATTENTION=gemm|cudnn|window
// forces one path (cudnn and window where they take the shape), for measurements;
// SLUICE_CUDA_WINDOW_ATTENTION=0 leaves the own kernel out of the choice.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/log.h"
#include "core/params.h"
#include "engine/cuda/attention_graph.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/precision_types.h"

namespace sluice::cuda {
namespace {

enum class Path { Auto, Gemm, Cudnn, Window };

// Read at each step's preparation, not once a process: an engine built after the variable changed
// (a test that sets it for one engine) follows it.
Path forced_path() {
  const std::string v = param_string("SLUICE_CUDA_ATTENTION");   // one of auto|gemm|cudnn|window
  if (v == "gemm") return Path::Gemm;
  if (v == "cudnn") return Path::Cudnn;
  if (v == "window") return Path::Window;
  return Path::Auto;
}

// SLUICE_CUDA_WINDOW_ATTENTION=0: the own one-pass kernel is no candidate (read at preparation).
bool window_enabled() { return param_on("SLUICE_CUDA_WINDOW_ATTENTION"); }

// Where matrix m = n * heads + h of an operand (q, k, v, y) lies, in elements: sample block,
// offset in it, head stride, row stride (k's column stride when given transposed).  Packed
// operands are one head per "sample".
struct Operand {
  int64_t sample = 0, offset = 0, head = 0, row = 0;
};

struct Dims {
  int64_t mats = 0, s = 0, skv = 0, d = 0, dv = 0, period = 0;   // period 0: no bias
  int64_t group = 1;                                             // matrix m adds bias (m / group) mod period
  int64_t bias_rows = 0;                                         // s, or 1: one bias row for every query
  int64_t n = 0, heads = 1;                                      // mats = n * heads
  bool kt = false;                                               // k given as [mats, d, skv]
  bool strided = false;                                          // layout "strided"
  Operand op[4];                                                 // q, k, v, y
  float scale = 1.f;
  bool zero_rows = false;
};

// Median of 5 runs after 2 warm-ups, in ms, timed on the host around a device-wide sync (the two
// paths use the cuBLAS and cuDNN handles, whose streams need not be one).
float time_ms(const std::function<void()>& f) {
  f();
  f();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    CUDA_CHECK(cudaDeviceSynchronize());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return static_cast<float>(t[2]);
}

class AttentionStep final : public Step {
 public:
  AttentionStep(std::string label, DType t, DType bias_t, Dims d, AttentionGraphSpec spec, int q, int k, int v, int bias,
                int bias_half, int scores, int probs, int y)
      : Step(std::move(label)), t_(t), bias_t_(bias_t), d_(d), spec_(spec), q_(q), k_(k), v_(v), bias_(bias),
        bias_half_(bias_half), scores_(scores), probs_(probs), y_(y) {}

  void prepare(Context& ctx, const Bindings& b) override {
    graph_.reset();
    window_ = false;
    const Path want = forced_path();
    // The own kernel: bf16/fp16, short rows, an fp32 bias (constants are) or none.
    const bool win = window_enabled() && window_attention_fits(t_, d_.s, d_.skv, d_.d, d_.dv) &&
                     (d_.period == 0 || bias_t_ == DType::F32 || bias_t_ == t_) && d_.mats <= 0x7fffffff;
    if (want == Path::Window && win) {
      window_ = true;
    } else if (want != Path::Window) {
      choose(ctx, b, want);
      if (want == Path::Auto && win) {
        cudaStream_t s = nullptr;
        CUDNN_CHECK(cudnnGetStream(ctx.cudnn, &s));
        const float cur_ms = graph_ ? time_ms([&] { run_fused(*graph_, ctx, b); }) : time_ms([&] { run_gemm(ctx, b, s); });
        const float win_ms = time_ms([&] { run_window(b, s); });
        log_debug("cuda engine: ", label(), ": window attention ", win_ms, " ms, ", graph_ ? "cuDNN " : "batched GEMMs ",
                  cur_ms, " ms");
        if (win_ms < cur_ms) {
          window_ = true;
          graph_.reset();
        }
      }
    }
    // The profile's kind names the path taken.
    kind = window_ ? "Attn window" : graph_ ? "Attn cuDNN" : "Attn GEMM";
  }

  void choose(Context& ctx, const Bindings& b, Path want) {
    const int64_t offsets[4] = {d_.op[0].offset, d_.op[1].offset, d_.op[2].offset, d_.op[3].offset};
    if (want == Path::Gemm || !attention_graph_fits(spec_, offsets) || d_.kt || (d_.period > 0 && bias_half_ < 0)) return;
    // Strided views reach cuDNN as [n, heads, rows, cols]: a bias must be one per head, or one per
    // sample over the heads; packed ones as [mats / group, group]: the bias one per sample then.
    if (d_.strided && d_.period > 0 && d_.group == 1 && d_.period != d_.heads) return;
    if (d_.group > 1 && (d_.period * d_.group != d_.mats || (d_.strided && d_.group != d_.heads))) return;
    if (d_.period > 0 && d_.bias_rows == 1) return;   // cuDNN is given whole [S, S_kv] bias matrices
    std::string why;
    std::shared_ptr<AttentionGraph> g = AttentionGraph::create(ctx.cudnn, spec_, &why);
    if (!g) {
      log_debug("cuda engine: ", label(), ": no cuDNN fused attention (", why, "); batched GEMMs");
      return;
    }
    if (g->workspace_bytes() > ctx.workspace_bytes) {
      log_debug("cuda engine: ", label(), ": cuDNN fused attention wants ", g->workspace_bytes(), " bytes of workspace");
      return;
    }
    cudaStream_t s = nullptr;
    CUDNN_CHECK(cudnnGetStream(ctx.cudnn, &s));
    auto fused = [&] { return run_fused(*g, ctx, b); };
    if (!fused() || cudaStreamSynchronize(s) != cudaSuccess) {
      (void)cudaGetLastError();
      log_debug("cuda engine: ", label(), ": cuDNN fused attention failed to run; batched GEMMs");
      return;
    }
    if (want == Path::Auto) {
      const float gemm_ms = time_ms([&] { run_gemm(ctx, b, s); });
      const float fused_ms = time_ms([&] { fused(); });
      log_debug("cuda engine: ", label(), ": cuDNN fused attention ", fused_ms, " ms, batched GEMMs ", gemm_ms, " ms");
      if (!(fused_ms < gemm_ms)) return;
    }
    graph_ = std::move(g);
  }

  void run(Context& ctx, const Bindings& b, cudaStream_t s) override {
    if (window_) {
      run_window(b, s);
      return;
    }
    if (graph_) {
      if (!run_fused(*graph_, ctx, b)) SLUICE_THROW("cuda engine: ", label(), ": cuDNN's fused attention failed");
      return;
    }
    run_gemm(ctx, b, s);
  }

 private:
  // Operand i's first element of head h in sample 0.
  const void* at(const Bindings& b, int slot, int i, int64_t h = 0) const {
    return static_cast<const char*>(b.at(slot)) + (d_.op[i].offset + h * d_.op[i].head) * static_cast<int64_t>(dtype_size(t_));
  }
  bool run_fused(AttentionGraph& g, Context& ctx, const Bindings& b) const {
    return g.run(ctx.cudnn, at(b, q_, 0), at(b, k_, 1), at(b, v_, 2), bias_half_ >= 0 ? b.at(bias_half_) : nullptr,
                 const_cast<void*>(at(b, y_, 3)), ctx.workspace);
  }

  void run_window(const Bindings& b, cudaStream_t s) const {
    WindowAttentionArgs a;
    a.q = at(b, q_, 0);
    a.k = at(b, k_, 1);
    a.v = at(b, v_, 2);
    a.y = const_cast<void*>(at(b, y_, 3));
    a.bias = d_.period > 0 ? b.at(bias_) : nullptr;
    a.mats = d_.mats;
    a.heads = d_.heads;
    a.s = d_.s;
    a.skv = d_.skv;
    a.d = d_.d;
    a.dv = d_.dv;
    a.period = d_.period;
    a.group = d_.group;
    a.bias_rows = d_.bias_rows;
    for (int i = 0; i < 4; ++i) {
      a.sample[i] = d_.op[i].sample;
      a.head[i] = d_.op[i].head;
      a.row[i] = d_.op[i].row;
    }
    a.kt = d_.kt;
    a.zero_rows = d_.zero_rows;
    a.scale = d_.scale;
    window_attention(t_, bias_t_, a, s);
  }

  void run_gemm(Context& ctx, const Bindings& b, cudaStream_t s) {
    const cudaDataType_t dt = blas_type(t_);
    const cublasComputeType_t ct = blas_compute(ctx.precision);
    const int m = static_cast<int>(d_.skv), n = static_cast<int>(d_.s), kk = static_cast<int>(d_.d);
    const float alpha = d_.scale, zero = 0.f, one = 1.f;
    const Operand &q = d_.op[0], &k = d_.op[1], &v = d_.op[2], &y = d_.op[3];
    const int64_t esize = static_cast<int64_t>(dtype_size(t_)), heads = d_.heads, mat = d_.s * d_.skv;
    // One call over all n * heads matrices where every operand steps from one head to the next as
    // from one sample to the next (packed operands: heads 1); else one call per head over the n
    // samples (views of [n, rows, heads, cols] tensors).
    bool uniform = heads == 1;
    if (!uniform) {
      uniform = true;
      for (const Operand& o : d_.op) uniform = uniform && o.sample == heads * o.head;
    }
    const int calls = uniform ? 1 : static_cast<int>(heads);
    const int batch = static_cast<int>(uniform ? d_.mats : d_.n);
    auto step_of = [&](const Operand& o) { return uniform && heads > 1 ? o.head : o.sample; };
    char* scores = static_cast<char*>(b.at(scores_));
    for (int h = 0; h < calls; ++h) {
      // Column-major: scores^T [skv, s] = op(k) [skv, d] * q^T [d, s].
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, d_.kt ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &alpha,
                                              at(b, k_, 1, h), dt, k.row, step_of(k), at(b, q_, 0, h), dt, q.row,
                                              step_of(q), &zero, scores + h * mat * esize, dt, m,
                                              uniform ? mat : heads * mat, batch, ct, CUBLAS_GEMM_DEFAULT));
    }
    attention_softmax(t_, bias_t_, b.at(scores_), d_.period > 0 ? b.at(bias_) : nullptr, b.at(probs_),
                      d_.mats * d_.s, d_.s, d_.skv, d_.period, d_.group, d_.bias_rows, d_.zero_rows, s);
    const char* probs = static_cast<const char*>(b.at(probs_));
    for (int h = 0; h < calls; ++h) {
      // y^T [dv, s] = v^T [dv, skv] * p^T [skv, s].
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d_.dv), n, m, &one,
                                              at(b, v_, 2, h), dt, v.row, step_of(v), probs + h * mat * esize, dt, m,
                                              uniform ? mat : heads * mat, &zero, const_cast<void*>(at(b, y_, 3, h)), dt,
                                              y.row, step_of(y), batch, ct, CUBLAS_GEMM_DEFAULT));
    }
  }

  DType t_, bias_t_;
  Dims d_;
  AttentionGraphSpec spec_;
  int q_, k_, v_, bias_, bias_half_, scores_, probs_, y_;
  std::shared_ptr<AttentionGraph> graph_;
  bool window_ = false;
};

// Whether a constant bias holds only finite values (cuDNN's kernels are not asked about -inf).
bool finite(const Tensor& t) {
  for (float x : t.as_float())
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

bool lower_attention(Builder& b, const Node& n) {
  if (n.domain != "sluice" || n.op != "Attention") return false;
  const int q = b.input(n, 0), k = b.input(n, 1), v = b.input(n, 2);
  const DType t = b.slot(q).dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) b.fail(n, "q is ", dtype_name(t), ", not a float type");
  if (b.slot(k).dtype != t || b.slot(v).dtype != t)
    b.fail(n, "q, k and v are ", dtype_name(t), ", ", dtype_name(b.slot(k).dtype), " and ", dtype_name(b.slot(v).dtype),
           "; attention reads one type");
  const Shape &qs = b.slot(q).shape, &ks = b.slot(k).shape, &vs = b.slot(v).shape;
  Dims d;
  d.strided = n.get_string("layout", "bhsd") == "strided";
  if (d.strided) {
    // Views of [N, ...] tensors (model/graph.h, model/attention_layout.cpp).
    const std::vector<int64_t> sz = n.get_ints("sizes");
    d.heads = n.get_int("heads", 0);
    if (d.heads < 1 || sz.size() != 4 || qs.empty()) b.fail(n, "strided attention needs heads and sizes [S, S_kv, D, Dv]");
    d.s = sz[0];
    d.skv = sz[1];
    d.d = sz[2];
    d.dv = sz[3];
    d.n = qs[0];
    d.mats = d.n * d.heads;
  } else {
    const std::size_t r = qs.size();
    if (r < 3 || ks.size() != r || vs.size() != r) b.fail(n, "q, k and v must have one rank of 3 or more");
    d.kt = n.get_string("layout", "bhsd") == "bhds";
    d.s = qs[r - 2];
    d.d = qs[r - 1];
    d.skv = vs[r - 2];
    d.dv = vs[r - 1];
    d.mats = shape_numel(qs) / std::max<int64_t>(1, d.s * d.d);
    d.n = d.mats;
    if ((d.kt ? ks[r - 2] : ks[r - 1]) != d.d || (d.kt ? ks[r - 1] : ks[r - 2]) != d.skv)
      b.fail(n, "k ", shape_str(ks), " does not fit q ", shape_str(qs), " and v ", shape_str(vs));
    d.op[0] = {d.s * d.d, 0, 0, d.d};
    d.op[1] = {d.skv * d.d, 0, 0, d.kt ? d.skv : d.d};
    d.op[2] = {d.skv * d.dv, 0, 0, d.dv};
    d.op[3] = {d.s * d.dv, 0, 0, d.dv};
  }
  d.scale = n.get_float("scale", 1.f);
  d.zero_rows = n.get_int("zero_masked_rows", 0) != 0;
  const int y = b.output(n, 0);
  if (b.slot(y).dtype != t) b.fail(n, "the output is ", dtype_name(b.slot(y).dtype), " and q ", dtype_name(t));
  if (d.strided) {
    const int ids[4] = {q, k, v, y};
    const char* keys[4] = {"q_view", "k_view", "v_view", "y_view"};
    for (int i = 0; i < 4; ++i) {
      const Shape& sh = b.slot(ids[i]).shape;
      const std::vector<int64_t> w = n.get_ints(keys[i]);
      const int64_t rows = i == 0 || i == 3 ? d.s : d.skv, cols = i >= 2 ? d.dv : d.d;
      if (w.size() != 3 || sh.empty() || sh[0] != d.n) b.fail(n, keys[i], " does not fit ", shape_str(sh));
      d.op[i] = {shape_numel(sh) / d.n, w[0], w[1], w[2]};
      if (w[0] < 0 || w[1] < 0 || w[2] < cols || w[0] + (d.heads - 1) * w[1] + (rows - 1) * w[2] + cols > d.op[i].sample)
        b.fail(n, keys[i], " does not lie in a sample of ", shape_str(sh));
    }
  }

  // The bias: fp32 for the softmax kernel when it is a constant (its values stay exact), and in
  // the half type for cuDNN.
  int bias = -1, bias_half = -1;
  DType bias_t = DType::F32;
  if (b.has_input(n, 3)) {
    const Tensor* c = b.const_input(n, 3);
    const int64_t numel = c ? c->numel() : b.slot(b.input(n, 3)).numel();
    d.group = n.get_int("bias_group", 1);
    d.bias_rows = n.get_int("bias_rows", d.s) == 1 ? 1 : d.s;
    const int64_t mat = d.bias_rows * d.skv;
    if (mat == 0 || numel % mat != 0 || numel == 0 || d.group < 1 || d.mats % d.group != 0 ||
        (d.mats / d.group) % (numel / mat) != 0)
      b.fail(n, "the bias does not repeat along the ", d.mats, " score matrices");
    d.period = numel / mat;
    if (c) {
      const Tensor f32 = Tensor::from(DType::F32, {d.period, d.bias_rows, d.skv}, c->as_float());
      bias = b.constant(n.name + " bias", f32);
      if (t != DType::F32 && finite(f32)) bias_half = b.constant(n.name + " bias (" + dtype_name(t) + ")", b.to_compute(f32));
    } else {
      bias = b.input(n, 3);
      bias_t = b.slot(bias).dtype;
      if (bias_t == t) bias_half = bias;
    }
  }
  // cuDNN's view: [b, h] with the bias repeating over b.
  AttentionGraphSpec spec;
  spec.t = t;
  spec.s = d.s;
  spec.s_kv = d.skv;
  spec.d = d.d;
  spec.dv = d.dv;
  spec.scale = d.scale;
  spec.bias = d.period > 0;
  spec.bias_per_sample = d.period > 0 && d.group > 1;
  if (d.strided) {
    spec.h = d.heads;
    spec.b = d.n;
    spec.strided = true;
    for (int i = 0; i < 4; ++i) {
      spec.strides[i][0] = d.op[i].sample;
      spec.strides[i][1] = d.op[i].head;
      spec.strides[i][2] = d.op[i].row;
    }
  } else {
    spec.h = d.period > 0 ? (d.group > 1 ? d.group : d.period) : (qs.size() == 4 ? qs[1] : 1);
    spec.b = d.mats / std::max<int64_t>(1, spec.h);
  }

  const int scores = b.temp(t, {d.mats, d.s, d.skv}, n.name + " scores");
  const int probs = scores;   // the softmax works in place
  std::vector<int> uses = {q, k, v, scores, y};
  if (bias >= 0) uses.push_back(bias);
  if (bias_half >= 0 && bias_half != bias) uses.push_back(bias_half);
  b.add(std::make_unique<AttentionStep>(n.name, t, bias_t, d, spec, q, k, v, bias, bias_half, scores, probs, y), uses);
  // The profile's floor: q, k, v, the bias and y once each, as the fused kernel moves them (the GEMM
  // path's scores and probabilities come on top).
  double floor = 0;
  std::vector<int> seen;   // one tensor may hold q, k and v
  for (int id : {q, k, v, y})
    if (std::find(seen.begin(), seen.end(), id) == seen.end()) {
      seen.push_back(id);
      floor += static_cast<double>(b.slot(id).bytes);
    }
  if (bias >= 0) floor += static_cast<double>(b.slot(bias_half >= 0 ? bias_half : bias).bytes);
  b.steps.back()->bytes = floor;
  return true;
}

}  // namespace sluice::cuda
