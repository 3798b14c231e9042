// Gemm, MatMul and Einsum on cuBLAS.  cuBLAS is column-major and our tensors are row-major: a row-major
// Y[M,N] = A[M,K] B[K,N] is the column-major Y^T = B^T A^T, so every call passes B first.
// Precision: fp32 computes in CUBLAS_COMPUTE_32F under pedantic math (no TF32), tf32 in
// CUBLAS_COMPUTE_32F_FAST_TF32, fp16/bf16 store half types and accumulate in fp32.
//
// A product whose only reader adds a bias vector (a constant [N] or [1, ..., N]; Gemm's own C of
// that shape), and whose bias Add's only reader may be a Gelu, is one cuBLASLt step with the bias
// (and GELU) as its epilogue (gemm_lt.h): the product is written once, in the type the last fused
// op stores (fp32 for a branch tail of the residual stream).  cuBLASLt's GELU is the tanh form;
// ONNX's default is the erf form, which is fused only at bf16: there the two differ by at most
// 4.7e-4 (1.8e-4 RMS over preactivations of N(0, 1.5)), a ninth of bf16's own rounding of the
// output (1.7e-3 RMS), and the fused step rounds once where the unfused ops round three times.
// At fp16 that difference would be as large as fp16's rounding, at fp32/tf32 larger: there only
// the tanh form is fused.  SLUICE_CUDA_GEMM_EPILOGUE=0 turns the fusion off.
//
// A residual Add after such a product (its bias Add, no Gelu) is taken into the same step as
// cuBLASLt's C with beta = 1, where the residual is a whole tensor of the sum's shape (no
// broadcasting) stored in the sum's type and in the product's memory order: directly (Y + R) or
// through the channels-last view of a Transpose (0, 3, 1, 2) (ConvNeXt's fc2: the product is
// [N, H, W, C], the block's input is held channels-last, ops_layout.cpp), and where the residual is
// already computed when the product is lowered.  The sum is rounded once, from the accumulators.
// Residual Adds of the fp32 residual stream are left to ops_residual.cpp (AddLayerNorm), and
// SLUICE_CUDA_GEMM_RESIDUAL=0 keeps the Add a step of its own.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_raii.h"
#include "core/params.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/precision_types.h"

namespace sluice::cuda {
namespace {

// One (batched) product in row-major terms: Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b].
struct GemmCall {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_y = 0;   // in elements
  int64_t offset_a = 0, offset_b = 0, offset_y = 0;              // in elements
  float alpha = 1.f, beta = 0.f;
};

void enqueue_gemm(Context& ctx, DType t, const GemmCall& c, const void* a, const void* b, void* y) {
  const std::size_t es = dtype_size(t);
  const char* pa = static_cast<const char*>(a) + c.offset_a * static_cast<int64_t>(es);
  const char* pb = static_cast<const char*>(b) + c.offset_b * static_cast<int64_t>(es);
  char* py = static_cast<char*>(y) + c.offset_y * static_cast<int64_t>(es);
  // Column-major view: B^T (n x k) times A^T (k x m).
  const cublasOperation_t op_b = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldb = c.trans_b ? c.k : c.n;
  const int64_t lda = c.trans_a ? c.m : c.k;
  const cudaDataType_t dt = blas_type(t);
  if (c.batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_b, op_a, static_cast<int>(c.n), static_cast<int>(c.m), static_cast<int>(c.k),
                              &c.alpha, pb, dt, static_cast<int>(ldb), pa, dt, static_cast<int>(lda), &c.beta, py, dt,
                              static_cast<int>(c.n), blas_compute(ctx.precision), CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, op_b, op_a, static_cast<int>(c.n), static_cast<int>(c.m),
                                            static_cast<int>(c.k), &c.alpha, pb, dt, static_cast<int>(ldb), c.stride_b, pa,
                                            dt, static_cast<int>(lda), c.stride_a, &c.beta, py, dt, static_cast<int>(c.n),
                                            c.stride_y, static_cast<int>(c.batch), blas_compute(ctx.precision),
                                            CUBLAS_GEMM_DEFAULT));
  }
}

// ---- epilogues (cuBLASLt) ------------------------------------------------------------------------

