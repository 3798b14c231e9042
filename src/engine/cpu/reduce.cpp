// Reductions along axes: ReduceMean/Sum/Max/Min/Prod, Softmax, LogSoftmax, ArgMax/ArgMin,
// sluice.ArgMaxCast and TopK.  Sums accumulate in double in a fixed order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/axis_view.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

enum class Red { Mean, Sum, Max, Min, Prod, L2, L1, SumSquare };

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelInit& init, Red op) : op_(op) {
    init.require_float(0);
    const Shape& xs = init.input(0).shape;
    const int64_t r = static_cast<int64_t>(xs.size());
    if (r > 16) init.fail("rank ", r, " is not supported");
    std::vector<int64_t> axes;
    bool axes_given;
    // The axes moved from an attribute to an input: ReduceSum at opset 13, the others at 18.
    const bool as_input = init.opset >= (op == Red::Sum ? 13 : 18);
    if (as_input) {
      axes_given = init.has_input(1) && shape_numel(init.input(1).shape) > 0;
      if (axes_given) axes = init.const_ints(1, "axes");
    } else {
      axes_given = init.node.has("axes");
      axes = init.node.get_ints("axes");
    }
    const bool noop = init.node.get_int("noop_with_empty_axes", 0) != 0;
    std::vector<bool> red(r, false);
    if (!axes_given || axes.empty()) {
      if (!noop) red.assign(r, true);
    } else {
      for (auto a : axes) red[init.axis(a, r)] = true;
    }
    const auto st = strides_of(xs);
    count_ = 1;
    for (int64_t d = 0; d < r; ++d) {
      if (red[d]) {
        rdims_.push_back(xs[d]);
        rstrides_.push_back(st[d]);
        count_ *= xs[d];
      } else {
        kdims_.push_back(xs[d]);
        kstrides_.push_back(st[d]);
      }
    }
    outputs_ = shape_numel(kdims_);
    if (shape_numel(init.output(0).shape) != outputs_) init.fail("output ", shape_str(init.output(0).shape), " has the wrong size");
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    const int64_t per_task = std::max<int64_t>(1, 65536 / std::max<int64_t>(count_, 1));
    a.pool.parallel_for(chunk_count(outputs_, per_task), [&](int64_t t, int) {
      const int64_t end = std::min(outputs_, (t + 1) * per_task);
      for (int64_t o = t * per_task; o < end; ++o) y[o] = reduce_one(x + base_offset(o));
    });
  }

 private:
  int64_t base_offset(int64_t o) const {
    int64_t off = 0;
    for (std::size_t d = kdims_.size(); d-- > 0;) {
      off += (o % kdims_[d]) * kstrides_[d];
      o /= kdims_[d];
    }
    return off;
  }

  float reduce_one(const float* x) const {
    double acc = op_ == Red::Prod ? 1.0 : 0.0;
    float best = op_ == Red::Max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    const std::size_t nd = rdims_.size();
    int64_t idx[16] = {0};
    for (int64_t i = 0; i < count_; ++i) {
      int64_t off = 0;
      for (std::size_t d = 0; d < nd; ++d) off += idx[d] * rstrides_[d];
      const float v = x[off];
      switch (op_) {
        case Red::Mean: case Red::Sum: acc += v; break;
        case Red::L2: case Red::SumSquare: acc += static_cast<double>(v) * v; break;
        case Red::L1: acc += std::fabs(v); break;
        case Red::Prod: acc *= v; break;
        case Red::Max: best = std::max(best, v); break;
        case Red::Min: best = std::min(best, v); break;
      }
      for (std::size_t d = nd; d-- > 0;) {
        if (++idx[d] < rdims_[d]) break;
        idx[d] = 0;
      }
    }
    switch (op_) {
      case Red::Mean: return static_cast<float>(acc / static_cast<double>(count_));
      case Red::Sum: case Red::Prod: case Red::L1: case Red::SumSquare: return static_cast<float>(acc);
      case Red::L2: return static_cast<float>(std::sqrt(acc));
      default: return best;
    }
  }

  Red op_;
  std::vector<int64_t> kdims_, kstrides_, rdims_, rstrides_;
  int64_t count_ = 1, outputs_ = 0;
};

std::unique_ptr<Kernel> make_softmax(const KernelInit& init, bool log) {
  init.require_float(0);
  const Shape& xs = init.input(0).shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  AxisView v;
  if (init.opset < 13) {  // the input is coerced to 2-D at `axis`
    const int64_t axis = init.axis(init.node.get_int("axis", 1), std::max<int64_t>(r, 1));
    v.outer = 1;
    for (int64_t d = 0; d < axis; ++d) v.outer *= xs[d];
    v.n = shape_numel(xs) / std::max<int64_t>(v.outer, 1);
  } else {
    v = axis_view(xs, init.axis(init.node.get_int("axis", -1), r));
  }
  return lambda_kernel([v, log](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(v.outer, [&](int64_t o, int) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const float* xs = x + o * v.n * v.inner + i;
        float* ys = y + o * v.n * v.inner + i;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < v.n; ++k) mx = std::max(mx, xs[k * v.inner]);
        double sum = 0.0;
        for (int64_t k = 0; k < v.n; ++k) sum += std::exp(xs[k * v.inner] - mx);
        if (log) {
          const float ls = static_cast<float>(std::log(sum));
          for (int64_t k = 0; k < v.n; ++k) ys[k * v.inner] = xs[k * v.inner] - mx - ls;
        } else {
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t k = 0; k < v.n; ++k) ys[k * v.inner] = std::exp(xs[k * v.inner] - mx) * inv;
        }
      }
    });
  });
}

