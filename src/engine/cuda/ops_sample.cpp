// DepthToSpace (DCR, CRD), SpaceToDepth, GatherElements, ScatterElements (reduction none, add,
// mul, max, min) and GridSample (bilinear and nearest; zeros, border and reflection padding;
// align_corners either way) on NCHW-ordered tensors.  GatherElements and ScatterElements turn
// their indices into GatherND / ScatterND tuples over every axis (a kernel of kernels_sample.cu),
// then run those ops' kernels (kernels_index.cu), duplicates combined atomically for the
// reductions; the indices may be int64 or int32.  All of it runs on the device, inside the captured
// CUDA graph.
#include <map>

#include "core/cuda/cuda_check.h"
#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_sample.h"
#include "engine/grid_sample_spec.h"

namespace sluice::cuda {
namespace {

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void lower_depth_space(Builder& b, const Node& n) {
  const int x = b.input(n, 0), y = b.output(n, 0);
  const bool to_space = n.op == "DepthToSpace";
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  const int64_t bs = n.get_int("blocksize", 0);
  const std::string mode = n.get_string("mode", "DCR");
  if (xs.size() != 4 || ys.size() != 4 || bs < 1) b.fail(n, "input ", shape_str(xs), " with blocksize ", bs, " is not a 4-D block rearrangement");
  if (to_space && mode != "DCR" && mode != "CRD") b.fail(n, "mode '", mode, "' is not DCR or CRD");
  if (b.slot(y).dtype != b.slot(x).dtype) b.fail(n, "output is ", dtype_name(b.slot(y).dtype), ", the input ", dtype_name(b.slot(x).dtype));
  const Shape& depth = to_space ? xs : ys;
  const Shape& space = to_space ? ys : xs;
  if (depth[0] != space[0] || depth[1] != space[1] * bs * bs || space[2] != depth[2] * bs || space[3] != depth[3] * bs)
    b.fail(n, shape_str(xs), " -> ", shape_str(ys), " is not a rearrangement by blocks of ", bs);
  DepthSpaceShape s;
  s.n = depth[0], s.dc = depth[1], s.dh = depth[2], s.dw = depth[3], s.b = bs;
  s.crd = to_space && mode == "CRD";
  s.to_space = to_space;
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, y}, [=](Context&, const Bindings& bd, cudaStream_t st) { depth_space(es, bd.at(x), bd.at(y), s, st); });
}

// The tuples step of GatherElements / ScatterElements, and the IndexND over the data they address.
struct ElementPlan {
  int idx = -1, tuples = -1;
  DType index_type = DType::I64;
  ElementTuples t;
  IndexND nd;
  int64_t axis_dim = 0;
};

ElementPlan plan_elements(Builder& b, const Node& n, const Shape& data) {
  ElementPlan p;
  p.idx = b.input(n, 1);
  const Shape is = b.slot(p.idx).shape;
  p.index_type = b.slot(p.idx).dtype;
  if (p.index_type != DType::I64 && p.index_type != DType::I32)
    b.fail(n, "indices are ", dtype_name(p.index_type), ", not int64 or int32");
  const int64_t r = static_cast<int64_t>(data.size());
  if (r < 1 || r > kMaxRank || static_cast<int64_t>(is.size()) != r)
    b.fail(n, "data ", shape_str(data), " and indices ", shape_str(is), " differ in rank or exceed rank ", kMaxRank);
  const int64_t axis = b.axis(n, n.get_int("axis", 0), r);
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && is[static_cast<std::size_t>(d)] > data[static_cast<std::size_t>(d)])
      b.fail(n, "indices ", shape_str(is), " are larger than data ", shape_str(data), " on axis ", d);
  p.t.rank = static_cast<int>(r);
  p.t.axis = static_cast<int>(axis);
  p.t.count = shape_numel(is);
  for (int64_t d = 0; d < r; ++d) p.t.dims[d] = is[static_cast<std::size_t>(d)];
  p.axis_dim = data[static_cast<std::size_t>(axis)];
  p.tuples = b.temp(DType::I64, {p.t.count, r}, n.name + " (index tuples)");
  p.nd.k = static_cast<int>(r);
  p.nd.rows = p.t.count;
  p.nd.rows_per_batch = p.t.count > 0 ? p.t.count : 1;
  p.nd.batch_stride = 0;
  p.nd.slice = 1;
  int64_t stride = 1;
  for (int64_t d = r; d-- > 0;) {
    p.nd.dim[d] = data[static_cast<std::size_t>(d)];
    p.nd.stride[d] = stride;
    stride *= data[static_cast<std::size_t>(d)];
  }
  return p;
}

