// Gemm and MatMul on OpenBLAS.  Rows that may belong to different samples (a 2-D left operand:
// [batch, features]) are multiplied one row at a time, so a sample's result never depends on which
// other samples share its batch.
#include <algorithm>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInit& init) {
    init.require_float(0);
    init.require_float(1);
    const Shape& as = init.input(0).shape;
    const Shape& bs = init.input(1).shape;
    if (as.size() != 2 || bs.size() != 2) init.fail("A and B must be 2-D, got ", shape_str(as), " and ", shape_str(bs));
    ta_ = init.node.get_int("transA", 0) != 0;
    tb_ = init.node.get_int("transB", 0) != 0;
    alpha_ = init.node.get_float("alpha", 1.f);
    beta_ = init.node.get_float("beta", 1.f);
    m_ = ta_ ? as[1] : as[0];
    k_ = ta_ ? as[0] : as[1];
    n_ = tb_ ? bs[0] : bs[1];
    if ((tb_ ? bs[1] : bs[0]) != k_) init.fail("A ", shape_str(as), " and B ", shape_str(bs), " do not multiply");
    if (init.output(0).shape != Shape{m_, n_}) init.fail("output should be [", m_, ",", n_, "]");
    has_c_ = init.has_input(2) && beta_ != 0.f;
    if (init.has_input(2)) {
      init.require_float(2);
      const Shape& cs = init.input(2).shape;
      if (cs.size() > 2) init.fail("C must have rank 0 to 2");
      const int64_t cm = cs.size() == 2 ? cs[0] : 1, cn = cs.empty() ? 1 : cs.back();
      if ((cm != 1 && cm != m_) || (cn != 1 && cn != n_)) init.fail("C ", shape_str(cs), " does not broadcast to [", m_, ",", n_, "]");
      csm_ = cm == 1 ? 0 : cn;
      csn_ = cn == 1 ? 0 : 1;
    }
    tiles_ = choose_gemm_tiles(1, n_, k_);
  }

  void run(const KernelArgs& a) override {
    const float* A = static_cast<const float*>(a.in[0]);
    const float* B = static_cast<const float*>(a.in[1]);
    const float* C = has_c_ ? static_cast<const float*>(a.in[2]) : nullptr;
    float* Y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(m_ * tiles_.nc, [&](int64_t t, int) {
      const int64_t i = t / tiles_.nc, n0 = (t % tiles_.nc) * tiles_.nt, nt = std::min(tiles_.nt, n_ - n0);
      float* y = Y + i * n_ + n0;
      sgemm(ta_, tb_, 1, nt, k_, alpha_, ta_ ? A + i : A + i * k_, ta_ ? m_ : k_, tb_ ? B + n0 * k_ : B + n0,
            tb_ ? k_ : n_, 0.f, y, n_);
      if (C)
        for (int64_t j = 0; j < nt; ++j) y[j] += beta_ * C[i * csm_ + (n0 + j) * csn_];
    });
  }

 private:
  bool ta_ = false, tb_ = false, has_c_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t m_ = 0, n_ = 0, k_ = 0, csm_ = 0, csn_ = 0;
  GemmTiles tiles_;
};

class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelInit& init) {
    init.require_float(0);
    init.require_float(1);
    Shape as = init.input(0).shape, bs = init.input(1).shape;
    if (as.empty() || bs.empty()) init.fail("operands must have rank 1 or more");
    per_row_ = as.size() <= 2;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    m_ = as[as.size() - 2];
    k_ = as.back();
    n_ = bs.back();
    if (bs[bs.size() - 2] != k_) init.fail("shapes ", shape_str(init.input(0).shape), " and ", shape_str(init.input(1).shape), " do not multiply");
    // Broadcast the batch dimensions.
    const std::size_t ra = as.size() - 2, rb = bs.size() - 2, r = std::max(ra, rb);
    Shape batch(r);
    std::vector<int64_t> sa(r, 0), sb(r, 0);
    int64_t acc_a = m_ * k_, acc_b = k_ * n_;
    for (std::size_t i = r; i-- > 0;) {
      const int64_t da = i + ra >= r ? as[i + ra - r] : 1, db = i + rb >= r ? bs[i + rb - r] : 1;
      if (da != db && da != 1 && db != 1) init.fail("batch dimensions do not broadcast");
      batch[i] = std::max(da, db);
      sa[i] = da == 1 ? 0 : acc_a;
      sb[i] = db == 1 ? 0 : acc_b;
      acc_a *= da;
      acc_b *= db;
    }
    batch_ = shape_numel(batch);
    // Offsets of each output matrix's operands (batch is small: a few hundred at most).
    a_off_.resize(static_cast<std::size_t>(batch_));
    b_off_.resize(static_cast<std::size_t>(batch_));
    for (int64_t bi = 0; bi < batch_; ++bi) {
      int64_t rem = bi, oa = 0, ob = 0;
      for (std::size_t i = r; i-- > 0;) {
        const int64_t idx = rem % batch[i];
        rem /= batch[i];
        oa += idx * sa[i];
        ob += idx * sb[i];
      }
      a_off_[bi] = oa;
      b_off_[bi] = ob;
    }
    if (shape_numel(init.output(0).shape) != batch_ * m_ * n_) init.fail("output ", shape_str(init.output(0).shape), " has the wrong size");
    tiles_ = choose_gemm_tiles(per_row_ ? 1 : m_, n_, k_);
    if (per_row_) {
      tiles_.mt = 1;
      tiles_.mc = m_;
    }
  }

  void run(const KernelArgs& a) override {
    const float* A = static_cast<const float*>(a.in[0]);
    const float* B = static_cast<const float*>(a.in[1]);
    float* Y = static_cast<float*>(a.out[0]);
    const int64_t per = tiles_.mc * tiles_.nc;
    a.pool.parallel_for(batch_ * per, [&](int64_t t, int) {
      const int64_t bi = t / per, mi = (t % per) / tiles_.nc, ni = t % tiles_.nc;
      const int64_t m0 = mi * tiles_.mt, n0 = ni * tiles_.nt;
      const int64_t mt = std::min(tiles_.mt, m_ - m0), nt = std::min(tiles_.nt, n_ - n0);
      sgemm(false, false, mt, nt, k_, 1.f, A + a_off_[bi] + m0 * k_, k_, B + b_off_[bi] + n0, n_, 0.f,
            Y + (bi * m_ + m0) * n_ + n0, n_);
    });
  }

 private:
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1;
  bool per_row_ = false;
  std::vector<int64_t> a_off_, b_off_;
  GemmTiles tiles_;
};

}  // namespace

void add_matmul_kernels(KernelTable& t) {
  t["Gemm"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(i); };
  t["MatMul"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(i); };
}

}  // namespace sluice::cpu
