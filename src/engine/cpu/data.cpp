// Gather, Slice, Pad, Expand and Tile, for tensors of any element type.  All but Gather are
// per-axis index maps (index_map.h) computed when the engine is built.
#include <cstring>
#include <limits>

#include "core/axis_view.h"
#include "engine/cpu/index_map.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

std::unique_ptr<Kernel> make_gather(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& ind = init.input(1);
  const ValueInfo& y = init.output(0);
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32) init.fail("indices must be int64 or int32");
  const int64_t r = static_cast<int64_t>(x.shape.size());
  if (r == 0) init.fail("data must have rank 1 or more");
  const int64_t axis = init.axis(init.node.get_int("axis", 0), r);
  Shape expect(x.shape.begin(), x.shape.begin() + axis);
  expect.insert(expect.end(), ind.shape.begin(), ind.shape.end());
  expect.insert(expect.end(), x.shape.begin() + axis + 1, x.shape.end());
  if (y.shape != expect || y.dtype != x.dtype) init.fail("output ", shape_str(y.shape), " should be ", shape_str(expect));
  const AxisView view = axis_view(x.shape, axis);
  const int64_t outer = view.outer, inner = view.inner;
  const int64_t dim = x.shape[axis], count = shape_numel(ind.shape);
  const std::size_t bytes = static_cast<std::size_t>(inner) * dtype_size(x.dtype);
  const bool i64 = ind.dtype == DType::I64;
  const std::string who = init.node.describe();
  return lambda_kernel([=](const KernelArgs& a) {
    const char* src = static_cast<const char*>(a.in[0]);
    char* dst = static_cast<char*>(a.out[0]);
    a.pool.parallel_for(outer, [&](int64_t o, int) {
      for (int64_t j = 0; j < count; ++j) {
        int64_t i = i64 ? static_cast<const int64_t*>(a.in[1])[j] : static_cast<const int32_t*>(a.in[1])[j];
        if (i < 0) i += dim;
        if (i < 0 || i >= dim) throw InputError(str("cpu engine: ", who, ": index out of range [", -dim, ", ", dim, ")"));
        std::memcpy(dst + (o * count + j) * bytes, src + (o * dim + i) * bytes, bytes);
      }
    });
  });
}

IndexMap identity_map(const ValueInfo& x) {
  IndexMap m;
  m.out = x.shape;
  m.elem = dtype_size(x.dtype);
  const auto st = strides_of(x.shape);
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    std::vector<int64_t> offs(static_cast<std::size_t>(x.shape[d]));
    for (int64_t i = 0; i < x.shape[d]; ++i) offs[i] = i * st[d];
    m.offsets.push_back(std::move(offs));
  }
  return m;
}

std::unique_ptr<Kernel> map_kernel(const KernelInit& init, IndexMap m) {
  const ValueInfo& y = init.output(0);
  if (m.out != y.shape || m.elem != dtype_size(y.dtype) || y.dtype != init.input(0).dtype)
    init.fail("output ", dtype_name(y.dtype), shape_str(y.shape), " should be ", shape_str(m.out));
  if (m.out.size() > kMaxRank) init.fail("rank ", m.out.size(), " is not supported");
  return lambda_kernel([m](const KernelArgs& a) { gather_by_map(m, a.in[0], a.out[0], a.pool); });
}

std::unique_ptr<Kernel> make_slice(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (init.opset < 10) {
    starts = init.node.get_ints("starts");
    ends = init.node.get_ints("ends");
    axes = init.node.get_ints("axes");
  } else {
    starts = init.const_ints(1, "starts");
    ends = init.const_ints(2, "ends");
    if (init.has_input(3)) axes = init.const_ints(3, "axes");
    if (init.has_input(4)) steps = init.const_ints(4, "steps");
  }
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    init.fail("starts, ends, axes and steps differ in length");
  IndexMap m = identity_map(x);
  std::vector<bool> seen(r, false);
  const auto st = strides_of(x.shape);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int64_t ax = init.axis(axes[i], r);
    if (seen[ax]) init.fail("axis ", ax, " appears twice");
    seen[ax] = true;
    const int64_t dim = x.shape[ax], step = steps[i];
    if (step == 0) init.fail("steps must not be 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::max<int64_t>(0, std::min(s, dim));
      e = std::max<int64_t>(0, std::min(e, dim));
    } else {
      s = std::max<int64_t>(-1, std::min(s, dim - 1));
      e = std::max<int64_t>(-1, std::min(e, dim - 1));
    }
    // s and e lie in [-1, dim], so their difference cannot overflow; the step can be anything
    // (INT64_MIN included), hence the unsigned division.
    const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    const int64_t span = step > 0 ? e - s : s - e;
    const int64_t n = span > 0 ? static_cast<int64_t>(static_cast<uint64_t>(span - 1) / stride) + 1 : 0;
    m.out[ax] = n;
    auto& offs = m.offsets[ax];
    offs.resize(static_cast<std::size_t>(n));
    for (int64_t o = 0; o < n; ++o) offs[o] = (s + o * step) * st[ax];
  }
  return map_kernel(init, std::move(m));
}