bool gemm_epilogue_on() { return switch_on("SLUICE_CUDA_GEMM_EPILOGUE"); }

bool gemm_residual_on() { return switch_on("SLUICE_CUDA_GEMM_RESIDUAL"); }

bool float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The nodes a product's epilogue takes over, and the bias it adds.
struct EpiloguePlan {
  const Node* add = nullptr;    // the bias Add (none when it is Gemm's own C)
  const Node* gelu = nullptr;   // the Gelu after the bias, when fused
  const Node* last = nullptr;   // whose output the step writes
  std::vector<float> bias;      // one value per output column
  Act act = Act::Gelu;
  const Node* view = nullptr;   // the Transpose (0, 3, 1, 2) viewed channels-last before the residual Add
  const Node* residual = nullptr;   // the residual Add, when fused (then `last`)
  int residual_slot = -1;           // its other operand
};

// The only reader of `name` (nullptr when it has several or none, or is a graph output).
const Node* only_reader(const Builder& b, const std::string& name) {
  if (b.is_graph_output(name)) return nullptr;
  const auto r = b.consumers(name);
  return r.size() == 1 ? r[0] : nullptr;
}

// Whether the value `name` of node `last` can be written by the product step: stored in the
// compute type, or in fp32 (the residual stream), with the product's shape.
bool writable(const Builder& b, const std::string& name, const Shape& shape) {
  const ValueInfo* v = b.graph.value(name);
  if (!v || v->shape != shape || !float_type(v->dtype)) return false;
  const DType t = b.stored(name, v->dtype);
  return t == b.compute || t == DType::F32;
}

// The values of constant c as a bias of `cols` columns: c is a single value, or [cols] after
// leading 1s; empty otherwise.
std::vector<float> bias_values(const Tensor& c, int64_t cols, std::size_t max_rank) {
  if (!float_type(c.dtype) || c.shape.size() > max_rank) return {};
  std::size_t lead = 0;
  while (lead < c.shape.size() && c.shape[lead] == 1) ++lead;
  std::vector<float> v = c.as_float();
  if (v.size() == 1) return std::vector<float>(static_cast<std::size_t>(cols), v[0]);
  if (c.shape.size() - lead != 1 || c.shape.back() != cols) return {};
  return v;
}

// A Gelu reading `name` that the epilogue can compute (see the top of the file).
void plan_gelu(const Builder& b, const std::string& name, const Shape& shape, EpiloguePlan* p) {
  if (b.is_wide(name)) return;   // a branch tail: its reader is the residual stream, no Gelu
  const Node* g = only_reader(b, name);
  if (!g || !g->domain.empty() || g->op != "Gelu" || g->input(0) != name || !b.has_output(*g, 0)) return;
  if (!writable(b, g->outputs[0], shape)) return;
  const bool tanh = g->get_string("approximate", "none") == "tanh";
  if (!tanh && b.compute != DType::BF16) return;
  p->gelu = g;
  p->last = g;
  p->act = tanh ? Act::GeluTanh : Act::Gelu;
}

