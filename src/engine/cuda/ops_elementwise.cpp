// Elementwise ops: activations, broadcasting arithmetic, casts, the input normalization and the
// normalizations (BatchNormalization that was not folded, GroupNormalization, InstanceNormalization;
// LayerNormalization is in ops_residual.cpp).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/params.h"

#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

// A float input in the compute type; float constants of another type are converted.  `any`
// keeps a channels-last tensor as it is.
int float_input(Builder& b, const Node& n, std::size_t i, bool any = false) {
  const int id = any ? b.input_any(n, i) : b.input(n, i);
  if (b.slot(id).dtype == b.compute) return id;
  if (const Tensor* t = b.const_input(n, i)) {
    Tensor c(b.compute, t->shape);
    const std::vector<float> f = t->as_float();
    for (std::size_t k = 0; k < f.size(); ++k) {
      const uint64_t bits = scalar_bits(b.compute, f[k]);
      std::memcpy(c.bytes.data() + k * dtype_size(b.compute), &bits, dtype_size(b.compute));
    }
    return b.constant(n.input(i) + " (" + dtype_name(b.compute) + ")", c);
  }
  b.fail(n, "input '", n.input(i), "' is ", dtype_name(b.slot(id).dtype), "; this op runs on float tensors only");
}

// Right-aligned NumPy broadcasting of a and b onto out, with adjacent dims merged when both
// operands walk them contiguously (or both broadcast them), so most calls end up 1-D or 2-D.
BroadcastShape broadcast_shape(const Builder& bl, const Node& n, const Shape& out, const Shape& a, const Shape& b) {
  const std::size_t r = out.size();
  std::vector<int64_t> o(out.begin(), out.end()), sa(r, 0), sb(r, 0);
  auto strides = [&](const Shape& s, std::vector<int64_t>& st) {
    if (s.size() > r) bl.fail(n, "input ", shape_str(s), " has more dims than the output ", shape_str(out));
    int64_t acc = 1;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::size_t d = r - 1 - i;
      const int64_t dim = s[s.size() - 1 - i];
      if (dim != 1 && dim != o[d]) bl.fail(n, "input ", shape_str(s), " does not broadcast to ", shape_str(out));
      st[d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  };
  strides(a, sa);
  strides(b, sb);
  // Merge from the innermost dim outwards.
  std::vector<int64_t> mo, ma, mb;
  for (std::size_t i = r; i-- > 0;) {
    if (o[i] == 1) continue;
    if (!mo.empty()) {
      const bool a_ok = (sa[i] == 0 && ma.back() == 0) || (ma.back() != 0 && sa[i] == ma.back() * mo.back());
      const bool b_ok = (sb[i] == 0 && mb.back() == 0) || (mb.back() != 0 && sb[i] == mb.back() * mo.back());
      if (a_ok && b_ok) {
        mo.back() *= o[i];
        continue;
      }
    }
    mo.push_back(o[i]);
    ma.push_back(sa[i]);
    mb.push_back(sb[i]);
  }
  if (mo.empty()) {
    mo.push_back(1);
    ma.push_back(0);
    mb.push_back(0);
  }
  if (mo.size() > static_cast<std::size_t>(kMaxRank)) bl.fail(n, "broadcast over more than ", kMaxRank, " dims");
  BroadcastShape s;
  s.rank = static_cast<int>(mo.size());
  for (int d = 0; d < s.rank; ++d) {
    const std::size_t src = mo.size() - 1 - static_cast<std::size_t>(d);
    s.out[d] = mo[src];
    s.sa[d] = ma[src];
    s.sb[d] = mb[src];
  }
  return s;
}

bool unary_act(const Node& n, ActParams* p) {
  static const std::map<std::string, Act> table = {
      {"Relu", Act::Relu}, {"Sigmoid", Act::Sigmoid}, {"Tanh", Act::Tanh}, {"HardSwish", Act::HardSwish},
      {"Exp", Act::Exp}, {"Log", Act::Log}, {"Sqrt", Act::Sqrt}, {"Neg", Act::Neg}, {"Abs", Act::Abs},
      {"Erf", Act::Erf}, {"Reciprocal", Act::Reciprocal}, {"Floor", Act::Floor}, {"Ceil", Act::Ceil},
      {"Round", Act::Round}, {"Softplus", Act::Softplus}, {"Sin", Act::Sin}, {"Cos", Act::Cos},
      {"LeakyRelu", Act::LeakyRelu}, {"HardSigmoid", Act::HardSigmoid}, {"Elu", Act::Elu}, {"Selu", Act::Selu},
      {"Gelu", Act::Gelu}, {"Sign", Act::Sign}};
  const auto it = table.find(n.op);
  if (it == table.end()) return false;
  p->act = it->second;
  switch (p->act) {
    case Act::LeakyRelu: p->a = n.get_float("alpha", 0.01f); break;
    case Act::HardSigmoid: p->a = n.get_float("alpha", 0.2f); p->b = n.get_float("beta", 0.5f); break;
    case Act::Elu: p->a = n.get_float("alpha", 1.f); break;
    case Act::Selu:
      p->a = n.get_float("alpha", 1.67326319217681884765625f);
      p->b = n.get_float("gamma", 1.05070102214813232421875f);
      break;
    case Act::Gelu:
      if (n.get_string("approximate", "none") == "tanh") p->act = Act::GeluTanh;
      break;
    default: break;
  }
  return true;
}

// Elementwise ops keep the input's layout.
void lower_unary(Builder& b, const Node& n, ActParams p) {
  const int x = float_input(b, n, 0, true);
  const int y = b.output(n, 0, b.is_nhwc(x));
  const DType t = b.compute;
  const int64_t count = b.slot(y).numel();
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { unary(t, bd.at(x), bd.at(y), count, p, s); });
}

