// DepthToSpace (DCR and CRD), SpaceToDepth, GatherElements, ScatterElements and GridSample.  The
// rearrangements and the element gathers move whole elements of any type by their size in bytes;
// ScatterElements' reductions compute in the element type (float32, int64, int32); GridSample reads
// and writes float32 (engine/grid_sample.h, shared with the CUDA engine).
#include <algorithm>
#include <cstring>

#include "engine/cpu/kernel.h"
#include "engine/grid_sample.h"
#include "engine/grid_sample_spec.h"

namespace sluice::cpu {
namespace {

// DepthToSpace and SpaceToDepth as one table: output element i reads input element src[i].
std::unique_ptr<Kernel> make_depth_space(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& yv = init.output(0);
  const bool to_space = init.node.op == "DepthToSpace";
  const int64_t b = init.node.get_int("blocksize", 0);
  const std::string mode = init.node.get_string("mode", "DCR");
  if (x.shape.size() != 4) init.fail("input ", shape_str(x.shape), " is not 4-D");
  if (b < 1) init.fail("blocksize ", b, " must be at least 1");
  if (to_space && mode != "DCR" && mode != "CRD") init.fail("mode '", mode, "' is not DCR or CRD");
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  // Input [n, C, H, W] on the depth side, [n, C / b^2 ... ] whichever way: name the depth side.
  const int64_t dc = to_space ? c : yv.shape[1], dh = to_space ? h : yv.shape[2], dw = to_space ? w : yv.shape[3];
  const int64_t sc = dc / (b * b);
  const bool crd = to_space && mode == "CRD";
  // Per (depth channel, i, j): which space channel and offsets.  Space [n, sc, dh*b, dw*b].
  const std::size_t es = dtype_size(x.dtype);
  return lambda_kernel([=](const KernelArgs& a) {
    const uint8_t* src = static_cast<const uint8_t*>(a.in[0]);
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    a.pool.parallel_for(n * dc, [&](int64_t t, int) {
      const int64_t ni = t / dc, ch = t % dc;
      // depth channel ch = (i*b + j) * sc + s (DCR, and SpaceToDepth) or s * b*b + i*b + j (CRD)
      const int64_t s = crd ? ch / (b * b) : ch % sc, ij = crd ? ch % (b * b) : ch / sc;
      const int64_t i = ij / b, j = ij % b;
      for (int64_t y = 0; y < dh; ++y)
        for (int64_t xx = 0; xx < dw; ++xx) {
          const int64_t depth = ((ni * dc + ch) * dh + y) * dw + xx;
          const int64_t space = ((ni * sc + s) * dh * b + y * b + i) * dw * b + xx * b + j;
          if (to_space) std::memcpy(dst + space * es, src + depth * es, es);
          else std::memcpy(dst + depth * es, src + space * es, es);
        }
    });
  });
}

int64_t index_at(const void* p, DType t, int64_t i) {
  return t == DType::I32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

// GatherElements / ScatterElements: the indices tensor's shape [outer, len, inner] around the axis,
// and the data's strides to map an index position onto the data.
struct ElementIndexing {
  Shape ind;          // indices (and updates, and GatherElements' output) shape
  Shape data;
  int64_t axis = 0;
  std::vector<int64_t> dst;  // data strides
};

ElementIndexing element_indexing(const KernelInit& init, const ValueInfo& data, const ValueInfo& ind) {
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32) init.fail("indices must be int64 or int32");
  if (ind.shape.size() != data.shape.size())
    init.fail("indices ", shape_str(ind.shape), " and data ", shape_str(data.shape), " differ in rank");
  ElementIndexing e;
  e.ind = ind.shape;
  e.data = data.shape;
  e.axis = init.axis(init.node.get_int("axis", 0), static_cast<int64_t>(data.shape.size()));
  for (std::size_t d = 0; d < e.ind.size(); ++d)
    if (static_cast<int64_t>(d) != e.axis && e.ind[d] > e.data[d])
      init.fail("indices ", shape_str(ind.shape), " are larger than data ", shape_str(data.shape), " on axis ", d);
  e.dst = strides_of(e.data);
  return e;
}

// The data offset of index position p (row-major over e.ind) whose index value is v.
int64_t element_offset(const ElementIndexing& e, int64_t p, int64_t v) {
  int64_t off = 0;
  for (std::size_t d = e.ind.size(); d-- > 0;) {
    const int64_t k = p % e.ind[d];
    p /= e.ind[d];
    off += (static_cast<int64_t>(d) == e.axis ? v : k) * e.dst[d];
  }
  return off;
}

int64_t checked_index(const ElementIndexing& e, int64_t v, const char* op) {
  const int64_t dim = e.data[static_cast<std::size_t>(e.axis)];
  if (v < -dim || v >= dim) throw InputError(str(op, ": index ", v, " is out of range for an axis of size ", dim));
  return v < 0 ? v + dim : v;
}

std::unique_ptr<Kernel> make_gather_elements(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ElementIndexing e = element_indexing(init, x, init.input(1));
  const DType it = init.input(1).dtype;
  const std::size_t es = dtype_size(x.dtype);
  const int64_t total = shape_numel(e.ind);
  return lambda_kernel([=](const KernelArgs& a) {
    const uint8_t* src = static_cast<const uint8_t*>(a.in[0]);
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    for_chunks(a.pool, total, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t v = checked_index(e, index_at(a.in[1], it, p), "GatherElements");
        std::memcpy(dst + p * es, src + element_offset(e, p, v) * es, es);
      }
    });
  });
}