// A residual Add reading `name` (the bias Add's output, of the product's shape) that the step can
// take as C (see the top of the file).
void plan_residual(Builder& b, const std::string& name, const Shape& shape, EpiloguePlan* p) {
  if (!gemm_residual_on() || b.is_wide(name)) return;
  const Node* r = only_reader(b, name);
  const Node* view = nullptr;
  std::string in = name;
  if (r && r->domain.empty() && r->op == "Transpose" && r->input(0) == name && b.has_output(*r, 0) && shape.size() == 4 &&
      b.nhwc_enabled() && r->get_ints("perm") == std::vector<int64_t>{0, 3, 1, 2}) {
    // The view ops_layout.cpp makes of a plain [N, H, W, C] (SLUICE_CUDA_LAYOUT_VIEWS=1).
    if (!param_on("SLUICE_CUDA_LAYOUT_VIEWS")) return;
    view = r;
    in = r->outputs[0];
    r = only_reader(b, in);
  }
  if (!r || !r->domain.empty() || r->op != "Add" || r->inputs.size() != 2 || !b.has_output(*r, 0)) return;
  const int k = r->inputs[0] == in ? 1 : (r->inputs[1] == in ? 0 : -1);
  if (k < 0 || r->inputs[static_cast<std::size_t>(k)] == in) return;
  const std::string& other = r->inputs[static_cast<std::size_t>(k)];
  const std::string& out = r->outputs[0];
  if (b.graph.constant(other) || !b.lowered(other) || b.is_wide(out) || b.is_wide(other)) return;
  const ValueInfo* ov = b.graph.value(out);
  const ValueInfo* iv = b.graph.value(in);
  const ValueInfo* rv = b.graph.value(other);
  if (!ov || !iv || !rv || rv->shape != ov->shape || iv->shape != ov->shape || !float_type(ov->dtype)) return;
  const DType t = b.stored(out, ov->dtype);
  if (t != b.stored(name, b.graph.value(name)->dtype)) return;
  const int rs = b.input_any(*r, static_cast<std::size_t>(k));
  const TensorSlot& rslot = b.slot(rs);
  if (rslot.dtype != t || rslot.numel() != shape_numel(shape)) return;
  if (view) {
    // The residual must lie as [N, H, W, C] too, and the sum is written channels-last.
    if (!rslot.nhwc || b.is_graph_output(out) || b.is_graph_output(in)) return;
  } else {
    if (rslot.nhwc || ov->shape != shape || !writable(b, out, shape)) return;
  }
  p->view = view;
  p->residual = r;
  p->residual_slot = rs;
  p->last = r;
}

// The bias Add (and Gelu) after product node n, whose output has `shape` with `cols` columns.
bool plan_epilogue(Builder& b, const Node& n, const Shape& shape, int64_t cols, EpiloguePlan* p) {
  if (!b.has_output(n, 0) || !gemm_epilogue_on()) return false;
  const std::string& out = n.outputs[0];
  const Node* add = only_reader(b, out);
  if (!add || !add->domain.empty() || add->op != "Add" || add->inputs.size() != 2 || !b.has_output(*add, 0)) return false;
  const int k = add->inputs[0] == out ? 1 : (add->inputs[1] == out ? 0 : -1);
  if (k < 0 || add->inputs[static_cast<std::size_t>(k)] == out) return false;
  const ValueInfo* v = b.graph.value(out);
  const Tensor* c = b.graph.constant(add->inputs[static_cast<std::size_t>(k)]);
  if (!v || v->shape != shape || !c || !writable(b, add->outputs[0], shape)) return false;
  p->bias = bias_values(*c, cols, shape.size());
  if (p->bias.empty()) return false;
  if (swish_takes_bias(b, *add)) {
    // The Swish step after it adds the bias (SLUICE_CUDA_SWISH_BIAS=1): the product alone, on
    // cuBLASLt all the same (its algorithm chosen as the others are).
    p->bias.clear();
    p->last = &n;
    return true;
  }
  p->add = add;
  p->last = add;
  plan_gelu(b, add->outputs[0], shape, p);
  if (!p->gelu) plan_residual(b, add->outputs[0], shape, p);
  return true;
}

// Product c of a and w with the planned epilogue as one cuBLASLt step.
void lower_with_epilogue(Builder& b, const Node& n, int a, int w, const GemmCall& c, const EpiloguePlan& p) {
  const int y = b.output(*p.last, 0, p.view != nullptr);
  if (b.slot(y).numel() != c.batch * c.m * c.n) b.fail(n, "output ", shape_str(b.slot(y).shape), " does not match the product");
  if (p.view && !b.is_nhwc(y)) b.fail(n, "the residual sum after the channels-last view is not channels-last");
  LtGemmSpec s;
  s.m = c.m;
  s.n = c.n;
  s.k = c.k;
  s.trans_a = c.trans_a;
  s.trans_b = c.trans_b;
  s.batch = c.batch;
  s.stride_a = c.stride_a;
  s.stride_b = c.stride_b;
  s.stride_y = c.stride_y;
  s.alpha = c.alpha;
  s.ab = b.compute;
  s.y = b.slot(y).dtype;   // the compute type, or fp32 for a branch tail of the residual stream
  s.precision = b.precision;
  s.epilogue = p.gelu ? GemmEpilogue::BiasGelu : p.bias.empty() ? GemmEpilogue::None : GemmEpilogue::Bias;
  s.gelu = p.act;
  int bs = -1;
  if (!p.bias.empty()) {
    Tensor bias = Tensor::from(DType::F32, {c.n}, p.bias);
    if (s.y != DType::F32) bias = b.to_compute(bias);
    bs = b.constant((p.add ? p.add->name : n.name) + " (bias, " + dtype_name(s.y) + ")", bias);
  }
  std::vector<int> uses = {a, w, y};
  if (bs >= 0) uses.push_back(bs);
  if (p.residual) uses.push_back(p.residual_slot);
  b.add(make_lt_gemm_step(n.name, s, a, w, bs, y, p.residual ? p.residual_slot : -1), uses,
        n.op + (p.gelu ? "+Bias+Gelu" : p.residual ? "+Bias+Residual" : bs >= 0 ? "+Bias" : ""));
  if (p.add) b.skip(*p.add);
  if (p.gelu) b.skip(*p.gelu);
  if (p.view) b.skip(*p.view);
  if (p.residual) b.skip(*p.residual);
}

