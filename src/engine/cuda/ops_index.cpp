// Ops on masks and indices that attention-era models compute at run time: comparisons and logic
// (bool tensors), integer arithmetic (Add/Sub/Mul/Div/Mod/Max/Min), IsNaN/IsInf, Where, GatherND, ScatterND, CumSum, Trilu, Col2Im, and Range when its
// inputs are constants.  Each runs as the engine's own kernel (kernels_index.cu) on NCHW-ordered
// tensors; float operands are in the compute type, integer and bool ones in their own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/axis_view.h"
#include "core/cuda/cuda_check.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {
namespace {

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Input i as stored for these kernels: NCHW order; float constants in the compute type.
int operand(Builder& b, const Node& n, std::size_t i) {
  const int id = b.input(n, i);
  const DType t = b.slot(id).dtype;
  if (!is_float_type(t) || t == b.compute) return id;
  if (const Tensor* c = b.const_input(n, i)) {
    Tensor f(DType::F32, c->shape);
    const std::vector<float> v = c->as_float();
    std::memcpy(f.bytes.data(), v.data(), f.nbytes());
    return b.constant(n.input(i) + " (" + dtype_name(b.compute) + ")", b.to_compute(f));
  }
  b.fail(n, "input '", n.input(i), "' is ", dtype_name(t), " while the engine computes in ", dtype_name(b.compute));
}

// Right-aligned broadcasting of up to three operand shapes onto `out`.
Broadcast3 broadcast3(const Builder& b, const Node& n, const Shape& out, const std::vector<Shape>& ins) {
  if (out.size() > static_cast<std::size_t>(kMaxRank)) b.fail(n, "rank ", out.size(), " is above the supported ", kMaxRank);
  Broadcast3 s;
  s.rank = out.empty() ? 1 : static_cast<int>(out.size());
  if (out.empty()) s.out[0] = 1;
  for (std::size_t d = 0; d < out.size(); ++d) s.out[d] = out[d];
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const Shape& in = ins[k];
    if (in.size() > out.size()) b.fail(n, "input ", shape_str(in), " has more dims than the output ", shape_str(out));
    int64_t acc = 1;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::size_t d = out.size() - 1 - i;
      const int64_t dim = in[in.size() - 1 - i];
      if (dim != 1 && dim != out[d]) b.fail(n, "input ", shape_str(in), " does not broadcast to ", shape_str(out));
      s.st[k][d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  return s;
}

void lower_compare(Builder& b, const Node& n, CmpOp op) {
  const int a = operand(b, n, 0), c = operand(b, n, 1);
  const DType t = b.slot(a).dtype;
  if (b.slot(c).dtype != t) b.fail(n, "inputs are ", dtype_name(t), " and ", dtype_name(b.slot(c).dtype), "; they must have one type");
  const bool logic = op == CmpOp::And || op == CmpOp::Or || op == CmpOp::Xor;
  if (logic && t != DType::Bool) b.fail(n, "inputs are ", dtype_name(t), "; ", n.op, " reads bool tensors");
  const int y = b.output(n, 0);
  if (b.slot(y).dtype != DType::Bool) b.fail(n, "output is ", dtype_name(b.slot(y).dtype), ", not bool");
  const Broadcast3 s = broadcast3(b, n, b.slot(y).shape, {b.slot(a).shape, b.slot(c).shape});
  b.add(n.name, {a, c, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    compare(t, op, bd.at(a), bd.at(c), bd.at<uint8_t>(y), s, st);
  });
}

void lower_int_binary(Builder& b, const Node& n, BinOp op) {
  if (n.inputs.size() != 2) b.fail(n, "integer ", n.op, " of ", n.inputs.size(), " inputs is not supported (2 only)");
  const int a = b.input(n, 0), c = b.input(n, 1);
  const int y = b.output(n, 0);
  const DType t = b.slot(y).dtype;
  if (b.slot(a).dtype != t || b.slot(c).dtype != t)
    b.fail(n, "inputs are ", dtype_name(b.slot(a).dtype), " and ", dtype_name(b.slot(c).dtype), ", the output ", dtype_name(t));
  const Broadcast3 s = broadcast3(b, n, b.slot(y).shape, {b.slot(a).shape, b.slot(c).shape});
  const bool fmod = n.get_int("fmod", 0) != 0;
  b.add(n.name, {a, c, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    int_binary(t, op, fmod, bd.at(a), bd.at(c), bd.at(y), s, st);
  });
}

void lower_test(Builder& b, const Node& n, TestOp op) {
  const int x = operand(b, n, 0);
  const DType t = b.slot(x).dtype;
  if (op == TestOp::Not ? t != DType::Bool : !is_float_type(t))
    b.fail(n, "input is ", dtype_name(t), "; ", n.op, op == TestOp::Not ? " reads bool tensors" : " reads float tensors");
  const int y = b.output(n, 0);
  if (b.slot(y).dtype != DType::Bool) b.fail(n, "output is ", dtype_name(b.slot(y).dtype), ", not bool");
  const int64_t count = b.slot(y).numel();
  if (b.slot(x).numel() != count) b.fail(n, "output ", shape_str(b.slot(y).shape), " differs from the input ", shape_str(b.slot(x).shape));
  const bool pos = n.get_int("detect_positive", 1) != 0, neg = n.get_int("detect_negative", 1) != 0;
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    test_values(t, op, bd.at(x), bd.at<uint8_t>(y), count, pos, neg, st);
  });
}

