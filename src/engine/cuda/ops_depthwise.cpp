// Depthwise convolutions (group == input channels == output channels) of channels-last tensors on
// the engine's own kernel (kernels_depthwise.cu), with the FusedConv epilogue (bias, residual,
// activation) in the same pass.  Through cuDNN they ran NCHW, between two transposes.
#include <cstring>

#include "engine/cuda/engine_internal.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_depthwise.h"

namespace sluice::cuda {

bool is_depthwise(const Builder& b, const Node& n) {
  if (!((n.op == "Conv" && n.domain.empty()) || (n.op == "FusedConv" && n.domain == "sluice"))) return false;
  const ValueInfo* x = b.graph.value(n.input(0));
  const Tensor* w = b.const_input(n, 1);
  const int64_t group = n.get_int("group", 1);
  return x && x->shape.size() == 4 && w && w->shape.size() == 4 && group > 1 && x->shape[1] == group &&
         w->shape[0] == group && w->shape[1] == 1;
}

bool lower_depthwise(Builder& b, const Node& n) {
  if (!b.nhwc_enabled() || !fast_kernels() || !is_depthwise(b, n)) return false;
  const int x = b.input_as(n, 0, true);
  const Tensor w = b.to_compute(*b.const_input(n, 1));   // [C, 1, kh, kw]
  const int y = b.output(n, 0, true);
  const Shape xs = b.slot(x).shape, ys = b.slot(y).shape;
  if (b.slot(x).dtype != b.compute) b.fail(n, "input is ", dtype_name(b.slot(x).dtype), ", not ", dtype_name(b.compute));
  const int64_t c = xs[1], kh = w.shape[2], kw = w.shape[3];
  if (ys[1] != c) b.fail(n, "output ", shape_str(ys), " does not have the input's ", c, " channels");
  const ConvGeom g = conv_geometry(b, n, xs, w.shape, ys, false);

  // The filter as [kh, kw, C]: the K channels of one tap are one 16-byte load.
  Tensor hwc(w.dtype, {kh, kw, c});
  const std::size_t es = dtype_size(w.dtype);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < kh * kw; ++i)
      std::memcpy(hwc.bytes.data() + static_cast<std::size_t>(i * c + ch) * es,
                  w.bytes.data() + static_cast<std::size_t>(ch * kh * kw + i) * es, es);
  const int wt = b.constant(n.input(1) + " (hwc)", hwc);
  const int bias = b.has_input(n, 2) ? b.input(n, 2) : -1;
  const bool fused = n.op == "FusedConv";
  const int z = fused && b.has_input(n, 3) ? b.input_as(n, 3, true) : -1;
  if (bias >= 0 && b.slot(bias).dtype != b.compute) b.fail(n, "bias is not ", dtype_name(b.compute));
  if (z >= 0 && (b.slot(z).dtype != b.compute || b.slot(z).shape != ys)) b.fail(n, "residual does not match the output");
  const ActParams act = fused ? fused_activation(b, n) : ActParams{};

  DepthwiseShape ds;
  ds.n = xs[0];
  ds.c = c;
  ds.h = xs[2];
  ds.w = xs[3];
  ds.oh = ys[2];
  ds.ow = ys[3];
  ds.kh = kh;
  ds.kw = kw;
  ds.sh = g.stride[0];
  ds.sw = g.stride[1];
  ds.dh = g.dilation[0];
  ds.dw = g.dilation[1];
  ds.ph = g.pad_begin[0];
  ds.pw = g.pad_begin[1];
  std::vector<int> uses = {x, wt, y};
  if (bias >= 0) uses.push_back(bias);
  if (z >= 0) uses.push_back(z);
  const DType t = b.compute;
  const DepthwiseChoice choice = depthwise_choice_from_env();   // the switches, read at each preparation
  b.add(n.name, uses, [=](Context&, const Bindings& bd, cudaStream_t s) {
    depthwise_conv(t, bd.at(x), bd.at(wt), bias >= 0 ? bd.at(bias) : nullptr, z >= 0 ? bd.at(z) : nullptr, bd.at(y), ds,
                   act, choice, s);
  }, "Depthwise");
  return true;
}

}  // namespace sluice::cuda
