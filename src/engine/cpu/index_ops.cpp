// Split, GatherND, ScatterND, CumSum and Trilu.  The copies move whole elements of any type by
// their size in bytes; CumSum and ScatterND's reductions compute in the element type.
#include <algorithm>
#include <cstring>

#include "core/axis_view.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

std::unique_ptr<Kernel> make_split(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const int64_t axis = init.axis(init.node.get_int("axis", 0), r);
  const std::size_t es = dtype_size(x.dtype);
  const AxisView view = axis_view(x.shape, axis);
  const int64_t outer = view.outer, inner = view.inner;
  // Per output, its extent along the axis: the split input, else equal parts (the last one smaller
  // with opset 18's num_outputs).  An output nobody reads has no buffer and is skipped.
  const int64_t parts = static_cast<int64_t>(init.node.outputs.size()), dim = x.shape[axis];
  std::vector<int64_t> sizes;
  if (init.has_input(1)) {
    sizes = init.const_ints(1, "split");
  } else {
    const int64_t each = (dim + parts - 1) / std::max<int64_t>(parts, 1);
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - k * each)));
  }
  int64_t sum = 0;
  for (int64_t v : sizes) sum += v;
  if (static_cast<int64_t>(sizes.size()) != parts || sum != dim)
    init.fail("split ", shape_str(sizes), " does not cut axis ", axis, " of ", shape_str(x.shape), " into ", parts, " outputs");
  std::vector<bool> wanted(sizes.size());
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    wanted[k] = init.out[k] != nullptr;
    if (wanted[k] && (static_cast<int64_t>(init.out[k]->shape.size()) != r || init.out[k]->shape[axis] != sizes[k]))
      init.fail("output ", k, " ", shape_str(init.out[k]->shape), " does not hold ", sizes[k], " along axis ", axis);
  }
  const int64_t row = x.shape[axis] * inner;
  return lambda_kernel([=](const KernelArgs& a) {
    const uint8_t* src = static_cast<const uint8_t*>(a.in[0]);
    a.pool.parallel_for(outer, [&](int64_t o, int) {
      int64_t begin = 0;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const std::size_t bytes = static_cast<std::size_t>(sizes[k] * inner) * es;
        if (wanted[k] && a.out[k]) std::memcpy(static_cast<uint8_t*>(a.out[k]) + o * bytes, src + (o * row + begin * inner) * es, bytes);
        begin += sizes[k];
      }
    });
  });
}

int64_t read_index(const void* p, DType t, int64_t i) {
  return t == DType::I32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

// The element offset in data of one index tuple (k values at `idx`), for the axes from `first`.
int64_t nd_offset(const KernelInit* init, const void* idx, DType it, int64_t at, int64_t k, const Shape& xs,
                  const std::vector<int64_t>& st, int64_t first) {
  int64_t off = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t v = read_index(idx, it, at + j);
    const int64_t dim = xs[static_cast<std::size_t>(first + j)];
    if (v < -dim || v >= dim) {
      if (init) init->fail("index ", v, " is out of range for size ", dim);
      throw InputError(str("GatherND/ScatterND: index ", v, " is out of range for an axis of size ", dim));
    }
    off += (v < 0 ? v + dim : v) * st[static_cast<std::size_t>(first + j)];
  }
  return off;
}

std::unique_ptr<Kernel> make_gather_nd(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& ind = init.input(1);
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32) init.fail("indices must be int64 or int32");
  const int64_t b = init.node.get_int("batch_dims", 0), k = ind.shape.back();
  const Shape xs = x.shape;
  const std::vector<int64_t> st = strides_of(xs);
  int64_t batch = 1, inner = 1;
  for (int64_t d = 0; d < b; ++d) batch *= xs[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(b + k); d < xs.size(); ++d) inner *= xs[d];
  const int64_t per_batch = shape_numel(ind.shape) / std::max<int64_t>(1, batch * k);
  const int64_t batch_stride = shape_numel(xs) / std::max<int64_t>(1, batch);
  const std::size_t es = dtype_size(x.dtype);
  const DType it = ind.dtype;
  return lambda_kernel([=](const KernelArgs& a) {
    const uint8_t* src = static_cast<const uint8_t*>(a.in[0]);
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    const std::size_t bytes = static_cast<std::size_t>(inner) * es;
    for (int64_t t = 0; t < batch * per_batch; ++t) {
      const int64_t off = (t / per_batch) * batch_stride + nd_offset(nullptr, a.in[1], it, t * k, k, xs, st, b);
      std::memcpy(dst + t * bytes, src + off * es, bytes);
    }
  });
}