void lower_where(Builder& b, const Node& n) {
  const int c = b.input(n, 0), x = operand(b, n, 1), z = operand(b, n, 2);
  if (b.slot(c).dtype != DType::Bool) b.fail(n, "condition is ", dtype_name(b.slot(c).dtype), ", not bool");
  const int y = b.output(n, 0);
  const DType t = b.slot(y).dtype;
  if (b.slot(x).dtype != t || b.slot(z).dtype != t)
    b.fail(n, "X and Y are ", dtype_name(b.slot(x).dtype), " and ", dtype_name(b.slot(z).dtype), ", the output ", dtype_name(t));
  const Broadcast3 s = broadcast3(b, n, b.slot(y).shape, {b.slot(c).shape, b.slot(x).shape, b.slot(z).shape});
  const std::size_t es = dtype_size(t);
  b.add(n.name, {c, x, z, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    where(es, bd.at<uint8_t>(c), bd.at(x), bd.at(z), bd.at(y), s, st);
  });
}

int index_tensor(Builder& b, const Node& n, std::size_t i) {
  const int id = b.input(n, i);
  if (b.slot(id).dtype != DType::I64) b.fail(n, "indices are ", dtype_name(b.slot(id).dtype), ", not int64");
  if (b.slot(id).shape.empty()) b.fail(n, "indices are a scalar; they need at least one dim");
  return id;
}

// The index tuples of GatherND/ScatterND over `data` after `batch` batch dims.
IndexND index_nd(const Builder& b, const Node& n, const Shape& data, const Shape& idx, int64_t batch) {
  const int64_t k = idx.back();
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(idx.size());
  if (batch < 0 || batch >= q || batch >= r) b.fail(n, "batch_dims ", batch, " is out of range for data ", shape_str(data), " and indices ", shape_str(idx));
  if (k < 1 || k + batch > r || k > kMaxRank) b.fail(n, "index tuples of ", k, " entries do not fit data ", shape_str(data), " after ", batch, " batch dims");
  for (int64_t d = 0; d < batch; ++d)
    if (data[static_cast<std::size_t>(d)] != idx[static_cast<std::size_t>(d)])
      b.fail(n, "batch dims of data ", shape_str(data), " and indices ", shape_str(idx), " differ");
  IndexND s;
  s.k = static_cast<int>(k);
  s.rows = 1;
  for (int64_t d = 0; d + 1 < q; ++d) s.rows *= idx[static_cast<std::size_t>(d)];
  s.rows_per_batch = 1;
  for (int64_t d = batch; d + 1 < q; ++d) s.rows_per_batch *= idx[static_cast<std::size_t>(d)];
  s.batch_stride = 1;
  for (int64_t d = batch; d < r; ++d) s.batch_stride *= data[static_cast<std::size_t>(d)];
  s.slice = 1;
  for (int64_t d = batch + k; d < r; ++d) s.slice *= data[static_cast<std::size_t>(d)];
  int64_t stride = s.slice;
  for (int64_t t = k; t-- > 0;) {
    s.dim[t] = data[static_cast<std::size_t>(batch + t)];
    s.stride[t] = stride;
    stride *= s.dim[t];
  }
  if (s.rows_per_batch == 0) s.rows_per_batch = 1;
  return s;
}