void check_float(const Builder& b, const Node& n, int slot) {
  if (b.slot(slot).dtype != b.compute)
    b.fail(n, "tensor '", b.slot(slot).name, "' is ", dtype_name(b.slot(slot).dtype), "; products run on ",
           dtype_name(b.compute));
}

void lower_gemm_op(Builder& b, const Node& n) {
  const int a = b.input(n, 0), w = b.input(n, 1);
  check_float(b, n, a);
  check_float(b, n, w);
  const Shape as = b.slot(a).shape, ws = b.slot(w).shape;
  if (as.size() != 2 || ws.size() != 2) b.fail(n, "Gemm needs 2-D inputs, not ", shape_str(as), " and ", shape_str(ws));
  GemmCall c;
  c.trans_a = n.get_int("transA", 0) != 0;
  c.trans_b = n.get_int("transB", 0) != 0;
  c.m = c.trans_a ? as[1] : as[0];
  c.k = c.trans_a ? as[0] : as[1];
  c.n = c.trans_b ? ws[0] : ws[1];
  if ((c.trans_b ? ws[1] : ws[0]) != c.k) b.fail(n, "inner dimensions of ", shape_str(as), " and ", shape_str(ws), " differ");
  c.alpha = n.get_float("alpha", 1.f);
  const float beta = n.get_float("beta", 1.f);
  const bool has_c = b.has_input(n, 2) && beta != 0.f;
  EpiloguePlan plan;
  const Shape ys = {c.m, c.n};
  if (!has_c) {
    if (plan_epilogue(b, n, ys, c.n, &plan)) return lower_with_epilogue(b, n, a, w, c, plan);
  } else if (const Tensor* cc = b.const_input(n, 2); cc && b.has_output(n, 0) && gemm_epilogue_on() &&
                                                     writable(b, n.outputs[0], ys)) {
    // C a constant row [N] (or [1, N], or one value): beta * C is the bias.
    plan.bias = bias_values(*cc, c.n, 2);
    if (!plan.bias.empty()) {
      for (auto& v : plan.bias) v *= beta;
      plan.last = &n;
      plan_gelu(b, n.outputs[0], ys, &plan);
      if (!plan.gelu) plan_residual(b, n.outputs[0], ys, &plan);
      return lower_with_epilogue(b, n, a, w, c, plan);
    }
  }
  const int y = b.output(n, 0);
  const DType t = b.compute;
  std::vector<int> uses = {a, w, y};
  if (has_c) {
    // Y starts as C broadcast to [M, N]; cuBLAS adds beta * Y.
    const int cin = b.input(n, 2);
    check_float(b, n, cin);
    const Shape cs = b.slot(cin).shape;
    if (cs.size() > 2) b.fail(n, "C ", shape_str(cs), " does not broadcast to [M, N]");
    CopyShape cp;
    cp.rank = 2;
    cp.out[0] = c.m;
    cp.out[1] = c.n;
    const int64_t c0 = cs.size() == 2 ? cs[0] : 1, c1 = cs.empty() ? 1 : cs.back();
    if ((c0 != 1 && c0 != c.m) || (c1 != 1 && c1 != c.n)) b.fail(n, "C ", shape_str(cs), " does not broadcast to [", c.m, ",", c.n, "]");
    cp.in_dim[0] = c0;
    cp.in_dim[1] = c1;
    cp.in_stride[0] = c1;
    cp.in_stride[1] = 1;
    const std::size_t es = dtype_size(t);
    b.add(n.name + " C", {cin, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(cin), bd.at(y), cp, s); });
    c.beta = beta;
    uses.push_back(cin);
  }
  b.add(n.name, uses, [=](Context& ctx, const Bindings& bd, cudaStream_t) { enqueue_gemm(ctx, t, c, bd.at(a), bd.at(w), bd.at(y)); });
}

