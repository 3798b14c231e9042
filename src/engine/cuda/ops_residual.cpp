// The residual stream of transformer blocks under fp16/bf16 (engine/residual_stream.h): the
// residual Add, which writes its sum in fp32, and LayerNormalization, which reads fp32 or the
// compute type, keeps its statistics in float and writes each output in its own stored type; the
// bias Add and LayerScale Mul ending a branch before it write fp32 too (one step each, as here).  A
// residual Add that a LayerNormalization reads becomes one step with it: the branch and the
// running sum are read once, the fp32 sum and the normalized compute-type output written once.
#include <cstdlib>
#include <string>

#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

// SLUICE_CUDA_NORM_VEC=0 keeps the warp-per-row LayerNorm and the one-element residual Add of scalar
// loads (kernels_residual.cu), for comparison with the vectorized kernels.
bool norm_vec_on() { return switch_on("SLUICE_CUDA_NORM_VEC"); }

bool float_slot(const TensorSlot& s) { return s.dtype == DType::F32 || s.dtype == DType::F16 || s.dtype == DType::BF16; }

// The slot of float input i in NCHW order as stored (fp32 residual values stay fp32; so does a
// float32 constant added into the stream, a position embedding).
int stored_float(Builder& b, const Node& n, std::size_t i, bool wide_constant = false) {
  const Tensor* t = b.const_input(n, i);
  if (wide_constant && t && t->dtype == DType::F32) return b.constant(n.input(i) + " (float32)", *t);
  const int id = b.relayout(b.input_stored(n, i), false);
  if (!float_slot(b.slot(id))) b.fail(n, "input '", n.input(i), "' is ", dtype_name(b.slot(id).dtype), "; this op runs on float tensors only");
  return id;
}

ResidualOperand operand(const Builder& b, int id) {
  ResidualOperand o;
  o.t = b.slot(id).dtype;
  o.count = b.slot(id).numel();
  return o;
}

// What LayerNormalization node n normalizes: rows and cols of its input shape, scale and bias
// tables (float constants, -1 when absent), epsilon.
struct NormPlan {
  int64_t rows = 1, cols = 1;
  int gamma = -1, beta = -1;
  float eps = 1e-5f;
};

NormPlan norm_plan(Builder& b, const Node& n, const Shape& xs) {
  NormPlan p;
  const int64_t axis = b.axis(n, n.get_int("axis", -1), static_cast<int64_t>(xs.size()));
  for (std::size_t d = 0; d < xs.size(); ++d) (static_cast<int64_t>(d) < axis ? p.rows : p.cols) *= xs[d];
  auto table = [&](std::size_t i, const char* what) -> int {
    if (!b.has_input(n, i)) return -1;
    std::vector<float> v = b.const_floats(n, i, what);
    if (v.size() == 1) v.assign(static_cast<std::size_t>(p.cols), v[0]);
    if (static_cast<int64_t>(v.size()) != p.cols) b.fail(n, what, " has ", v.size(), " values for ", p.cols, " normalized elements");
    return b.constant(n.name + " (" + what + ")", Tensor::from(DType::F32, {p.cols}, v));
  };
  p.gamma = table(1, "scale");
  p.beta = table(2, "B");
  p.eps = n.get_float("epsilon", 1e-5f);
  return p;
}