void lower_gather_nd(Builder& b, const Node& n) {
  const int x = operand(b, n, 0), idx = index_tensor(b, n, 1);
  const int y = b.output(n, 0);
  if (b.slot(y).dtype != b.slot(x).dtype) b.fail(n, "output is ", dtype_name(b.slot(y).dtype), ", the data ", dtype_name(b.slot(x).dtype));
  const IndexND s = index_nd(b, n, b.slot(x).shape, b.slot(idx).shape, n.get_int("batch_dims", 0));
  if (s.rows * s.slice != b.slot(y).numel()) b.fail(n, "output ", shape_str(b.slot(y).shape), " does not hold ", s.rows, " slices of ", s.slice);
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, idx, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    gather_nd(es, bd.at(x), bd.at<int64_t>(idx), bd.at(y), s, st);
  });
}

void lower_scatter_nd(Builder& b, const Node& n) {
  const std::string reduction = n.get_string("reduction", "none");
  static const std::map<std::string, ScatterReduction> reductions = {
      {"add", ScatterReduction::Add}, {"mul", ScatterReduction::Mul}, {"max", ScatterReduction::Max}, {"min", ScatterReduction::Min}};
  const auto red = reductions.find(reduction);
  if (reduction != "none" && red == reductions.end()) b.fail(n, "reduction '", reduction, "' is not one of none, add, mul, max, min");
  const int x = operand(b, n, 0), idx = index_tensor(b, n, 1), u = operand(b, n, 2);
  const int y = b.output(n, 0);
  const DType t = b.slot(x).dtype;
  if (b.slot(u).dtype != t || b.slot(y).dtype != t) b.fail(n, "data, updates and output differ in type");
  const IndexND s = index_nd(b, n, b.slot(x).shape, b.slot(idx).shape, 0);
  if (s.rows * s.slice != b.slot(u).numel()) b.fail(n, "updates ", shape_str(b.slot(u).shape), " do not hold ", s.rows, " slices of ", s.slice);
  const std::size_t es = dtype_size(t), bytes = b.slot(y).bytes;
  if (red != reductions.end()) {
    if (!is_float_type(t) && t != DType::I64 && t != DType::I32) b.fail(n, "reduction '", reduction, "' of ", dtype_name(t), " data: float, int64 or int32 only");
    const ScatterReduction r = red->second;
    b.add(n.name, {x, idx, u, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
      CUDA_CHECK(cudaMemcpyAsync(bd.at(y), bd.at(x), bytes, cudaMemcpyDeviceToDevice, st));
      scatter_nd_reduce(t, r, bd.at<int64_t>(idx), bd.at(u), bd.at(y), s, st);
    });
    return;
  }
  b.add(n.name, {x, idx, u, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(bd.at(y), bd.at(x), bytes, cudaMemcpyDeviceToDevice, st));
    scatter_nd(es, bd.at<int64_t>(idx), bd.at(u), bd.at(y), s, st);
  });
}

void lower_cumsum(Builder& b, const Node& n) {
  const int x = operand(b, n, 0);
  const int y = b.output(n, 0);
  const DType t = b.slot(x).dtype;
  if (!is_float_type(t) && t != DType::I64 && t != DType::I32) b.fail(n, "input is ", dtype_name(t), "; CumSum reads float, int32 or int64");
  const Shape xs = b.slot(x).shape;
  const std::vector<int64_t> av = b.const_ints(n, 1, "axis");
  if (av.size() != 1) b.fail(n, "axis must hold one value");
  const std::size_t axis = static_cast<std::size_t>(b.axis(n, av[0], static_cast<int64_t>(xs.size())));
  const AxisView view = axis_view(xs, static_cast<int64_t>(axis));
  const int64_t outer = view.outer, inner = view.inner;
  const int64_t r = xs[axis];
  const bool exclusive = n.get_int("exclusive", 0) != 0, reverse = n.get_int("reverse", 0) != 0;
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    cumsum(t, bd.at(x), bd.at(y), outer, r, inner, exclusive, reverse, st);
  });
}

