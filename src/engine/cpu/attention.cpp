// sluice.Attention (model/graph.h): softmax(scale * q k^T + bias) v, one block of query rows of one
// score matrix at a time, so the [S, S_kv] scores never exist whole.  Blocks have a fixed size, so a
// row's result depends neither on the thread count nor on the batch.  The softmax sums in double,
// as the Softmax kernel does.
#include <cmath>
#include <limits>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

constexpr int64_t kRows = 32;   // query rows per task

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const KernelInit& init) {
    for (std::size_t i = 0; i < init.num_inputs(); ++i)
      if (init.has_input(i)) init.require_float(i);
    const Shape &q = init.input(0).shape, &k = init.input(1).shape, &v = init.input(2).shape;
    const std::size_t r = q.size();
    if (r < 3 || k.size() != r || v.size() != r) init.fail("q, k and v must have one rank of 3 or more");
    kt_ = init.node.get_string("layout", "bhsd") == "bhds";
    s_ = q[r - 2];
    d_ = q[r - 1];
    skv_ = v[r - 2];
    dv_ = v[r - 1];
    if ((kt_ ? k[r - 2] : k[r - 1]) != d_ || (kt_ ? k[r - 1] : k[r - 2]) != skv_)
      init.fail("k ", shape_str(k), " does not fit q ", shape_str(q), " and v ", shape_str(v));
    bh_ = shape_numel(q) / std::max<int64_t>(1, s_ * d_);
    if (init.has_input(3)) {
      const int64_t n = shape_numel(init.input(3).shape);
      if (s_ * skv_ == 0 || n % (s_ * skv_) != 0 || n == 0 || bh_ % (n / (s_ * skv_)) != 0)
        init.fail("bias ", shape_str(init.input(3).shape), " does not repeat along the score matrices");
      period_ = n / (s_ * skv_);
    }
    if (shape_numel(init.output(0).shape) != bh_ * s_ * dv_) init.fail("output ", shape_str(init.output(0).shape), " has the wrong size");
    scale_ = init.node.get_float("scale", 1.f);
    zero_rows_ = init.node.get_int("zero_masked_rows", 0) != 0;
    blocks_ = chunk_count(s_, kRows);
  }

  std::size_t scratch_bytes(int threads) const override {
    return static_cast<std::size_t>(threads) * align64(static_cast<std::size_t>(kRows * skv_) * sizeof(float));
  }

  void run(const KernelArgs& a) override {
    const float* Q = static_cast<const float*>(a.in[0]);
    const float* K = static_cast<const float*>(a.in[1]);
    const float* V = static_cast<const float*>(a.in[2]);
    const float* B = period_ > 0 ? static_cast<const float*>(a.in[3]) : nullptr;
    float* Y = static_cast<float*>(a.out[0]);
    const std::size_t per_thread = align64(static_cast<std::size_t>(kRows * skv_) * sizeof(float));
    a.pool.parallel_for(bh_ * blocks_, [&](int64_t t, int thread) {
      const int64_t m = t / blocks_, r0 = (t % blocks_) * kRows, rows = std::min(kRows, s_ - r0);
      float* p = reinterpret_cast<float*>(static_cast<char*>(a.scratch) + static_cast<std::size_t>(thread) * per_thread);
      const float* q = Q + (m * s_ + r0) * d_;
      const float* k = K + m * skv_ * d_;
      if (skv_ > 0) {
        if (d_ > 0) sgemm(false, !kt_, rows, skv_, d_, scale_, q, d_, k, kt_ ? skv_ : d_, 0.f, p, skv_);
        else std::fill(p, p + rows * skv_, 0.f);
      }
      for (int64_t i = 0; i < rows; ++i) {
        float* row = p + i * skv_;
        if (B) {
          const float* b = B + ((m % period_) * s_ + r0 + i) * skv_;
          for (int64_t j = 0; j < skv_; ++j) row[j] += b[j];
        }
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < skv_; ++j) mx = std::max(mx, row[j]);
        if (zero_rows_ && mx == -std::numeric_limits<float>::infinity()) {
          std::fill(row, row + skv_, 0.f);
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < skv_; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < skv_; ++j) row[j] *= inv;
      }
      float* y = Y + (m * s_ + r0) * dv_;
      if (skv_ > 0) sgemm(false, false, rows, dv_, skv_, 1.f, p, skv_, V + m * skv_ * dv_, dv_, 0.f, y, dv_);
      else std::fill(y, y + rows * dv_, 0.f);
    });
  }

 private:
  bool kt_ = false, zero_rows_ = false;
  int64_t s_ = 0, d_ = 0, skv_ = 0, dv_ = 0, bh_ = 0, period_ = 0, blocks_ = 0;
  float scale_ = 1.f;
};

}  // namespace

void add_attention_kernels(KernelTable& t) {
  t["sluice.Attention"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(i); };
}

}  // namespace sluice::cpu