void lower_matmul(Builder& b, const Node& n) {
  const int a = b.input(n, 0), w = b.input(n, 1);
  check_float(b, n, a);
  check_float(b, n, w);
  Shape as = b.slot(a).shape, ws = b.slot(w).shape;
  if (as.empty() || ws.empty()) b.fail(n, "MatMul of a scalar");
  const bool vector_w = ws.size() == 1;
  // 1-D operands: [K] is [1, K] on the left and [K, 1] on the right.
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (ws.size() == 1) ws.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), nn = ws.back();
  if (ws[ws.size() - 2] != k) b.fail(n, "inner dimensions of ", shape_str(as), " and ", shape_str(ws), " differ");
  const std::size_t rank = std::max(as.size(), ws.size());
  // Batch dims, right-aligned and broadcast.
  std::vector<int64_t> ba(rank - 2, 1), bw(rank - 2, 1), bo(rank - 2, 1);
  for (std::size_t i = 0; i + 2 < as.size(); ++i) ba[rank - as.size() + i] = as[i];
  for (std::size_t i = 0; i + 2 < ws.size(); ++i) bw[rank - ws.size() + i] = ws[i];
  int64_t batch = 1, batch_a = 1, batch_w = 1;
  for (std::size_t i = 0; i < bo.size(); ++i) {
    if (ba[i] != bw[i] && ba[i] != 1 && bw[i] != 1) b.fail(n, "batch dims of ", shape_str(as), " and ", shape_str(ws), " do not broadcast");
    bo[i] = std::max(ba[i], bw[i]);
    batch *= bo[i];
    batch_a *= ba[i];
    batch_w *= bw[i];
  }
  const DType t = b.compute;
  std::vector<GemmCall> calls;
  GemmCall c;
  c.m = m;
  c.n = nn;
  c.k = k;
  if (batch_w == 1) {
    // Weights shared by the whole batch: one product with the batch folded into M.
    c.m = m * batch_a;   // batch_a == batch here: the output batch comes from A alone
    calls.push_back(c);
  } else if ((batch_a == batch || batch_a == 1) && batch_w == batch) {
    c.batch = batch;
    c.stride_a = batch_a == 1 ? 0 : m * k;
    c.stride_b = k * nn;
    c.stride_y = m * nn;
    calls.push_back(c);
  } else {
    // General broadcasting: one product per output batch index.
    for (int64_t i = 0; i < batch; ++i) {
      int64_t rem = i, ia = 0, iw = 0, sa = 1, sw = 1;
      for (std::size_t d = bo.size(); d-- > 0;) {
        const int64_t idx = rem % bo[d];
        rem /= bo[d];
        ia += (ba[d] == 1 ? 0 : idx) * sa;
        iw += (bw[d] == 1 ? 0 : idx) * sw;
        sa *= ba[d];
        sw *= bw[d];
      }
      GemmCall ci = c;
      ci.offset_a = ia * m * k;
      ci.offset_b = iw * k * nn;
      ci.offset_y = i * m * nn;
      calls.push_back(ci);
    }
  }
  // One product (the batch folded into M, or strided over both operands) with the bias Add after
  // it: one cuBLASLt step with the epilogue.
  EpiloguePlan plan;
  if (calls.size() == 1 && !vector_w && (calls[0].batch == 1 || calls[0].stride_a != 0) && b.has_output(n, 0)) {
    const ValueInfo* v = b.graph.value(n.outputs[0]);
    if (v && shape_numel(v->shape) == batch * m * nn && !v->shape.empty() && v->shape.back() == nn &&
        plan_epilogue(b, n, v->shape, nn, &plan))
      return lower_with_epilogue(b, n, a, w, calls[0], plan);
  }
  const int y = b.output(n, 0);
  if (static_cast<int64_t>(b.slot(y).numel()) != batch * m * nn) b.fail(n, "output ", shape_str(b.slot(y).shape), " does not match the product");
  b.add(n.name, {a, w, y}, [=](Context& ctx, const Bindings& bd, cudaStream_t) {
    for (const auto& call : calls) enqueue_gemm(ctx, t, call, bd.at(a), bd.at(w), bd.at(y));
  });
}