void lower_trilu(Builder& b, const Node& n) {
  const int x = operand(b, n, 0);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  if (xs.size() < 2) b.fail(n, "input ", shape_str(xs), " has fewer than 2 dims");
  int64_t k = 0;
  if (b.has_input(n, 1)) {
    const std::vector<int64_t> kv = b.const_ints(n, 1, "k");
    if (kv.size() != 1) b.fail(n, "k must hold one value");
    k = kv[0];
  }
  const bool upper = n.get_int("upper", 1) != 0;
  const int64_t rows = xs[xs.size() - 2], cols = xs.back();
  const int64_t batch = rows * cols == 0 ? 0 : b.slot(x).numel() / (rows * cols);
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    trilu(es, bd.at(x), bd.at(y), batch, rows, cols, k, upper, st);
  });
}

// Col2Im of 2-D images (MobileViT-V2's fold of its patches back into a feature map).
void lower_col2im(Builder& b, const Node& n) {
  const int x = operand(b, n, 0);
  if (b.slot(x).dtype != b.compute) b.fail(n, "input is ", dtype_name(b.slot(x).dtype), "; Col2Im reads float tensors");
  const std::vector<int64_t> image = b.const_ints(n, 1, "image_shape"), block = b.const_ints(n, 2, "block_shape");
  if (image.size() != 2 || block.size() != 2) b.fail(n, "Col2Im of ", image.size(), "-D images is not supported (2-D only)");
  const std::vector<int64_t> dil = n.get_ints("dilations", {1, 1}), pads = n.get_ints("pads", {0, 0, 0, 0}),
                             strides = n.get_ints("strides", {1, 1});
  if (dil.size() != 2 || pads.size() != 4 || strides.size() != 2) b.fail(n, "dilations, pads or strides do not match 2-D images");
  const Shape xs = b.slot(x).shape;
  Col2ImShape s;
  s.h = image[0];
  s.w = image[1];
  s.kh = block[0];
  s.kw = block[1];
  s.dh = dil[0];
  s.dw = dil[1];
  s.ph = pads[0];
  s.pw = pads[1];
  s.sh = strides[0];
  s.sw = strides[1];
  if (s.kh < 1 || s.kw < 1 || s.sh < 1 || s.sw < 1 || s.dh < 1 || s.dw < 1) b.fail(n, "block, strides and dilations must be positive");
  s.oh = (s.h + pads[0] + pads[2] - (s.dh * (s.kh - 1) + 1)) / s.sh + 1;
  s.ow = (s.w + pads[1] + pads[3] - (s.dw * (s.kw - 1) + 1)) / s.sw + 1;
  if (xs.size() != 3 || xs[1] % (s.kh * s.kw) != 0 || xs[2] != s.oh * s.ow)
    b.fail(n, "input ", shape_str(xs), " is not [N, C*", s.kh * s.kw, ", ", s.oh * s.ow, "] for these blocks");
  s.n = xs[0];
  s.c = xs[1] / (s.kh * s.kw);
  const int y = b.output(n, 0);
  if (b.slot(y).numel() != s.n * s.c * s.h * s.w) b.fail(n, "output ", shape_str(b.slot(y).shape), " is not [", s.n, ", ", s.c, ", ", s.h, ", ", s.w, "]");
  const DType t = b.compute;
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) { col2im(t, bd.at(x), bd.at(y), s, st); });
}

