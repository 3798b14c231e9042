// Ops that reduce: pooling, Reduce*, Softmax/LogSoftmax, ArgMax/ArgMin (and sluice.ArgMaxCast,
// which writes narrow indices so fewer bytes cross PCIe) and TopK.  Reductions over one block of
// adjacent axes run directly on the [outer, r, inner] view; other axis sets are first transposed so
// the reduced axes come last.
#include <algorithm>

#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"

namespace sluice::cuda {

void lower_detections(Builder& b, const Node& n);  // ops_detect.cpp

namespace {

void require_compute(const Builder& b, const Node& n, int slot) {
  if (b.slot(slot).dtype != b.compute)
    b.fail(n, "input '", b.slot(slot).name, "' is ", dtype_name(b.slot(slot).dtype), "; this op runs on float tensors");
}

void lower_pool(Builder& b, const Node& n, bool is_max, bool global) {
  // Channels-last inputs stay channels-last (2-D pools); global pools read either layout.
  const int any = b.input_any(n, 0);
  const bool nhwc = b.is_nhwc(any);
  const int x = nhwc ? any : b.input(n, 0);
  require_compute(b, n, x);
  if (b.has_output(n, 1)) b.fail(n, "the Indices output of MaxPool is not supported");
  const int y = b.output(n, 0, nhwc && !global);
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  if (xs.size() < 3 || xs.size() > 5) b.fail(n, "input ", shape_str(xs), " is not a 1-D to 3-D pooling input");
  const std::size_t sp = xs.size() - 2;
  const DType t = b.compute;
  if (global) {
    int64_t r = 1;
    for (std::size_t d = 2; d < xs.size(); ++d) r *= xs[d];
    const RedOp op = is_max ? RedOp::Max : RedOp::Mean;
    // [N, C, HW] reduces rows; [N, HW, C] reduces the middle axis.  Both give [N, C] bytes.
    const int64_t outer = nhwc ? xs[0] : xs[0] * xs[1], inner = nhwc ? xs[1] : 1;
    b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { reduce(t, op, bd.at(x), bd.at(y), outer, r, inner, s); });
    return;
  }
  PoolShape ps;
  ps.channels_last = nhwc;
  ps.dims = static_cast<int>(sp);
  ps.n = xs[0];
  ps.c = xs[1];
  ps.is_max = is_max;
  ps.count_include_pad = n.get_int("count_include_pad", 0) != 0;
  const std::vector<int64_t> kernel = n.get_ints("kernel_shape");
  const std::vector<int64_t> strides = n.get_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = n.get_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (kernel.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp)
    b.fail(n, "kernel_shape, strides, dilations or pads do not match ", sp, " spatial dims");
  if (n.get_int("storage_order", 0) != 0) b.fail(n, "storage_order=1 is not supported");
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  for (std::size_t d = 0; d < sp; ++d) {
    ps.in[d] = xs[d + 2];
    ps.out[d] = ys[d + 2];
    ps.kernel[d] = kernel[d];
    ps.stride[d] = strides[d];
    ps.dilation[d] = dil[d];
    ps.pad[d] = pads[d];
    ps.pad_end[d] = pads[d + sp];
    if (auto_pad == "VALID") ps.pad[d] = ps.pad_end[d] = 0;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (ps.out[d] - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - ps.in[d]);
      ps.pad[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      ps.pad_end[d] = total - ps.pad[d];
    }
  }
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { pool(t, bd.at(x), bd.at(y), ps, s); });
}

// [outer, r, inner] around `axis` of shape s.
void split_around(const Shape& s, std::size_t first, std::size_t last, int64_t* outer, int64_t* r, int64_t* inner) {
  *outer = *r = *inner = 1;
  for (std::size_t d = 0; d < s.size(); ++d) (d < first ? *outer : (d <= last ? *r : *inner)) *= s[d];
}