// ---- x * sigmoid(a * x) as one step ---------------------------------------------------------------
// SiLU as exporters write it (Sigmoid, Mul) and CLIP's quick GELU as transformers' CLIP exports it
// after the fc1 product (Mul by the constant 1.702, Sigmoid, Mul): one Swish step reading x and
// writing the product, in float with one rounding at the end, where the separate steps move the
// tensor three times and round after each.  SLUICE_CUDA_FUSE_SWISH=0 keeps the separate steps.
// The step runs its own kernel (kernels.h, swish()): SLUICE_CUDA_SWISH=fast (the default: fp32
// with the hardware's exp2 and reciprocal approximations, a few fp32 ulps from the exact division,
// far below one bf16 rounding; CLIP's step at 99 % of the copy rate on the H200), exact (the generic
// kernel's arithmetic, the same bits; 88 %) or generic (the unary kernel with Act::Swish, the step
// as it ran before; 57 %).  With
// SLUICE_CUDA_SWISH_BIAS=1 the bias Add before the chain (a constant row, the fc1 bias) is taken into
// the step too, and the product before it runs without its bias epilogue (ops_gemm.cpp).

bool fuse_swish_on() { return switch_on("SLUICE_CUDA_FUSE_SWISH"); }

enum class SwishKernel { Exact, Fast, Generic };

SwishKernel swish_kernel_mode() {
  const std::string s = param_string("SLUICE_CUDA_SWISH");   // one of fast|exact|generic
  if (s == "exact") return SwishKernel::Exact;
  if (s == "generic") return SwishKernel::Generic;
  return SwishKernel::Fast;
}

bool swish_bias_on() { return param_on("SLUICE_CUDA_SWISH_BIAS"); }   // off unless 1

// The only reader of `name` (none when it has several, or is a graph output).
const Node* sole_reader(const Builder& b, const std::string& name) {
  if (b.is_graph_output(name)) return nullptr;
  const auto r = b.consumers(name);
  return r.size() == 1 ? r[0] : nullptr;
}

bool plain_op(const Node* n, const char* op) { return n && n->domain.empty() && n->op == op && !n->outputs.empty(); }