// The normalization step of n reading x (and adding z unless z < 0), writing `sum` too when >= 0.
void add_norm_step(Builder& b, const Node& n, const std::string& label, int x, int z, int sum, const NormPlan& p,
                   const std::string& kind) {
  const int y = b.output(n, 0);
  const int mean = b.output(n, 1), inv = b.output(n, 2);
  if (mean >= 0 && inv >= 0 && b.slot(mean).dtype != b.slot(inv).dtype)
    b.fail(n, "the Mean and InvStdDev outputs have different types");
  for (int s : {mean, inv})
    if (s >= 0 && (!float_slot(b.slot(s)) || b.slot(s).numel() != p.rows))
      b.fail(n, "the statistics output '", b.slot(s).name, "' must be a float tensor of ", p.rows, " elements");
  ResidualNorm r;
  r.a = operand(b, x);
  if (z >= 0) r.b = operand(b, z);
  r.tsum = sum >= 0 ? b.slot(sum).dtype : DType::F32;
  r.ty = b.slot(y).dtype;
  r.tstat = mean >= 0 ? b.slot(mean).dtype : (inv >= 0 ? b.slot(inv).dtype : DType::F32);
  r.rows = p.rows;
  r.cols = p.cols;
  r.eps = p.eps;
  r.vectorized = norm_vec_on();
  std::vector<int> uses = {x, y};
  for (int s : {z, sum, mean, inv, p.gamma, p.beta})
    if (s >= 0) uses.push_back(s);
  const int g = p.gamma, be = p.beta;
  b.add(label, uses, [=](Context&, const Bindings& bd, cudaStream_t s) {
    ResidualNorm k = r;
    k.a.p = bd.at(x);
    if (z >= 0) k.b.p = bd.at(z);
    if (sum >= 0) k.sum = bd.at(sum);
    k.y = bd.at(y);
    if (mean >= 0) k.mean = bd.at(mean);
    if (inv >= 0) k.inv = bd.at(inv);
    if (g >= 0) k.gamma = bd.at<float>(g);
    if (be >= 0) k.beta = bd.at<float>(be);
    residual_norm(k, s);
  }, kind);
}

// The LayerNormalization reading sum `name` that the Add can do in the same step: over the last
// axis only (a row of the sum is a row of the normalization), its input the sum.
const Node* fusable_norm(const Builder& b, const std::string& name) {
  const ValueInfo& v = b.value(name);
  if (v.dtype != DType::F32) return nullptr;
  for (const Node* c : b.consumers(name)) {
    if (!c->domain.empty() || c->op != "LayerNormalization" || c->input(0) != name) continue;
    const int64_t r = static_cast<int64_t>(v.shape.size());
    const int64_t a = c->get_int("axis", -1);
    if (a != -1 && a != r - 1) continue;
    bool constant_params = true;
    for (std::size_t i = 1; i < 3; ++i) constant_params &= !b.has_input(*c, i) || b.const_input(*c, i) != nullptr;
    if (constant_params) return c;
  }
  return nullptr;
}

}  // namespace

void lower_residual_add(Builder& b, const Node& n) {
  const int x = stored_float(b, n, 0, true), z = stored_float(b, n, 1, true);
  const int y = b.output(n, 0);
  const int64_t count = b.slot(y).numel();
  for (int s : {x, z})
    if (b.slot(s).numel() == 0 || count % b.slot(s).numel() != 0)
      b.fail(n, "input ", shape_str(b.slot(s).shape), " does not repeat onto the sum ", shape_str(b.slot(y).shape));
  const bool multiply = n.op == "Mul";   // a LayerScale at a branch's end (residual_stream.h)
  if (const Node* ln = multiply ? nullptr : fusable_norm(b, n.outputs[0])) {
    const NormPlan p = norm_plan(b, *ln, b.slot(y).shape);
    add_norm_step(b, *ln, n.name + " + " + ln->name, x, z, y, p, "AddLayerNorm");
    b.skip(*ln);
    return;
  }
  ResidualOperand a = operand(b, x), c = operand(b, z);
  const DType ty = b.slot(y).dtype;
  const bool vec = norm_vec_on();
  b.add(n.name, {x, z, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    ResidualOperand ka = a, kc = c;
    ka.p = bd.at(x);
    kc.p = bd.at(z);
    residual_add(ka, kc, bd.at(y), ty, count, s, multiply, vec);
  });
}

void lower_layernorm(Builder& b, const Node& n) {
  const int x = stored_float(b, n, 0);
  const NormPlan p = norm_plan(b, n, b.slot(x).shape);
  add_norm_step(b, n, n.name, x, -1, -1, p, "");
}

}  // namespace sluice::cuda