// ---- Einsum ----------------------------------------------------------------------------------------
// Lowered to what the library does well: letters summed in one operand only are reduced away
// first, then the operands are permuted (when their order is not already one cuBLAS reads,
// transposed or not) to [batch, M, K] and [batch, K, N], multiplied by one strided-batched GEMM,
// and the [batch, M, N] product is permuted into the output's letter order.

struct EinsumSpec {
  std::vector<std::string> in;   // one letter string per operand (ellipsis dims as digits)
  std::string out;
};

EinsumSpec parse_einsum(const Builder& b, const Node& n, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : n.get_string("equation", "")) if (c != ' ') eq += c;
  if (eq.empty()) b.fail(n, "the equation is missing");
  const std::size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (std::size_t at = 0;;) {
    const std::size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (terms.size() != shapes.size()) b.fail(n, "the equation '", eq, "' names ", terms.size(), " operands, the node has ", shapes.size());
  // Ellipses become the digits '0'.. right-aligned: the last ellipsis dim is the same digit in every operand.
  int ell = 0;
  EinsumSpec s;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    std::string t = terms[i];
    const std::size_t dots = t.find("...");
    const int64_t explicit_letters = static_cast<int64_t>(t.size()) - (dots == std::string::npos ? 0 : 3);
    const int64_t rank = static_cast<int64_t>(shapes[i].size());
    if (dots == std::string::npos) {
      if (explicit_letters != rank) b.fail(n, "term '", t, "' has ", explicit_letters, " letters for an operand of rank ", rank);
    } else {
      const int64_t e = rank - explicit_letters;
      if (e < 0 || e > 8) b.fail(n, "term '", t, "' does not fit an operand of rank ", rank);
      ell = std::max(ell, static_cast<int>(e));
      std::string digits;
      for (int64_t k = 0; k < e; ++k) digits += static_cast<char>('0' + (8 - e + k));
      t = t.substr(0, dots) + digits + t.substr(dots + 3);
    }
    for (char c : t)
      if (!std::isalpha(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)))
        b.fail(n, "the equation '", eq, "' has the character '", c, "'");
    s.in.push_back(t);
  }
  std::string all_digits;
  for (int k = 0; k < ell; ++k) all_digits += static_cast<char>('0' + (8 - ell + k));
  if (arrow != std::string::npos) {
    std::string o = eq.substr(arrow + 2);
    const std::size_t dots = o.find("...");
    if (dots != std::string::npos) o = o.substr(0, dots) + all_digits + o.substr(dots + 3);
    s.out = o;
  } else {
    // Implicit output: the ellipsis dims, then the letters used once, alphabetically.
    std::map<char, int> uses;
    for (const auto& t : s.in)
      for (char c : t) ++uses[c];
    s.out = all_digits;
    for (const auto& [c, k] : uses)
      if (k == 1 && std::isalpha(static_cast<unsigned char>(c))) s.out += c;
  }
  for (std::size_t i = 0; i < s.out.size(); ++i) {
    if (s.out.find(s.out[i], i + 1) != std::string::npos) b.fail(n, "the letter '", s.out[i], "' repeats in the output");
    bool found = false;
    for (const auto& t : s.in) found |= t.find(s.out[i]) != std::string::npos;
    if (!found) b.fail(n, "the output letter '", s.out[i], "' is in no operand");
  }
  return s;
}

class EinsumLowering {
 public:
  EinsumLowering(Builder& b, const Node& n) : b_(b), n_(n) {}

