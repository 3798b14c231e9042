// Einsum, float32, as a chain of batched matrix products.  Operands are contracted left to right;
// for each pair every label is one of
//   batch  in both operands and still needed afterwards (the output or a later operand)
//   m / n  in one operand only and still needed
//   k      not needed afterwards: summed (an operand without it reads it with stride 0, which sums
//          the other operand's values over it before the product, as the equation means)
// Each operand is gathered into [batch, m, k] / [batch, k, n] (a repeated label within one operand,
// a diagonal, reads with the sum of its strides; a broadcast ellipsis axis of size 1 with stride 0)
// and multiplied with sgemm.  A single operand is contracted with a scalar 1.
#include <algorithm>
#include <cstring>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"
#include "model/einsum.h"

namespace sluice::cpu {
namespace {

// A tensor seen through labels: per label, its element stride (0: absent or broadcast).
struct View {
  std::vector<int> labels;         // in memory order (the result of a step, contiguous)
  std::vector<int64_t> stride;     // indexed by label id
};

View operand_view(const std::vector<int>& axes, const Shape& shape, const std::vector<int64_t>& sizes) {
  View v;
  v.stride.assign(sizes.size(), 0);
  const std::vector<int64_t> st = strides_of(shape);
  for (std::size_t d = 0; d < axes.size(); ++d) {
    const int l = axes[d];
    if (shape[d] == 1 && sizes[static_cast<std::size_t>(l)] != 1) continue;  // broadcast
    v.stride[static_cast<std::size_t>(l)] += st[d];
  }
  for (int l : axes)
    if (std::find(v.labels.begin(), v.labels.end(), l) == v.labels.end()) v.labels.push_back(l);
  return v;
}

// One pairwise step: labels of each class and the gathers it needs.
struct Step {
  std::vector<int> batch, m, n, k;
  int64_t B = 1, M = 1, N = 1, K = 1;
  View a, b;           // the operands (b may be the scalar 1: all strides 0)
  int a_src = -1, b_src = -1;  // node input index, or -1: the previous step's result (a) / none (b)
  std::vector<int> result;     // labels of the result [batch, m, n]
};

// Copies src (read with `strides` over `dims`, row-major) into contiguous dst.
void gather(const float* src, float* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  const std::size_t r = dims.size();
  const int64_t total = shape_numel(dims);
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  const int64_t inner = dims[r - 1], is = strides[r - 1];
  for (int64_t t = 0; t < total; t += inner) {
    for (int64_t j = 0; j < inner; ++j) dst[t + j] = src[off + j * is];
    for (std::size_t d = r - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < dims[d]) break;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(const KernelInit& init) {
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < init.num_inputs(); ++i) {
      init.require_float(i);
      shapes.push_back(init.input(i).shape);
    }
    spec_ = parse_einsum(init.node.get_string("equation", ""), shapes, str("cpu engine: ", init.node.describe(), ": "));
    const std::size_t ops = shapes.size();
    View cur = operand_view(spec_.inputs[0], shapes[0], spec_.sizes);
    for (std::size_t i = 0; i < ops; ++i) {
      Step s;
      s.a = cur;
      s.a_src = (i <= 1) ? 0 : -1;
      if (i == 0 && ops > 1) continue;  // the first operand waits for the second
      const bool single = ops == 1;
      if (!single) {
        s.b = operand_view(spec_.inputs[i], shapes[i], spec_.sizes);
        s.b_src = static_cast<int>(i);
      } else {
        s.b.stride.assign(spec_.sizes.size(), 0);
      }
      if (i == 1 || single) s.a = operand_view(spec_.inputs[0], shapes[0], spec_.sizes);
      // Which labels are still needed after this step.
      std::vector<bool> needed(spec_.sizes.size(), false);
      for (int l : spec_.output) needed[static_cast<std::size_t>(l)] = true;
      for (std::size_t j = i + 1; j < ops; ++j)
        for (int l : spec_.inputs[j]) needed[static_cast<std::size_t>(l)] = true;
      std::vector<int> all = s.a.labels;
      for (int l : s.b.labels)
        if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
      for (int l : all) {
        const bool in_a = std::count(s.a.labels.begin(), s.a.labels.end(), l) > 0;
        const bool in_b = std::count(s.b.labels.begin(), s.b.labels.end(), l) > 0;
        const int64_t size = spec_.sizes[static_cast<std::size_t>(l)];
        if (!needed[static_cast<std::size_t>(l)]) { s.k.push_back(l); s.K *= size; }
        else if (in_a && in_b) { s.batch.push_back(l); s.B *= size; }
        else if (in_a) { s.m.push_back(l); s.M *= size; }
        else { s.n.push_back(l); s.N *= size; }
      }
      s.result = s.batch;
      s.result.insert(s.result.end(), s.m.begin(), s.m.end());
      s.result.insert(s.result.end(), s.n.begin(), s.n.end());
      // The result is contiguous in [batch, m, n] label order.
      View next;
      next.labels = s.result;
      next.stride.assign(spec_.sizes.size(), 0);
      int64_t acc = 1;
      for (std::size_t d = s.result.size(); d-- > 0;) {
        next.stride[static_cast<std::size_t>(s.result[d])] = acc;
        acc *= spec_.sizes[static_cast<std::size_t>(s.result[d])];
      }
      steps_.push_back(std::move(s));
      cur = next;
    }
    // The output: the last result read in the output's label order.
    for (int l : spec_.output) {
      out_dims_.push_back(spec_.sizes[static_cast<std::size_t>(l)]);
      out_strides_.push_back(cur.stride[static_cast<std::size_t>(l)]);
    }
    if (shape_numel(init.output(0).shape) != shape_numel(out_dims_)) init.fail("output has the wrong size");
  }

  void run(const KernelArgs& a) override {
    std::vector<float> prev, A, B, C;
    const float one = 1.f;
    for (const Step& s : steps_) {
      const float* asrc = s.a_src >= 0 ? static_cast<const float*>(a.in[s.a_src]) : prev.data();
      const float* bsrc = s.b_src >= 0 ? static_cast<const float*>(a.in[s.b_src]) : &one;
      A.resize(static_cast<std::size_t>(s.B * s.M * s.K));
      B.resize(static_cast<std::size_t>(s.B * s.K * s.N));
      gather_as(asrc, A.data(), s.a, {&s.batch, &s.m, &s.k});
      gather_as(bsrc, B.data(), s.b, {&s.batch, &s.k, &s.n});
      C.assign(static_cast<std::size_t>(s.B * s.M * s.N), 0.f);
      const int64_t M = s.M, N = s.N, K = s.K;
      a.pool.parallel_for(s.B, [&](int64_t bi, int) {
        sgemm(false, false, M, N, K, 1.f, A.data() + bi * M * K, K, B.data() + bi * K * N, N, 0.f, C.data() + bi * M * N, N);
      });
      prev.swap(C);
    }
    gather(prev.data(), static_cast<float*>(a.out[0]), out_dims_, out_strides_);
  }

 private:
  void gather_as(const float* src, float* dst, const View& v, std::initializer_list<const std::vector<int>*> groups) const {
    std::vector<int64_t> dims, strides;
    for (const auto* g : groups)
      for (int l : *g) {
        dims.push_back(spec_.sizes[static_cast<std::size_t>(l)]);
        strides.push_back(v.stride[static_cast<std::size_t>(l)]);
      }
    gather(src, dst, dims, strides);
  }

  EinsumSpec spec_;
  std::vector<Step> steps_;
  std::vector<int64_t> out_dims_, out_strides_;
};

}  // namespace

void add_einsum_kernels(KernelTable& t) {
  t["Einsum"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<EinsumKernel>(i); };
}

}  // namespace sluice::cpu