void lower_reduce_op(Builder& b, const Node& n, RedOp op) {
  std::vector<int64_t> axes;
  if (b.has_input(n, 1)) axes = b.const_ints(n, 1, "axes");
  else axes = n.get_ints("axes");
  const DType t = b.compute;
  {
    // Spatial reductions of a channels-last tensor (a global pool written as ReduceMean): [N, HW, C].
    const int any = b.input_any(n, 0);
    const TensorSlot& s = b.slot(any);
    std::vector<int64_t> a = axes;
    for (auto& v : a) v = v < 0 ? v + 4 : v;
    std::sort(a.begin(), a.end());
    if (s.nhwc && a == std::vector<int64_t>{2, 3} && s.dtype == t) {
      const int y = b.output(n, 0);
      const int64_t outer = s.shape[0], r = s.shape[2] * s.shape[3], inner = s.shape[1];
      b.add(n.name, {any, y}, [=](Context&, const Bindings& bd, cudaStream_t st) { reduce(t, op, bd.at(any), bd.at(y), outer, r, inner, st); });
      return;
    }
  }
  const int x = b.input(n, 0);
  require_compute(b, n, x);
  const int y = b.output(n, 0);
  const Shape xs = b.slot(x).shape;
  const std::size_t rank = xs.size();
  if (axes.empty()) {
    if (n.get_int("noop_with_empty_axes", 0) != 0) {
      b.alias_or_copy(n, 0, x);
      return;
    }
    for (std::size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) reduced[static_cast<std::size_t>(b.axis(n, a, static_cast<int64_t>(rank)))] = true;
  // Size-1 axes change nothing: leave them out so more axis sets are one block.
  std::vector<std::size_t> red;
  for (std::size_t d = 0; d < rank; ++d)
    if (reduced[d] && xs[d] != 1) red.push_back(d);
  if (red.empty()) {
    // Nothing to reduce but the op (e.g. Mean over size-1 axes): a plain pass through the kernel.
    b.add(n.name, {x, y}, [=, count = b.slot(x).numel()](Context&, const Bindings& bd, cudaStream_t s) {
      reduce(t, op, bd.at(x), bd.at(y), count, 1, 1, s);
    });
    return;
  }
  bool block = true;
  for (std::size_t i = 1; i < red.size(); ++i) {
    for (std::size_t d = red[i - 1] + 1; d < red[i]; ++d)
      if (xs[d] != 1) block = false;
  }
  int64_t outer, r, inner;
  if (block) {
    split_around(xs, red.front(), red.back(), &outer, &r, &inner);
    b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { reduce(t, op, bd.at(x), bd.at(y), outer, r, inner, s); });
    return;
  }
  // Move the reduced axes last, then reduce rows.
  std::vector<std::size_t> perm;
  for (std::size_t d = 0; d < rank; ++d) if (!reduced[d] || xs[d] == 1) perm.push_back(d);
  for (std::size_t d : red) perm.push_back(d);
  if (rank > static_cast<std::size_t>(kMaxRank)) b.fail(n, "rank ", rank, " is above ", kMaxRank);
  Shape ts(rank);
  std::vector<int64_t> st(rank, 1);
  for (std::size_t d = rank; d-- > 1;) st[d - 1] = st[d] * xs[d];
  CopyShape cs;
  cs.rank = static_cast<int>(rank);
  r = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    ts[d] = xs[perm[d]];
    cs.out[d] = ts[d];
    cs.in_dim[d] = ts[d];
    cs.in_stride[d] = st[perm[d]];
  }
  for (std::size_t d : red) r *= xs[d];
  outer = b.slot(x).numel() / r;
  const int tmp = b.temp(t, ts, n.name + " (transposed)");
  const std::size_t es = dtype_size(t);
  b.add(n.name + " transpose", {x, tmp}, [=](Context&, const Bindings& bd, cudaStream_t s) { strided_copy(es, bd.at(x), bd.at(tmp), cs, s); });
  b.add(n.name, {tmp, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { reduce(t, op, bd.at(tmp), bd.at(y), outer, r, 1, s); });
}

// A channels-last 4-D input reduced over its channels: [N*H*W, C, 1] in memory.
bool channels_last_axis1(Builder& b, const Node& n, int64_t axis_attr, int* x) {
  const int any = b.input_any(n, 0);
  const TensorSlot& s = b.slot(any);
  if (!s.nhwc || b.axis(n, axis_attr, 4) != 1) return false;
  *x = any;
  return true;
}

void lower_softmax(Builder& b, const Node& n, bool log) {
  int x = -1;
  const bool nhwc = channels_last_axis1(b, n, n.get_int("axis", -1), &x);
  if (!nhwc) x = b.input(n, 0);
  require_compute(b, n, x);
  const int y = b.output(n, 0, nhwc);
  const Shape xs = b.slot(x).shape;
  const std::size_t axis = static_cast<std::size_t>(b.axis(n, n.get_int("axis", -1), static_cast<int64_t>(xs.size())));
  int64_t outer, r, inner;
  split_around(xs, axis, axis, &outer, &r, &inner);
  if (nhwc) {
    outer = xs[0] * xs[2] * xs[3];
    inner = 1;
  }
  const DType t = b.compute;
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) { softmax(t, bd.at(x), bd.at(y), outer, r, inner, log, s); });
}