// A swish chain starting at node n (its Sigmoid, or the Mul by a constant before it): the value x
// it gates, the nodes after n it takes, its alpha.
struct SwishChain {
  std::string x;
  const Node* sig = nullptr;
  const Node* mul = nullptr;   // the final Mul, whose output the step writes
  float alpha = 1.f;
};

bool match_swish(const Builder& b, const Node& n, SwishChain* c) {
  if (!b.has_output(n, 0) || b.is_wide(n.outputs[0])) return false;
  std::size_t xi = 0;
  if (n.op == "Sigmoid" && n.domain.empty()) {
    c->sig = &n;
  } else if (n.op == "Mul" && n.domain.empty() && n.inputs.size() == 2) {
    const Tensor* c0 = b.const_input(n, 0);
    const Tensor* c1 = b.const_input(n, 1);
    const Tensor* k = c1 ? c1 : c0;
    if (!k || (c0 && c1) || k->numel() != 1) return false;
    const DType ct = k->dtype;
    if (ct != DType::F32 && ct != DType::F16 && ct != DType::BF16 && ct != DType::F64) return false;
    xi = c1 ? 0 : 1;
    c->alpha = k->as_float().at(0);
    c->sig = sole_reader(b, n.outputs[0]);
    if (!plain_op(c->sig, "Sigmoid") || c->sig->input(0) != n.outputs[0]) return false;
  } else {
    return false;
  }
  c->x = n.input(xi);
  const std::string& u = c->sig->outputs[0];
  const Node* m = sole_reader(b, u);
  if (!plain_op(m, "Mul") || m->inputs.size() != 2 || !b.has_output(*m, 0) || b.is_wide(m->outputs[0])) return false;
  if (!((m->inputs[0] == c->x && m->inputs[1] == u) || (m->inputs[0] == u && m->inputs[1] == c->x))) return false;
  const ValueInfo* vx = b.graph.value(c->x);
  const ValueInfo* vy = b.graph.value(m->outputs[0]);
  if (!vx || !vy || vx->shape != vy->shape || vx->shape.empty()) return false;
  if (vx->dtype != DType::F32 && vx->dtype != DType::F16 && vx->dtype != DType::BF16) return false;
  c->mul = m;
  return true;
}

// For bias Add node `add` (x + a constant row, in either order) whose sum only a swish chain reads
// (its first node and its final Mul): the chain, the index of x and the bias values.
bool match_bias_swish(const Builder& b, const Node& add, SwishChain* c, std::size_t* xi, std::vector<float>* bias) {
  if (!plain_op(&add, "Add") || add.inputs.size() != 2 || !b.has_output(add, 0)) return false;
  const std::string& h = add.outputs[0];
  if (b.is_graph_output(h) || b.is_wide(h)) return false;
  const Tensor* c0 = b.const_input(add, 0);
  const Tensor* c1 = b.const_input(add, 1);
  if ((c0 != nullptr) == (c1 != nullptr)) return false;
  *xi = c1 ? 0 : 1;
  const Tensor* k = c1 ? c1 : c0;
  const ValueInfo* vh = b.graph.value(h);
  const ValueInfo* vx = b.graph.value(add.input(*xi));
  if (!vh || !vx || vh->shape.empty() || vx->shape != vh->shape) return false;
  const DType kt = k->dtype;
  if (kt != DType::F32 && kt != DType::F16 && kt != DType::BF16) return false;
  const int64_t cols = vh->shape.back();
  std::size_t lead = 0;
  while (lead < k->shape.size() && k->shape[lead] == 1) ++lead;
  if (k->shape.size() > vh->shape.size() || k->shape.size() - lead != 1 || k->shape.back() != cols) return false;
  const auto readers = b.consumers(h);
  if (readers.size() != 2) return false;
  for (const Node* first : readers) {
    SwishChain chain;
    if (!match_swish(b, *first, &chain) || chain.x != h) continue;
    if (chain.mul == first || (readers[0] != chain.mul && readers[1] != chain.mul)) continue;
    *c = chain;
    *bias = k->as_float();
    return true;
  }
  return false;
}