  void run() {
    std::vector<int> ops;
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < n_.inputs.size(); ++i) {
      ops.push_back(b_.input(n_, i));
      check_float(b_, n_, ops.back());
      shapes.push_back(b_.slot(ops.back()).shape);
    }
    if (ops.empty() || ops.size() > 2) b_.fail(n_, ops.size(), " operands: Einsum of one or two operands is supported");
    EinsumSpec spec = parse_einsum(b_, n_, shapes);
    // A letter repeated within one operand takes that operand's diagonal first.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string unique = diagonal_letters(spec.in[i]);
      if (unique == spec.in[i]) continue;
      ops[i] = diagonal(ops[i], spec.in[i], shapes[i], unique);
      shapes[i] = b_.slot(ops[i]).shape;
      spec.in[i] = unique;
    }
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (std::size_t d = 0; d < spec.in[i].size(); ++d) {
        const char c = spec.in[i][d];
        const int64_t size = shapes[i][d];
        const auto it = dims_.find(c);
        if (it != dims_.end() && it->second != size)
          b_.fail(n_, "the letter '", c, "' is ", it->second, " in one operand and ", size, " in another (broadcasting is not supported)");
        dims_[c] = size;
      }
    const int y = b_.output(n_, 0);
    const std::string& out = spec.out;
    if (ops.size() == 1) {
      const auto [x, letters] = sum_out(ops[0], spec.in[0], out);
      permute(x, letters, out, y);
      return;
    }
    auto [a, la] = sum_out(ops[0], spec.in[0], out + spec.in[1]);
    auto [w, lw] = sum_out(ops[1], spec.in[1], out + spec.in[0]);
    std::string batch, m, k, nn;
    for (char c : out) {
      const bool in_a = la.find(c) != std::string::npos, in_w = lw.find(c) != std::string::npos;
      if (in_a && in_w) batch += c;
      else if (in_a) m += c;
      else nn += c;
    }
    for (char c : la)
      if (out.find(c) == std::string::npos) k += c;   // contracted: in both operands (sum_out kept only those)
    GemmCall call;
    call.batch = size(batch);
    call.m = size(m);
    call.k = size(k);
    call.n = size(nn);
    if (la == batch + k + m) call.trans_a = true;
    else if (la != batch + m + k) a = permute(a, la, batch + m + k, -1);
    if (lw == batch + nn + k) call.trans_b = true;
    else if (lw != batch + k + nn) w = permute(w, lw, batch + k + nn, -1);
    call.stride_a = call.m * call.k;
    call.stride_b = call.k * call.n;
    call.stride_y = call.m * call.n;
    const std::string product = batch + m + nn;
    const int dst = product == out ? y : b_.temp(b_.compute, letter_shape(product), n_.name + " (product)");
    const DType t = b_.compute;
    if (call.k == 0) {
      const std::size_t bytes = b_.slot(dst).bytes;
      b_.add(n_.name, {dst}, [=](Context&, const Bindings& bd, cudaStream_t s) { CUDA_CHECK(cudaMemsetAsync(bd.at(dst), 0, bytes, s)); });
    } else if (call.batch * call.m * call.n > 0) {
      const int aa = a, ww = w;
      b_.add(n_.name, {aa, ww, dst}, [=](Context& ctx, const Bindings& bd, cudaStream_t) {
        enqueue_gemm(ctx, t, call, bd.at(aa), bd.at(ww), bd.at(dst));
      });
    }
    if (dst != y) permute(dst, product, out, y);
  }

 private:
  int64_t size(const std::string& letters) const {
    int64_t p = 1;
    for (char c : letters) p *= dims_.at(c);
    return p;
  }
  Shape letter_shape(const std::string& letters) const {
    Shape s;
    for (char c : letters) s.push_back(dims_.at(c));
    return s;
  }

  // The letters of a term, each once, in the order they first appear.
  static std::string diagonal_letters(const std::string& letters) {
    std::string u;
    for (char c : letters)
      if (u.find(c) == std::string::npos) u += c;
    return u;
  }

  // The diagonal of x over its repeated letters: one strided copy whose stride for a letter is the
  // sum of the strides of every dim it names (x[i, i] is at i * (stride0 + stride1)).
  int diagonal(int x, const std::string& letters, const Shape& shape, const std::string& unique) {
    std::map<char, int64_t> dim, stride;
    int64_t acc = 1;
    for (std::size_t d = letters.size(); d-- > 0;) {
      const char c = letters[d];
      const auto it = dim.find(c);
      if (it != dim.end() && it->second != shape[d])
        b_.fail(n_, "the letter '", c, "' repeats in one operand over dims of ", it->second, " and ", shape[d], " (a diagonal needs equal sizes)");
      dim[c] = shape[d];
      stride[c] += acc;
      acc *= shape[d];
    }
    if (unique.size() > static_cast<std::size_t>(kMaxRank)) b_.fail(n_, "more than ", kMaxRank, " letters in one operand");
    Shape ds;
    CopyShape cs;
    cs.rank = static_cast<int>(unique.size());
    for (std::size_t d = 0; d < unique.size(); ++d) {
      ds.push_back(dim.at(unique[d]));
      cs.out[d] = cs.in_dim[d] = dim.at(unique[d]);
      cs.in_stride[d] = stride.at(unique[d]);
    }
    const int dst = b_.temp(b_.slot(x).dtype, ds, n_.name + " (diagonal " + unique + ")");
    const std::size_t es = dtype_size(b_.slot(x).dtype);
    b_.add(n_.name + " diagonal", {x, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      strided_copy(es, bd.at(x), bd.at(dst), cs, s);
    }, "Layout");
    return dst;
  }

  // `letters` of slot x reordered as `to` into dst (a new temp when dst < 0; x itself when the
  // order already matches and no dst is asked).
  int permute(int x, const std::string& letters, const std::string& to, int dst) {
    if (letters == to && dst < 0) return x;
    if (dst < 0) dst = b_.temp(b_.slot(x).dtype, letter_shape(to), n_.name + " (" + to + ")");
    if (letters == to) {
      const std::size_t bytes = b_.slot(dst).bytes;
      b_.add(n_.name, {x, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
        CUDA_CHECK(cudaMemcpyAsync(bd.at(dst), bd.at(x), bytes, cudaMemcpyDeviceToDevice, s));
      });
      return dst;
    }
    if (to.size() > static_cast<std::size_t>(kMaxRank)) b_.fail(n_, "more than ", kMaxRank, " letters in one operand");
    std::map<char, int64_t> stride;
    int64_t acc = 1;
    for (std::size_t d = letters.size(); d-- > 0;) {
      stride[letters[d]] = acc;
      acc *= dims_.at(letters[d]);
    }
    CopyShape cs;
    cs.rank = static_cast<int>(to.size());
    for (std::size_t d = 0; d < to.size(); ++d) {
      cs.out[d] = dims_.at(to[d]);
      cs.in_dim[d] = cs.out[d];
      cs.in_stride[d] = stride.at(to[d]);
    }
    if (to.empty()) {
      cs.rank = 1;
      cs.out[0] = cs.in_dim[0] = 1;
      cs.in_stride[0] = 1;
    }
    const std::size_t es = dtype_size(b_.slot(x).dtype);
    b_.add(n_.name + " permute", {x, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      strided_copy(es, bd.at(x), bd.at(dst), cs, s);
    }, "Layout");
    return dst;
  }

  // Sums away the letters of x that `keep` does not name (in fp32 inside the reduction kernel).
  std::pair<int, std::string> sum_out(int x, const std::string& letters, const std::string& keep) {
    std::string kept, gone;
    for (char c : letters) (keep.find(c) != std::string::npos ? kept : gone) += c;
    if (gone.empty()) return {x, letters};
    const int src = permute(x, letters, kept + gone, -1);
    const int dst = b_.temp(b_.compute, letter_shape(kept), n_.name + " (sum over " + gone + ")");
    const int64_t outer = size(kept), r = size(gone);
    const DType t = b_.compute;
    b_.add(n_.name + " sum", {src, dst}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      reduce(t, RedOp::Sum, bd.at(src), bd.at(dst), outer, r, 1, s);
    }, "ReduceSum");
    return {dst, kept};
  }

  Builder& b_;
  const Node& n_;
  std::map<char, int64_t> dims_;
};

}  // namespace

bool lower_gemm(Builder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op == "Gemm") lower_gemm_op(b, n);
  else if (n.op == "MatMul") lower_matmul(b, n);
  else if (n.op == "Einsum") EinsumLowering(b, n).run();
  else return false;
  return true;
}

}  // namespace sluice::cuda