void lower_argmax(Builder& b, const Node& n, bool is_min, bool narrow) {
  int x = -1;
  const bool nhwc = channels_last_axis1(b, n, n.get_int("axis", 0), &x);
  if (!nhwc) x = b.input(n, 0);
  require_compute(b, n, x);
  const int y = b.output(n, 0);   // [N, (1,) H, W]: the same bytes either way
  const Shape xs = b.slot(x).shape;
  const std::size_t axis = static_cast<std::size_t>(b.axis(n, n.get_int("axis", 0), static_cast<int64_t>(xs.size())));
  int64_t outer, r, inner;
  split_around(xs, axis, axis, &outer, &r, &inner);
  if (nhwc) {
    outer = xs[0] * xs[2] * xs[3];
    inner = 1;
  }
  const DType index = b.slot(y).dtype;
  if (index != DType::I64 && index != DType::I32 && index != DType::U8) b.fail(n, "index output type ", dtype_name(index), " is not supported");
  if (narrow && index == DType::U8 && r > 256) b.fail(n, r, " classes do not fit uint8 indices");
  const bool last = n.get_int("select_last_index", 0) != 0;
  const DType t = b.compute;
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    argmax(t, index, bd.at(x), bd.at(y), outer, r, inner, is_min, last, s);
  });
}

void lower_topk(Builder& b, const Node& n) {
  const int x = b.input(n, 0);
  require_compute(b, n, x);
  const Shape xs = b.slot(x).shape;
  const std::size_t axis = static_cast<std::size_t>(b.axis(n, n.get_int("axis", -1), static_cast<int64_t>(xs.size())));
  const std::vector<int64_t> kv = b.const_ints(n, 1, "K");
  if (kv.size() != 1) b.fail(n, "K must hold one value");
  const int64_t k = kv[0];
  int64_t outer, r, inner;
  split_around(xs, axis, axis, &outer, &r, &inner);
  if (k < 0 || k > r) b.fail(n, "K = ", k, " is outside [0, ", r, "]");
  const bool largest = n.get_int("largest", 1) != 0;
  const int values = b.output(n, 0);
  int indices = b.output(n, 1);
  Shape os = xs;
  os[axis] = k;
  if (indices < 0) indices = b.temp(DType::I64, os, n.name + " (indices)");
  if (b.slot(indices).dtype != DType::I64) b.fail(n, "indices must be int64");
  int vals = values >= 0 ? values : b.temp(b.compute, os, n.name + " (values)");
  const DType t = b.compute;
  b.add(n.name, {x, vals, indices}, [=](Context&, const Bindings& bd, cudaStream_t s) {
    topk(t, bd.at(x), bd.at(vals), bd.at<int64_t>(indices), outer, r, inner, k, largest, s);
  });
}

}  // namespace

bool lower_reduce(Builder& b, const Node& n) {
  if (n.domain == "sluice") {
    if (n.op == "Detections") {
      lower_detections(b, n);
      return true;
    }
    if (n.op != "ArgMaxCast") return false;
    lower_argmax(b, n, false, true);
    return true;
  }
  if (!n.domain.empty()) return false;
  static const std::map<std::string, RedOp> reductions = {
      {"ReduceSum", RedOp::Sum}, {"ReduceMean", RedOp::Mean}, {"ReduceMax", RedOp::Max}, {"ReduceMin", RedOp::Min},
      {"ReduceProd", RedOp::Prod}, {"ReduceSumSquare", RedOp::SumSquare}, {"ReduceL1", RedOp::L1},
      {"ReduceL2", RedOp::L2}, {"ReduceLogSumExp", RedOp::LogSumExp}};
  const auto it = reductions.find(n.op);
  if (it != reductions.end()) lower_reduce_op(b, n, it->second);
  else if (n.op == "MaxPool") lower_pool(b, n, true, false);
  else if (n.op == "AveragePool") lower_pool(b, n, false, false);
  else if (n.op == "GlobalAveragePool") lower_pool(b, n, false, true);
  else if (n.op == "GlobalMaxPool") lower_pool(b, n, true, true);
  else if (n.op == "Softmax") lower_softmax(b, n, false);
  else if (n.op == "LogSoftmax") lower_softmax(b, n, true);
  else if (n.op == "ArgMax") lower_argmax(b, n, false, false);
  else if (n.op == "ArgMin") lower_argmax(b, n, true, false);
  else if (n.op == "TopK") lower_topk(b, n);
  else return false;
  return true;
}

}  // namespace sluice::cuda