// The step for chain c over slot xs (bias: the fp32 constant slot, or -1), writing node c.mul's output.
void add_swish_step(Builder& b, const std::string& label, int xs, int bias_slot, int64_t channels, const SwishChain& c) {
  const int y = b.output(*c.mul, 0, b.is_nhwc(xs));
  const DType t = b.compute;
  const int64_t count = b.slot(y).numel();
  const SwishKernel mode = swish_kernel_mode();
  const float alpha = c.alpha;
  std::vector<int> uses = {xs, y};
  if (bias_slot >= 0) uses.push_back(bias_slot);
  b.add(label, uses, [=](Context&, const Bindings& bd, cudaStream_t s) {
    if (mode == SwishKernel::Generic) {
      ActParams p;
      p.act = Act::Swish;
      p.a = alpha;
      unary(t, bd.at(xs), bd.at(y), count, p, s);
      return;
    }
    SwishParams p;
    p.alpha = alpha;
    p.fast = mode == SwishKernel::Fast;
    if (bias_slot >= 0) {
      p.bias = static_cast<const float*>(bd.at(bias_slot));
      p.channels = channels;
    }
    swish(t, bd.at(xs), bd.at(y), count, p, s);
  }, "Swish");
}

// When n starts a swish over one of its inputs (or is the bias Add before one, under
// SLUICE_CUDA_SWISH_BIAS=1): lowers the chain as one step and returns true.
bool lower_swish(Builder& b, const Node& n) {
  if (!fuse_swish_on()) return false;
  if (n.op == "Add") {
    SwishChain c;
    std::size_t xi = 0;
    std::vector<float> bias;
    if (!swish_bias_on() || swish_kernel_mode() == SwishKernel::Generic || !match_bias_swish(b, n, &c, &xi, &bias))
      return false;
    const int xs = float_input(b, n, xi);   // the bias runs along the last axis: plain order
    const int64_t cols = static_cast<int64_t>(bias.size());
    const int bs = b.constant(n.name + " (bias, float32)", Tensor::from(DType::F32, {cols}, bias));
    add_swish_step(b, n.name + " + " + c.mul->name, xs, bs, cols, c);
    for (const Node* k : b.consumers(n.outputs[0])) b.skip(*k);
    b.skip(*c.sig);
    b.skip(*c.mul);
    return true;
  }
  SwishChain c;
  if (!match_swish(b, n, &c)) return false;
  const int xs = float_input(b, n, n.input(0) == c.x ? 0 : 1, true);
  add_swish_step(b, n.name + " + " + c.mul->name, xs, -1, 1, c);
  if (c.sig != &n) b.skip(*c.sig);
  b.skip(*c.mul);
  return true;
}

void lower_clip(Builder& b, const Node& n) {
  ActParams p;
  p.act = Act::Clip;
  p.a = -INFINITY;
  p.b = INFINITY;
  if (b.has_input(n, 1)) p.a = b.const_floats(n, 1, "min").at(0);
  if (b.has_input(n, 2)) p.b = b.const_floats(n, 2, "max").at(0);
  lower_unary(b, n, p);
}

// The shape an operand has in channels-last memory order, if its bytes can be read that way: a
// channels-last slot, or an NCHW one (right-aligned to 4-D) whose order does not change (C == 1,
// or H == W == 1: per-channel vectors, pooled [N, C, 1, 1] tensors).
bool channels_last_shape(const Builder& b, int slot, Shape* phys) {
  const TensorSlot& s = b.slot(slot);
  if (s.nhwc) {
    *phys = s.physical();
    return true;
  }
  if (s.shape.size() > 4) return false;
  Shape l(4 - s.shape.size(), 1);
  l.insert(l.end(), s.shape.begin(), s.shape.end());
  if (l[1] != 1 && (l[2] != 1 || l[3] != 1)) return false;
  *phys = {l[0], l[2], l[3], l[1]};
  return true;
}

