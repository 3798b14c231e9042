// sluice.Attention (model/graph.h): softmax(scale * q k^T + bias) v, one block of query rows of one
// score matrix at a time (packed operands, or the strided views of layout "strided"), so the [S, S_kv] scores never exist whole.  Blocks have a fixed size, so a
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
    const std::string layout = init.node.get_string("layout", "bhsd");
    if (layout == "strided") {
      // Views of [N, ...] tensors (model/graph.h): matrix n * H + h of an operand starts at
      // n * sample + offset + h * head stride, its rows `row stride` apart.
      heads_ = init.node.get_int("heads", 0);
      const std::vector<int64_t> sz = init.node.get_ints("sizes");
      if (heads_ < 1 || sz.size() != 4 || q.empty()) init.fail("strided attention needs heads and sizes [S, S_kv, D, Dv]");
      s_ = sz[0];
      skv_ = sz[1];
      d_ = sz[2];
      dv_ = sz[3];
      n_ = q[0];
      const Shape* shapes[4] = {&q, &k, &v, &init.output(0).shape};
      const char* keys[4] = {"q_view", "k_view", "v_view", "y_view"};
      for (int i = 0; i < 4; ++i) {
        const std::vector<int64_t> w = init.node.get_ints(keys[i]);
        if (w.size() != 3 || shapes[i]->empty() || (*shapes[i])[0] != n_ || n_ < 1) init.fail("bad ", keys[i]);
        op_[i] = {shape_numel(*shapes[i]) / n_, w[0], w[1], w[2]};
      }
    } else {
      const std::size_t r = q.size();
      if (r < 3 || k.size() != r || v.size() != r) init.fail("q, k and v must have one rank of 3 or more");
      kt_ = layout == "bhds";
      s_ = q[r - 2];
      d_ = q[r - 1];
      skv_ = v[r - 2];
      dv_ = v[r - 1];
      if ((kt_ ? k[r - 2] : k[r - 1]) != d_ || (kt_ ? k[r - 1] : k[r - 2]) != skv_)
        init.fail("k ", shape_str(k), " does not fit q ", shape_str(q), " and v ", shape_str(v));
      heads_ = 1;
      n_ = shape_numel(q) / std::max<int64_t>(1, s_ * d_);
      // Packed matrices, one after the other.
      op_[0] = {s_ * d_, 0, 0, d_};
      op_[1] = {skv_ * d_, 0, 0, kt_ ? skv_ : d_};
      op_[2] = {skv_ * dv_, 0, 0, dv_};
      op_[3] = {s_ * dv_, 0, 0, dv_};
      if (shape_numel(init.output(0).shape) != n_ * s_ * dv_) init.fail("output ", shape_str(init.output(0).shape), " has the wrong size");
    }
    bh_ = n_ * heads_;
    if (init.has_input(3)) {
      const int64_t n = shape_numel(init.input(3).shape);
      group_ = init.node.get_int("bias_group", 1);
      bias_rows_ = init.node.get_int("bias_rows", s_) == 1 ? 1 : s_;
      if (bias_rows_ * skv_ == 0 || n % (bias_rows_ * skv_) != 0 || n == 0 || group_ < 1 || bh_ % group_ != 0 ||
          (bh_ / group_) % (n / (bias_rows_ * skv_)) != 0)
        init.fail("bias ", shape_str(init.input(3).shape), " does not repeat along the score matrices");
      period_ = n / (bias_rows_ * skv_);
    }
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
      const float* q = Q + op_[0].at(m, heads_) + r0 * op_[0].row;
      const float* k = K + op_[1].at(m, heads_);
      if (skv_ > 0) {
        if (d_ > 0) sgemm(false, !kt_, rows, skv_, d_, scale_, q, op_[0].row, k, op_[1].row, 0.f, p, skv_);
        else std::fill(p, p + rows * skv_, 0.f);
      }
      for (int64_t i = 0; i < rows; ++i) {
        float* row = p + i * skv_;
        if (B) {
          const float* b = B + (((m / group_) % period_) * bias_rows_ + (bias_rows_ == 1 ? 0 : r0 + i)) * skv_;
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
      float* y = Y + op_[3].at(m, heads_) + r0 * op_[3].row;
      if (skv_ > 0) {
        sgemm(false, false, rows, dv_, skv_, 1.f, p, skv_, V + op_[2].at(m, heads_), op_[2].row, 0.f, y, op_[3].row);
      } else {
        for (int64_t i = 0; i < rows; ++i) std::fill(y + i * op_[3].row, y + i * op_[3].row + dv_, 0.f);
      }
    });
  }

 private:
  // Where matrix m = n * heads + h of an operand (q, k, v, y) lies: sample block, offset in it,
  // head stride, row stride (k's column stride when given transposed).
  struct Operand {
    int64_t sample = 0, offset = 0, head = 0, row = 0;
    int64_t at(int64_t m, int64_t heads) const { return (m / heads) * sample + offset + (m % heads) * head; }
  };
  bool kt_ = false, zero_rows_ = false;
  int64_t s_ = 0, d_ = 0, skv_ = 0, dv_ = 0, bh_ = 0, period_ = 0, blocks_ = 0, n_ = 0, heads_ = 1;
  int64_t group_ = 1;   // score matrix m adds bias matrix (m / group_) mod period_
  int64_t bias_rows_ = 0;   // rows of a bias matrix: S, or 1 for every query
  Operand op_[4];
  float scale_ = 1.f;
};

}  // namespace

void add_attention_kernels(KernelTable& t) {
  t["sluice.Attention"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(i); };
}

}  // namespace sluice::cpu