// ArgMax/ArgMin (int64 indices) and sluice.ArgMaxCast (uint8 or int32 indices, keepdims=0).
std::unique_ptr<Kernel> make_arg(const KernelInit& init, bool is_max) {
  init.require_float(0);
  const Shape& xs = init.input(0).shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  const AxisView v = axis_view(xs, init.axis(init.node.get_int("axis", 0), r));
  const bool last = init.node.get_int("select_last_index", 0) != 0;
  const DType out = init.output(0).dtype;
  if (init.node.op == "ArgMaxCast") {
    const DType to = dtype_from_onnx(static_cast<int>(init.node.get_int("to", 6)));
    if (to != out || (out != DType::U8 && out != DType::I32)) init.fail("indices must be uint8 or int32 and match 'to'");
    if (out == DType::U8 && v.n > 256) init.fail(v.n, " classes do not fit uint8 indices");
  } else if (out != DType::I64) {
    init.fail("indices must be int64");
  }
  if (shape_numel(init.output(0).shape) != v.outer * v.inner) init.fail("output has the wrong size");
  return lambda_kernel([=](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    const int64_t total = v.outer * v.inner;
    for_chunks(a.pool, total, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const float* xs = x + (p / v.inner) * v.n * v.inner + p % v.inner;
        int64_t at = 0;
        float best = xs[0];
        for (int64_t k = 1; k < v.n; ++k) {
          const float c = xs[k * v.inner];
          const bool better = is_max ? (last ? c >= best : c > best) : (last ? c <= best : c < best);
          if (better) {
            best = c;
            at = k;
          }
        }
        switch (out) {
          case DType::U8: static_cast<uint8_t*>(a.out[0])[p] = static_cast<uint8_t>(at); break;
          case DType::I32: static_cast<int32_t*>(a.out[0])[p] = static_cast<int32_t>(at); break;
          default: static_cast<int64_t*>(a.out[0])[p] = at; break;
        }
      }
    }, 4096);
  });
}

class TopKKernel final : public Kernel {
 public:
  explicit TopKKernel(const KernelInit& init) {
    init.require_float(0);
    const Shape& xs = init.input(0).shape;
    const int64_t r = static_cast<int64_t>(xs.size());
    const int64_t axis = init.axis(init.node.get_int("axis", -1), r);
    v_ = axis_view(xs, axis);
    const Shape& ys = init.output(0).shape;
    if (ys.size() != xs.size()) init.fail("values output ", shape_str(ys), " does not match input ", shape_str(xs));
    k_ = ys[axis];  // static shapes: the output's extent is K
    if (k_ > v_.n) init.fail("K = ", k_, " exceeds the axis extent ", v_.n);
    if (init.out.size() > 1 && init.out[1]) init.require_dtype(init.output(1), DType::I64);
    largest_ = init.node.get_int("largest", 1) != 0;
  }

  std::size_t scratch_bytes(int threads) const override { return threads * per_thread(); }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    float* vals = static_cast<float*>(a.out[0]);
    int64_t* inds = static_cast<int64_t*>(a.out[1]);  // nullptr when nothing reads the indices
    a.pool.parallel_for(v_.outer, [&](int64_t o, int thread) {
      int64_t* order = reinterpret_cast<int64_t*>(static_cast<char*>(a.scratch) + thread * per_thread());
      for (int64_t i = 0; i < v_.inner; ++i) {
        const float* xs = x + o * v_.n * v_.inner + i;
        for (int64_t k = 0; k < v_.n; ++k) order[k] = k;
        // Ties keep the lower index first, as ONNX Runtime does.
        auto cmp = [&](int64_t p, int64_t q) {
          const float a1 = xs[p * v_.inner], b1 = xs[q * v_.inner];
          if (a1 != b1) return largest_ ? a1 > b1 : a1 < b1;
          return p < q;
        };
        std::partial_sort(order, order + k_, order + v_.n, cmp);
        for (int64_t k = 0; k < k_; ++k) {
          const int64_t pos = (o * k_ + k) * v_.inner + i;
          vals[pos] = xs[order[k] * v_.inner];
          if (inds) inds[pos] = order[k];
        }
      }
    });
  }

 private:
  std::size_t per_thread() const { return align64(static_cast<std::size_t>(v_.n) * sizeof(int64_t)); }
  AxisView v_;
  int64_t k_ = 0;
  bool largest_ = true;
};

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  t["ReduceMean"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::Mean); };
  t["ReduceSum"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::Sum); };
  t["ReduceMax"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::Max); };
  t["ReduceMin"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::Min); };
  t["ReduceL2"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::L2); };
  t["ReduceL1"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::L1); };
  t["ReduceSumSquare"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::SumSquare); };
  t["ReduceProd"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, Red::Prod); };
  t["Softmax"] = [](const KernelInit& i) { return make_softmax(i, false); };
  t["LogSoftmax"] = [](const KernelInit& i) { return make_softmax(i, true); };
  t["ArgMax"] = [](const KernelInit& i) { return make_arg(i, true); };
  t["ArgMin"] = [](const KernelInit& i) { return make_arg(i, false); };
  t["sluice.ArgMaxCast"] = [](const KernelInit& i) { return make_arg(i, true); };
  t["TopK"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<TopKKernel>(i); };
}

}  // namespace sluice::cpu