void lower_binary(Builder& b, const Node& n, BinOp op) {
  // Variadic Sum/Max/Min/Mean fold pairwise into the output.
  const std::size_t count = n.inputs.size();
  if (count == 0) b.fail(n, "no inputs");
  // Channels-last when a full-size operand is, and every other operand reads the same way.
  std::vector<int> ops;
  bool nhwc = false;
  for (std::size_t i = 0; i < count; ++i) {
    ops.push_back(float_input(b, n, i, true));
    nhwc |= b.is_nhwc(ops.back());
  }
  std::vector<Shape> shapes(count);
  for (std::size_t i = 0; i < count && nhwc; ++i) {
    if (channels_last_shape(b, ops[i], &shapes[i])) continue;
    if (b.slot(ops[i]).shape.size() == 4) {   // a full NCHW tensor: transpose it (once)
      ops[i] = b.relayout(ops[i], true);
      shapes[i] = b.slot(ops[i]).physical();
    } else {
      nhwc = false;
    }
  }
  if (!nhwc)
    for (std::size_t i = 0; i < count; ++i) {
      ops[i] = b.relayout(ops[i], false);
      shapes[i] = b.slot(ops[i]).shape;
    }
  const int y = b.output(n, 0, nhwc);
  const Shape out = b.slot(y).physical();
  const DType t = b.compute;
  if (count == 1) {
    const int x = ops[0];
    const BroadcastShape s = broadcast_shape(b, n, out, shapes[0], shapes[0]);
    b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
      binary(t, BinOp::Max, bd.at(x), bd.at(x), bd.at(y), s, ActParams{}, st);
    });
    return;
  }
  int acc = ops[0];
  Shape acc_shape = shapes[0];
  for (std::size_t i = 1; i < count; ++i) {
    const int rhs = ops[i];
    const BroadcastShape s = broadcast_shape(b, n, out, acc_shape, shapes[i]);
    const int lhs = acc;
    b.add(n.name, {lhs, rhs, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
      binary(t, op, bd.at(lhs), bd.at(rhs), bd.at(y), s, ActParams{}, st);
    });
    acc = y;
    acc_shape = out;
  }
  if (n.op == "Mean") {
    Tensor k(t, {});
    const uint64_t bits = scalar_bits(t, 1.0 / static_cast<double>(count));
    std::memcpy(k.bytes.data(), &bits, dtype_size(t));
    const int kid = b.constant(n.name + " (1/n)", k);
    const BroadcastShape s = broadcast_shape(b, n, out, out, {});
    b.add(n.name + " mean", {y, kid}, [=](Context&, const Bindings& bd, cudaStream_t st) {
      binary(t, BinOp::Mul, bd.at(y), bd.at(kid), bd.at(y), s, ActParams{}, st);
    });
  }
}

void lower_cast(Builder& b, const Node& n) {
  const int x = b.input_any(n, 0);
  const int y = b.output(n, 0, b.is_nhwc(x));
  const DType from = b.slot(x).dtype, to = b.slot(y).dtype;
  const int64_t count = b.slot(y).numel();
  const std::size_t bytes = b.slot(y).bytes;
  if (from == to) {
    b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
      CUDA_CHECK(cudaMemcpyAsync(bd.at(y), bd.at(x), bytes, cudaMemcpyDeviceToDevice, s));
    });
    return;
  }
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { cast(from, to, bd.at(x), bd.at(y), count, s); });
}