std::unique_ptr<Kernel> make_pad(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const std::string mode = init.node.get_string("mode", "constant");
  std::vector<int64_t> pads, axes;
  double value = 0.0;
  if (init.opset < 11) {
    pads = init.node.get_ints("pads");
    value = init.node.get_float("value", 0.f);
  } else {
    pads = init.const_ints(1, "pads");
    if (init.has_input(2) && shape_numel(init.input(2).shape) > 0) {
      const Tensor& v = init.const_input(2, "constant_value");
      value = (v.dtype == DType::I64 || v.dtype == DType::I32) ? static_cast<double>(v.as_int64()[0]) : v.as_float()[0];
    }
    if (init.has_input(3)) axes = init.const_ints(3, "axes");
  }
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  if (pads.size() != 2 * axes.size()) init.fail("pads has ", pads.size(), " values for ", axes.size(), " axes");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") init.fail("mode '", mode, "' is unknown");
  const int64_t na = static_cast<int64_t>(axes.size());
  IndexMap m = identity_map(x);
  try {
    m.fill = scalar_bits(x.dtype, value);   // the fill value as the output's bit pattern
  } catch (const Error& e) {
    init.fail(e.what());                     // the same words, naming the node
  }
  const auto st = strides_of(x.shape);
  for (int64_t i = 0; i < na; ++i) {
    const int64_t ax = init.axis(axes[i], r);
    const int64_t dim = x.shape[ax], before = pads[i], after = pads[i + na];
    const int64_t n = dim + before + after;
    if (n < 0) init.fail("pads remove more than axis ", ax, " holds");
    if (mode != "constant" && dim == 0 && n > 0) init.fail("cannot ", mode, "-pad an empty axis");
    m.out[ax] = n;
    auto& offs = m.offsets[ax];
    offs.resize(static_cast<std::size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      int64_t k = o - before;
      if (k < 0 || k >= dim) {
        if (mode == "constant") {
          k = -1;
        } else if (mode == "edge") {
          k = k < 0 ? 0 : dim - 1;
        } else if (mode == "wrap") {
          k = ((k % dim) + dim) % dim;
        } else if (dim == 1) {  // reflect
          k = 0;
        } else {
          const int64_t period = 2 * (dim - 1);
          k = ((k % period) + period) % period;
          if (k >= dim) k = period - k;
        }
      }
      offs[o] = k < 0 ? -1 : k * st[ax];
    }
  }
  return map_kernel(init, std::move(m));
}

// Expand (numpy broadcast to the output shape) and Tile (repeat): offsets repeat the input's.
std::unique_ptr<Kernel> make_repeat(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& y = init.output(0);
  const std::size_t r = y.shape.size();
  if (x.shape.size() > r) init.fail("output rank is smaller than the input's");
  const bool expand = init.node.op == "Expand";
  if (!expand && x.shape.size() != r) init.fail("Tile keeps the rank");
  const auto st = strides_of(x.shape);
  IndexMap m;
  m.out = y.shape;
  m.elem = dtype_size(x.dtype);
  const std::size_t off = r - x.shape.size();
  for (std::size_t d = 0; d < r; ++d) {
    const int64_t dim = d < off ? 1 : x.shape[d - off];
    const int64_t stride = d < off ? 0 : st[d - off];
    if (expand ? (dim != 1 && dim != y.shape[d]) : (dim == 0 ? y.shape[d] != 0 : y.shape[d] % dim != 0))
      init.fail("input ", shape_str(x.shape), " does not ", expand ? "broadcast" : "tile", " to ", shape_str(y.shape));
    std::vector<int64_t> offs(static_cast<std::size_t>(y.shape[d]));
    for (int64_t o = 0; o < y.shape[d]; ++o) offs[o] = dim == 1 ? 0 : (o % dim) * stride;
    m.offsets.push_back(std::move(offs));
  }
  return map_kernel(init, std::move(m));
}

}  // namespace

void add_data_kernels(KernelTable& t) {
  t["Gather"] = make_gather;
  t["Slice"] = make_slice;
  t["Pad"] = make_pad;
  t["Expand"] = make_repeat;
  t["Tile"] = make_repeat;
}

}  // namespace sluice::cpu