void lower_gather_elements(Builder& b, const Node& n) {
  const int x = b.input(n, 0), y = b.output(n, 0);
  if (b.slot(y).dtype != b.slot(x).dtype) b.fail(n, "output is ", dtype_name(b.slot(y).dtype), ", the data ", dtype_name(b.slot(x).dtype));
  const ElementPlan p = plan_elements(b, n, b.slot(x).shape);
  if (b.slot(y).shape != b.slot(p.idx).shape) b.fail(n, "output ", shape_str(b.slot(y).shape), " differs from the indices' shape");
  const std::size_t es = dtype_size(b.slot(x).dtype);
  b.add(n.name, {x, p.idx, p.tuples, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    element_tuples(p.index_type, bd.at(p.idx), bd.at<int64_t>(p.tuples), p.t, p.axis_dim, st);
    gather_nd(es, bd.at(x), bd.at<int64_t>(p.tuples), bd.at(y), p.nd, st);
  });
}

void lower_scatter_elements(Builder& b, const Node& n) {
  const std::string reduction = n.get_string("reduction", "none");
  static const std::map<std::string, ScatterReduction> reductions = {
      {"add", ScatterReduction::Add}, {"mul", ScatterReduction::Mul}, {"max", ScatterReduction::Max}, {"min", ScatterReduction::Min}};
  const auto red = reductions.find(reduction);
  if (reduction != "none" && red == reductions.end()) b.fail(n, "reduction '", reduction, "' is not one of none, add, mul, max, min");
  const int x = b.input(n, 0), u = b.input(n, 2), y = b.output(n, 0);
  const DType t = b.slot(x).dtype;
  if (b.slot(u).dtype != t || b.slot(y).dtype != t) b.fail(n, "data, updates and output differ in type");
  const ElementPlan p = plan_elements(b, n, b.slot(x).shape);
  if (b.slot(u).shape != b.slot(p.idx).shape) b.fail(n, "updates ", shape_str(b.slot(u).shape), " differ from the indices' shape");
  if (red != reductions.end() && !is_float_type(t) && t != DType::I64 && t != DType::I32)
    b.fail(n, "reduction '", reduction, "' of ", dtype_name(t), " data: float, int64 or int32 only");
  const std::size_t es = dtype_size(t), bytes = b.slot(y).bytes;
  const bool reduce = red != reductions.end();
  const ScatterReduction r = reduce ? red->second : ScatterReduction::Add;
  b.add(n.name, {x, p.idx, p.tuples, u, y}, [=](Context&, const Bindings& bd, cudaStream_t st) {
    if (bd.at(y) != bd.at(x)) CUDA_CHECK(cudaMemcpyAsync(bd.at(y), bd.at(x), bytes, cudaMemcpyDeviceToDevice, st));
    element_tuples(p.index_type, bd.at(p.idx), bd.at<int64_t>(p.tuples), p.t, p.axis_dim, st);
    if (reduce) scatter_nd_reduce(t, r, bd.at<int64_t>(p.tuples), bd.at(u), bd.at(y), p.nd, st);
    else scatter_nd(es, bd.at<int64_t>(p.tuples), bd.at(u), bd.at(y), p.nd, st);
  });
}

void lower_grid_sample(Builder& b, const Node& n) {
  const int x = b.input(n, 0), grid = b.input(n, 1), y = b.output(n, 0);
  const DType t = b.slot(x).dtype;
  if (!is_float_type(t) || b.slot(grid).dtype != t || b.slot(y).dtype != t)
    b.fail(n, "input, grid and output must be one float type (", dtype_name(t), ", ", dtype_name(b.slot(grid).dtype), ", ",
           dtype_name(b.slot(y).dtype), ")");
  GridSampleSpec s;
  std::string why;
  if (!grid_sample_spec(n, b.slot(x).shape, b.slot(grid).shape, s, why)) b.fail(n, why);
  if (b.slot(y).shape != Shape{s.n, s.c, s.ho, s.wo}) b.fail(n, "output ", shape_str(b.slot(y).shape), " is not [N, C, Ho, Wo]");
  b.add(n.name, {x, grid, y}, [=](Context&, const Bindings& bd, cudaStream_t st) { grid_sample(t, bd.at(x), bd.at(grid), bd.at(y), s, st); });
}

}  // namespace

bool lower_sample(Builder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op == "DepthToSpace" || n.op == "SpaceToDepth") lower_depth_space(b, n);
  else if (n.op == "GatherElements") lower_gather_elements(b, n);
  else if (n.op == "ScatterElements") lower_scatter_elements(b, n);
  else if (n.op == "GridSample") lower_grid_sample(b, n);
  else return false;
  return true;
}

}  // namespace sluice::cuda