// Normalize writes channels-last straight away when convolutions are what reads it (the usual
// image model), saving a transpose of the input.
void lower_normalize(Builder& b, const Node& n) {
  const int x = b.input_raw(n, 0);
  const Shape xs = b.slot(x).shape;
  const bool nhwc = xs.size() == 4 && b.consumers_want_nhwc(n.outputs.at(0));
  const int y = b.output(n, 0, nhwc);
  if (nhwc) {   // the stem convolution's channels, padded with zeros (Builder::stem_channels)
    TensorSlot& ys = b.slots[static_cast<std::size_t>(y)];
    ys.shape[1] = b.stem_channels(n.outputs.at(0));
    ys.bytes = static_cast<std::size_t>(shape_numel(ys.shape)) * dtype_size(ys.dtype);
  }
  const DType in = b.slot(x).dtype, out = b.slot(y).dtype;
  if (in != DType::U8 && in != DType::F32 && in != DType::F16 && in != DType::BF16)
    b.fail(n, "input is ", dtype_name(in), "; Normalize reads uint8 or float");
  if (xs.size() < 2) b.fail(n, "input ", shape_str(xs), " has no channel axis");
  std::vector<float> mean = n.get_floats("mean", {0.f}), stddev = n.get_floats("std", {1.f});
  if (mean.empty()) mean = {0.f};
  if (stddev.empty()) stddev = {1.f};
  NormalizeShape ns;
  ns.n = xs[0];
  ns.channels = xs[1];
  ns.channels_out = b.slot(y).shape[1];
  ns.scale = n.get_float("scale", 1.f);
  ns.nhwc = b.is_nhwc(y);
  ns.per_channel = mean.size() > 1 || stddev.size() > 1;
  if (ns.per_channel) {
    if (mean.size() == 1) mean.assign(static_cast<std::size_t>(ns.channels), mean[0]);
    if (stddev.size() == 1) stddev.assign(static_cast<std::size_t>(ns.channels), stddev[0]);
    if (static_cast<int64_t>(mean.size()) != ns.channels || static_cast<int64_t>(stddev.size()) != ns.channels)
      b.fail(n, "mean/std have ", mean.size(), "/", stddev.size(), " values for ", ns.channels, " channels");
  }
  const int mid = b.constant(n.name + " (mean)", Tensor::from(DType::F32, {static_cast<int64_t>(mean.size())}, mean));
  const int sid = b.constant(n.name + " (std)", Tensor::from(DType::F32, {static_cast<int64_t>(stddev.size())}, stddev));
  for (std::size_t d = 2; d < xs.size(); ++d) ns.inner *= xs[d];
  b.add(n.name, {x, y, mid, sid}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    normalize(in, out, bd.at(x), bd.at(y), ns, bd.at<float>(mid), bd.at<float>(sid), s);
  });
}

void lower_batchnorm(Builder& b, const Node& n) {
  const int x = float_input(b, n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  if (xs.size() < 2) b.fail(n, "input ", shape_str(xs), " has no channel axis");
  const std::vector<float> scale = b.const_floats(n, 1, "scale"), bias = b.const_floats(n, 2, "B"),
                           mean = b.const_floats(n, 3, "mean"), var = b.const_floats(n, 4, "var");
  const float eps = n.get_float("epsilon", 1e-5f);
  const int64_t channels = xs[1];
  std::vector<float> a(static_cast<std::size_t>(channels)), c(static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = scale.at(i) / std::sqrt(var.at(i) + eps);
    c[i] = bias.at(i) - mean.at(i) * a[i];
  }
  const int aid = b.constant(n.name + " (scale)", Tensor::from(DType::F32, {channels}, a));
  const int cid = b.constant(n.name + " (shift)", Tensor::from(DType::F32, {channels}, c));
  int64_t inner = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) inner *= xs[d];
  const int64_t outer = xs[0];
  const DType t = b.compute;
  b.add(n.name, {x, y, aid, cid}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    channel_affine(t, bd.at(x), bd.at(y), bd.at<float>(aid), bd.at<float>(cid), outer, channels, inner, s);
  });
}