// Range of constant start/limit/delta: computed here, copied in by the step.
void lower_range(Builder& b, const Node& n) {
  const Tensor& t0 = b.require_const(n, 0, "start");
  const Tensor& t1 = b.require_const(n, 1, "limit");
  const Tensor& t2 = b.require_const(n, 2, "delta");
  const DType t = t0.dtype;
  const std::string& name = n.outputs.at(0);
  const Shape out = b.value(name).shape;
  Tensor v(t, out);
  const int64_t count = v.numel();
  if (is_float_type(t) || t == DType::F64) {
    const double start = t0.as_float().at(0), delta = t2.as_float().at(0), limit = t1.as_float().at(0);
    const int64_t expect = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
    if (expect != count) b.fail(n, "the output has ", count, " elements, the range ", expect);
    std::vector<float> f(static_cast<std::size_t>(count));
    for (int64_t i = 0; i < count; ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(start + static_cast<double>(i) * delta);
    v = Tensor::from(DType::F32, out, f);
  } else if (t == DType::I64 || t == DType::I32) {
    const int64_t start = t0.as_int64().at(0), delta = t2.as_int64().at(0), limit = t1.as_int64().at(0);
    if (delta == 0) b.fail(n, "delta is 0");
    const int64_t expect = std::max<int64_t>(0, (limit - start + delta + (delta > 0 ? -1 : 1)) / delta);
    if (expect != count) b.fail(n, "the output has ", count, " elements, the range ", expect);
    if (t == DType::I64) {
      std::vector<int64_t> iv(static_cast<std::size_t>(count));
      for (int64_t i = 0; i < count; ++i) iv[static_cast<std::size_t>(i)] = start + i * delta;
      v = Tensor::from(t, out, iv);
    } else {
      std::vector<int32_t> iv(static_cast<std::size_t>(count));
      for (int64_t i = 0; i < count; ++i) iv[static_cast<std::size_t>(i)] = static_cast<int32_t>(start + i * delta);
      v = Tensor::from(t, out, iv);
    }
  } else {
    b.fail(n, "element type ", dtype_name(t), " is not supported");
  }
  const int src = b.constant(n.name + " (values)", b.to_compute(v));
  const int y = b.output(n, 0);
  const std::size_t bytes = b.slot(y).bytes;
  if (b.slot(src).bytes != bytes || b.slot(src).dtype != b.slot(y).dtype) b.fail(n, "the output's type or size does not match the range");
  b.add(n.name, {src, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(bd.at(y), bd.at(src), bytes, cudaMemcpyDeviceToDevice, st));
  });
}

}  // namespace

bool is_int_arith(const Builder& b, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0].empty()) return false;
  const ValueInfo* v = b.graph.value(n.outputs[0]);
  return v && (v->dtype == DType::I64 || v->dtype == DType::I32);
}

bool lower_index(Builder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  static const std::map<std::string, CmpOp> cmp = {
      {"Equal", CmpOp::Equal}, {"Less", CmpOp::Less}, {"Greater", CmpOp::Greater}, {"LessOrEqual", CmpOp::LessOrEqual},
      {"GreaterOrEqual", CmpOp::GreaterOrEqual}, {"And", CmpOp::And}, {"Or", CmpOp::Or}, {"Xor", CmpOp::Xor}};
  static const std::map<std::string, BinOp> arith = {
      {"Add", BinOp::Add}, {"Sub", BinOp::Sub}, {"Mul", BinOp::Mul}, {"Div", BinOp::Div},
      {"Mod", BinOp::Mod}, {"Max", BinOp::Max}, {"Min", BinOp::Min}};
  const auto it = cmp.find(n.op);
  const auto ar = arith.find(n.op);
  if (it != cmp.end()) lower_compare(b, n, it->second);
  else if (ar != arith.end() && is_int_arith(b, n)) lower_int_binary(b, n, ar->second);
  else if (n.op == "Not") lower_test(b, n, TestOp::Not);
  else if (n.op == "IsNaN") lower_test(b, n, TestOp::IsNaN);
  else if (n.op == "IsInf") lower_test(b, n, TestOp::IsInf);
  else if (n.op == "Where") lower_where(b, n);
  else if (n.op == "GatherND") lower_gather_nd(b, n);
  else if (n.op == "ScatterND") lower_scatter_nd(b, n);
  else if (n.op == "CumSum") lower_cumsum(b, n);
  else if (n.op == "Trilu") lower_trilu(b, n);
  else if (n.op == "Range") lower_range(b, n);
  else if (n.op == "Col2Im") lower_col2im(b, n);
  else return false;
  return true;
}

}  // namespace sluice::cuda