template <typename T>
void reduce_into(T* y, const T* u, int64_t n, int mode) {
  for (int64_t i = 0; i < n; ++i) {
    switch (mode) {
      case 1: y[i] += u[i]; break;
      case 2: y[i] *= u[i]; break;
      case 3: y[i] = std::max(y[i], u[i]); break;
      case 4: y[i] = std::min(y[i], u[i]); break;
      default: y[i] = u[i];
    }
  }
}

std::unique_ptr<Kernel> make_scatter_nd(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const ValueInfo& ind = init.input(1);
  if (ind.dtype != DType::I64 && ind.dtype != DType::I32) init.fail("indices must be int64 or int32");
  const std::string red = init.node.get_string("reduction", "none");
  const int mode = red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : 0;
  if (mode == 0 && red != "none") init.fail("reduction '", red, "' is not supported");
  if (mode != 0 && x.dtype != DType::F32 && x.dtype != DType::I64) init.fail("reductions are implemented for float32 and int64");
  const int64_t k = ind.shape.back();
  const Shape xs = x.shape;
  const std::vector<int64_t> st = strides_of(xs);
  int64_t inner = 1;
  for (std::size_t d = static_cast<std::size_t>(k); d < xs.size(); ++d) inner *= xs[d];
  const int64_t rows = shape_numel(ind.shape) / std::max<int64_t>(1, k);
  const std::size_t es = dtype_size(x.dtype), total = static_cast<std::size_t>(shape_numel(xs)) * es;
  const DType it = ind.dtype, dt = x.dtype;
  return lambda_kernel([=](const KernelArgs& a) {
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    const uint8_t* upd = static_cast<const uint8_t*>(a.in[2]);
    if (dst != a.in[0]) std::memcpy(dst, a.in[0], total);
    const std::size_t bytes = static_cast<std::size_t>(inner) * es;
    for (int64_t p = 0; p < rows; ++p) {
      const int64_t off = nd_offset(nullptr, a.in[1], it, p * k, k, xs, st, 0);
      if (mode == 0) std::memcpy(dst + off * es, upd + p * bytes, bytes);
      else if (dt == DType::F32)
        reduce_into(reinterpret_cast<float*>(dst) + off, reinterpret_cast<const float*>(upd) + p * inner, inner, mode);
      else
        reduce_into(reinterpret_cast<int64_t*>(dst) + off, reinterpret_cast<const int64_t*>(upd) + p * inner, inner, mode);
    }
  });
}

template <typename T>
void cumsum(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool excl, bool rev, ThreadPool& pool) {
  pool.parallel_for(outer, [&](int64_t o, int) {
    for (int64_t i = 0; i < inner; ++i) {
      T acc = 0;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t p = (o * len + (rev ? len - 1 - t : t)) * inner + i;
        if (excl) {
          y[p] = acc;
          acc += x[p];
        } else {
          acc += x[p];
          y[p] = acc;
        }
      }
    }
  });
}

std::unique_ptr<Kernel> make_cumsum(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const std::vector<int64_t> av = init.const_ints(1, "axis");
  if (av.size() != 1) init.fail("axis must be a scalar");
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const int64_t axis = init.axis(av[0], r);
  const AxisView view = axis_view(x.shape, axis);
  const int64_t outer = view.outer, inner = view.inner;
  const int64_t len = x.shape[axis];
  const bool excl = init.node.get_int("exclusive", 0) != 0, rev = init.node.get_int("reverse", 0) != 0;
  const DType t = x.dtype;
  if (t != DType::F32 && t != DType::I64 && t != DType::I32) init.fail("type ", dtype_name(t), " is not implemented");
  return lambda_kernel([=](const KernelArgs& a) {
    if (t == DType::F32)
      cumsum(static_cast<const float*>(a.in[0]), static_cast<float*>(a.out[0]), outer, len, inner, excl, rev, a.pool);
    else if (t == DType::I64)
      cumsum(static_cast<const int64_t*>(a.in[0]), static_cast<int64_t*>(a.out[0]), outer, len, inner, excl, rev, a.pool);
    else
      cumsum(static_cast<const int32_t*>(a.in[0]), static_cast<int32_t*>(a.out[0]), outer, len, inner, excl, rev, a.pool);
  });
}