template <typename T>
void combine(T* y, T u, int mode) {
  switch (mode) {
    case 1: *y += u; break;
    case 2: *y *= u; break;
    case 3: *y = std::max(*y, u); break;
    case 4: *y = std::min(*y, u); break;
    default: *y = u;
  }
}

std::unique_ptr<Kernel> make_scatter_elements(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ElementIndexing e = element_indexing(init, x, init.input(1));
  if (init.input(2).shape != e.ind) init.fail("updates ", shape_str(init.input(2).shape), " differ from the indices' shape");
  if (init.input(2).dtype != x.dtype) init.fail("updates and data differ in type");
  const std::string red = init.node.get_string("reduction", "none");
  const int mode = red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : 0;
  if (mode == 0 && red != "none") init.fail("reduction '", red, "' is not supported");
  const DType dt = x.dtype, it = init.input(1).dtype;
  if (mode != 0 && dt != DType::F32 && dt != DType::I64 && dt != DType::I32)
    init.fail("reductions are implemented for float32, int64 and int32");
  const std::size_t es = dtype_size(dt), total = static_cast<std::size_t>(shape_numel(e.data)) * es;
  const int64_t count = shape_numel(e.ind);
  return lambda_kernel([=](const KernelArgs& a) {
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    const uint8_t* upd = static_cast<const uint8_t*>(a.in[2]);
    if (dst != a.in[0]) std::memcpy(dst, a.in[0], total);
    // In index order, one thread: with duplicate indices the last update wins (reduction none), as
    // ONNX Runtime's CPU kernel does; the reductions combine every one.
    for (int64_t p = 0; p < count; ++p) {
      const int64_t off = element_offset(e, p, checked_index(e, index_at(a.in[1], it, p), "ScatterElements"));
      if (mode == 0) std::memcpy(dst + off * es, upd + p * es, es);
      else if (dt == DType::F32) combine(reinterpret_cast<float*>(dst) + off, reinterpret_cast<const float*>(upd)[p], mode);
      else if (dt == DType::I64) combine(reinterpret_cast<int64_t*>(dst) + off, reinterpret_cast<const int64_t*>(upd)[p], mode);
      else combine(reinterpret_cast<int32_t*>(dst) + off, reinterpret_cast<const int32_t*>(upd)[p], mode);
    }
  });
}

std::unique_ptr<Kernel> make_grid_sample(const KernelInit& init) {
  init.require_float(0);
  init.require_float(1);
  GridSampleSpec s;
  std::string why;
  if (!grid_sample_spec(init.node, init.input(0).shape, init.input(1).shape, s, why)) init.fail(why);
  return lambda_kernel([=](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* grid = static_cast<const float*>(a.in[1]);
    float* y = static_cast<float*>(a.out[0]);
    const int64_t points = s.ho * s.wo;
    a.pool.parallel_for(s.n * s.c, [&](int64_t t, int) {
      const int64_t ni = t / s.c;
      const float* plane = x + t * s.h * s.w;
      const float* gp = grid + ni * points * 2;
      auto at = [&](int64_t yi, int64_t xi) { return plane[yi * s.w + xi]; };
      for (int64_t p = 0; p < points; ++p) y[t * points + p] = grid_sample_point(at, s, gp[2 * p], gp[2 * p + 1]);
    });
  });
}

}  // namespace

void add_sample_kernels(KernelTable& t) {
  t["DepthToSpace"] = make_depth_space;
  t["SpaceToDepth"] = make_depth_space;
  t["GatherElements"] = make_gather_elements;
  t["ScatterElements"] = make_scatter_elements;
  t["GridSample"] = make_grid_sample;
}

}  // namespace sluice::cpu