// GroupNormalization (scale and bias per channel, or per group as opset 18 wrote them) and
// InstanceNormalization (a group per channel); statistics in float whatever the storage type.
void lower_group_norm(Builder& b, const Node& n, bool instance) {
  const int x = float_input(b, n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  if (xs.size() < 2) b.fail(n, "input ", shape_str(xs), " has no channel axis");
  const int64_t batch = xs[0], channels = xs[1];
  int64_t inner = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) inner *= xs[d];
  const int64_t groups = instance ? channels : n.get_int("num_groups", 0);
  if (groups < 1 || channels % groups != 0) b.fail(n, "num_groups ", groups, " does not divide the ", channels, " channels");
  auto table = [&](std::size_t i, const char* what) -> int {
    if (!b.has_input(n, i)) {
      if (instance) b.fail(n, what, " (input ", i, ") is missing");
      return -1;
    }
    std::vector<float> v = b.const_floats(n, i, what);
    if (static_cast<int64_t>(v.size()) == groups && groups != channels) {
      std::vector<float> per_channel(static_cast<std::size_t>(channels));
      for (int64_t c = 0; c < channels; ++c) per_channel[static_cast<std::size_t>(c)] = v[static_cast<std::size_t>(c / (channels / groups))];
      v = std::move(per_channel);
    }
    if (static_cast<int64_t>(v.size()) != channels) b.fail(n, what, " has ", v.size(), " values for ", channels, " channels");
    return b.constant(n.name + " (" + what + ")", Tensor::from(DType::F32, {channels}, v));
  };
  const int g = table(1, "scale"), be = table(2, "B");
  const float eps = n.get_float("epsilon", 1e-5f);
  const DType t = b.compute;
  std::vector<int> uses = {x, y};
  if (g >= 0) uses.push_back(g);
  if (be >= 0) uses.push_back(be);
  b.add(n.name, uses, [=](Context&, const Bindings& bd, cudaStream_t s) {
    group_norm(t, bd.at(x), bd.at(y), batch, channels, groups, inner, eps, g >= 0 ? bd.at<float>(g) : nullptr,
               be >= 0 ? bd.at<float>(be) : nullptr, s);
  });
}

}  // namespace

bool swish_takes_bias(const Builder& b, const Node& add) {
  if (!fuse_swish_on() || !swish_bias_on() || swish_kernel_mode() == SwishKernel::Generic) return false;
  SwishChain c;
  std::size_t xi = 0;
  std::vector<float> bias;
  return match_bias_swish(b, add, &c, &xi, &bias);
}

bool lower_elementwise(Builder& b, const Node& n) {
  if (n.domain == "sluice") {
    if (n.op != "Normalize") return false;
    lower_normalize(b, n);
    return true;
  }
  if (!n.domain.empty()) return false;
  if ((n.op == "Sigmoid" || n.op == "Mul" || n.op == "Add") && lower_swish(b, n)) return true;
  ActParams p;
  if (unary_act(n, &p)) { lower_unary(b, n, p); return true; }
  static const std::map<std::string, BinOp> binops = {
      {"Add", BinOp::Add}, {"Sub", BinOp::Sub}, {"Mul", BinOp::Mul}, {"Div", BinOp::Div}, {"Pow", BinOp::Pow},
      {"Max", BinOp::Max}, {"Min", BinOp::Min}, {"Sum", BinOp::Add}, {"Mean", BinOp::Add}, {"PRelu", BinOp::PRelu},
      {"Mod", BinOp::Mod}};
  const auto it = binops.find(n.op);
  if (it != binops.end() && is_int_arith(b, n)) return false;   // ops_index.cpp
  if ((n.op == "Add" || n.op == "Mul") && b.has_output(n, 0) && b.is_wide(n.outputs[0])) {   // ops_residual.cpp
    lower_residual_add(b, n);
    return true;
  }
  if (it != binops.end()) {
    if (n.op == "Mod" && n.get_int("fmod", 0) == 0) b.fail(n, "Mod of float tensors needs fmod=1 (ONNX defines fmod=0 for integers only)");
    lower_binary(b, n, it->second);
    return true;
  }
  if (n.op == "Clip") lower_clip(b, n);
  else if (n.op == "Cast") lower_cast(b, n);
  else if (n.op == "BatchNormalization") lower_batchnorm(b, n);
  else if (n.op == "LayerNormalization") lower_layernorm(b, n);
  else if (n.op == "GroupNormalization") lower_group_norm(b, n, false);
  else if (n.op == "InstanceNormalization") lower_group_norm(b, n, true);
  else return false;
  return true;
}

}  // namespace sluice::cuda