std::unique_ptr<Kernel> make_trilu(const KernelInit& init) {
  const ValueInfo& x = init.input(0);
  const int64_t k = init.has_input(1) ? init.const_ints(1, "k").at(0) : 0;
  const bool upper = init.node.get_int("upper", 1) != 0;
  const std::size_t r = x.shape.size();
  const int64_t rows = x.shape[r - 2], cols = x.shape[r - 1];
  const int64_t mats = shape_numel(x.shape) / std::max<int64_t>(1, rows * cols);
  const std::size_t es = dtype_size(x.dtype);
  return lambda_kernel([=](const KernelArgs& a) {
    const uint8_t* src = static_cast<const uint8_t*>(a.in[0]);
    uint8_t* dst = static_cast<uint8_t*>(a.out[0]);
    a.pool.parallel_for(mats * rows, [&](int64_t t, int) {
      const int64_t i = t % rows;
      for (int64_t j = 0; j < cols; ++j) {
        const std::size_t p = static_cast<std::size_t>(t * cols + j) * es;
        if (upper ? j - i >= k : j - i <= k) std::memcpy(dst + p, src + p, es);
        else std::memset(dst + p, 0, es);
      }
    });
  });
}

// Col2Im (the inverse of an unfold): input [N, C * prod(block), L], every block position of every
// sliding window summed into the image [N, C, image...].  A table gives, per (block position,
// window), the image offset it lands on, or -1 in the padding.
std::unique_ptr<Kernel> make_col2im(const KernelInit& init) {
  init.require_float(0);
  const Shape& xs = init.input(0).shape;
  const std::vector<int64_t> image = init.const_ints(1, "image_shape"), block = init.const_ints(2, "block_shape");
  const std::size_t sp = image.size();
  if (xs.size() != 3 || block.size() != sp || sp == 0) init.fail("input ", shape_str(xs), " does not fit a ", sp, "-D Col2Im");
  const std::vector<int64_t> dil = init.node.get_ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> pads = init.node.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::vector<int64_t> strides = init.node.get_ints("strides", std::vector<int64_t>(sp, 1));
  if (dil.size() != sp || pads.size() != 2 * sp || strides.size() != sp) init.fail("dilations, pads or strides do not match the image's rank");
  std::vector<int64_t> windows(sp);
  int64_t kb = 1, L = 1, plane = 1;
  for (std::size_t d = 0; d < sp; ++d) {
    windows[d] = (image[d] + pads[d] + pads[d + sp] - (dil[d] * (block[d] - 1) + 1)) / strides[d] + 1;
    kb *= block[d];
    L *= windows[d];
    plane *= image[d];
  }
  if (xs[2] != L || xs[1] % kb != 0) init.fail("input ", shape_str(xs), " does not hold ", kb, " block positions x ", L, " windows");
  const int64_t n = xs[0], c = xs[1] / kb;
  std::vector<int64_t> table(static_cast<std::size_t>(kb * L));
  const std::vector<int64_t> ist = strides_of(Shape(image.begin(), image.end()));
  for (int64_t k = 0; k < kb; ++k)
    for (int64_t l = 0; l < L; ++l) {
      int64_t kr = k, lr = l, off = 0;
      for (std::size_t d = sp; d-- > 0;) {
        const int64_t kd = kr % block[d], ld = lr % windows[d];
        kr /= block[d];
        lr /= windows[d];
        const int64_t pos = ld * strides[d] - pads[d] + kd * dil[d];
        if (off >= 0 && pos >= 0 && pos < image[d]) off += pos * ist[d];
        else off = -1;
      }
      table[static_cast<std::size_t>(k * L + l)] = off;
    }
  return lambda_kernel([=](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(n * c, [&](int64_t p, int) {
      float* yp = y + p * plane;
      std::fill(yp, yp + plane, 0.f);
      const float* xp = x + p * kb * L;
      for (int64_t i = 0; i < kb * L; ++i)
        if (table[static_cast<std::size_t>(i)] >= 0) yp[table[static_cast<std::size_t>(i)]] += xp[i];
    });
  });
}

}  // namespace

void add_index_kernels(KernelTable& t) {
  t["Col2Im"] = make_col2im;
  t["Split"] = make_split;
  t["GatherND"] = make_gather_nd;
  t["ScatterND"] = make_scatter_nd;
  t["CumSum"] = make_cumsum;
  t["Trilu"] = make_trilu;
}

}  // namespace sluice::cpu
