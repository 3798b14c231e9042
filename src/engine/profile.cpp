// Operation counts of graph nodes, for the profile's achieved-rate columns.  Only the products
// and convolutions have counts that matter for a roofline; the rest are nominal (about one per
// element) so that a memory-bound step never looks compute-bound.
#include "engine/profile.h"

#include <set>

namespace sluice {
namespace {

double numel(const Shape& s) { return s.empty() ? 0.0 : static_cast<double>(shape_numel(s)); }

const Shape& at(const std::vector<Shape>& v, std::size_t i) {
  static const Shape none;
  return i < v.size() ? v[i] : none;
}

double prod(const Shape& s, std::size_t from) {
  double p = 1;
  for (std::size_t d = from; d < s.size(); ++d) p *= static_cast<double>(s[d]);
  return p;
}

}  // namespace

double node_flops(const Node& n, const std::vector<Shape>& in, const std::vector<Shape>& out) {
  const Shape& x = at(in, 0);
  const Shape& y = at(out, 0);
  const std::string& op = n.op;
  if (op == "Conv" || op == "FusedConv") {
    // Each output element is a dot product over (C / group) * kernel taps.
    const Shape& w = at(in, 1);
    if (w.size() < 2) return 0;
    return 2.0 * numel(y) * prod(w, 1);
  }
  if (op == "ConvTranspose") {
    // Each input element scatters into (C_out / group) * kernel outputs.
    const Shape& w = at(in, 1);
    if (w.size() < 2) return 0;
    return 2.0 * numel(x) * prod(w, 1);
  }
  if (op == "Gemm") {
    if (x.size() != 2) return 0;
    const double k = n.get_int("transA", 0) != 0 ? static_cast<double>(x[0]) : static_cast<double>(x[1]);
    return 2.0 * numel(y) * k;
  }
  if (op == "MatMul") {
    if (x.empty()) return 0;
    return 2.0 * numel(y) * static_cast<double>(x.back());
  }
  if (op == "Attention") {
    // Two products: q k^T (2·S·S_kv·D per matrix) and p v (2·S·S_kv·Dv); the softmax is noise.
    if (n.get_string("layout", "") == "strided") {   // q, k, v hold views: the sizes say it
      const std::vector<int64_t> sz = n.get_ints("sizes");
      if (sz.size() != 4 || x.empty()) return 0;
      const double mats = static_cast<double>(x[0]) * static_cast<double>(n.get_int("heads", 1));
      return 2.0 * mats * static_cast<double>(sz[0]) * static_cast<double>(sz[1]) * static_cast<double>(sz[2] + sz[3]);
    }
    const Shape& v = at(in, 2);
    if (v.size() < 2) return 0;
    const double s_kv = static_cast<double>(v[v.size() - 2]);
    return 2.0 * (numel(x) + numel(y)) * s_kv;
  }
  if (op == "MaxPool" || op == "AveragePool") {
    double window = 1;
    for (int64_t k : n.get_ints("kernel_shape")) window *= static_cast<double>(k);
    return numel(y) * window;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op.rfind("Reduce", 0) == 0) return numel(x);
  if (op == "Resize" || op == "Upsample") {
    const std::string mode = n.get_string("mode", "nearest");
    if (mode == "nearest") return 0;
    // Two multiply-adds per tap of each interpolated dim (bilinear over 2 dims: 4 taps).
    int dims = 0;
    for (std::size_t d = 0; d < x.size() && d < y.size(); ++d) dims += x[d] != y[d];
    const double taps = mode == "cubic" ? 4.0 : 2.0;
    double t = 1;
    for (int d = 0; d < dims; ++d) t *= taps;
    return 2.0 * numel(y) * t;
  }
  if (op == "Softmax" || op == "LogSoftmax") return 3.0 * numel(y);   // max, exp-sum, scale
  if (op == "ArgMax" || op == "ArgMin" || op == "ArgMaxCast" || op == "TopK") return numel(x);
  if (op == "BatchNormalization" || op == "Normalize" || op == "LayerNormalization") return 2.0 * numel(y);
  static const std::set<std::string> moves = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                                              "Transpose", "Concat", "Split", "Slice", "Gather", "Pad", "Expand",
                                              "Tile", "Cast", "Shape", "Constant"};
  if (moves.count(op)) return 0;
  return numel(y);   // elementwise arithmetic and activations
}

}  // namespace sluice
