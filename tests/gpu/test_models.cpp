#include "test_models.h"

namespace sluice::gputest {
namespace {

// y = act(conv(x) + b [+ z]); pads keep the size when stride is 1.
std::string fused_conv(GraphBuilder& b, const std::string& x, int64_t cin, int64_t cout, int64_t k, int64_t stride,
                       int64_t dilation, const Shape& out, const std::string& residual, bool relu, uint32_t seed) {
  const std::string name = "c" + std::to_string(b.g.nodes.size());
  // Kaiming-like scale keeps activations in range through the chain.
  const float s = 1.5f / std::sqrt(static_cast<float>(cin * k * k));
  b.random_f(name + ".w", {cout, cin, k, k}, seed, -s, s);
  b.random_f(name + ".b", {cout}, seed + 1, -0.1f, 0.1f);
  std::vector<std::string> ins = {x, name + ".w", name + ".b"};
  if (!residual.empty()) ins.push_back(residual);
  Node& n = b.node("FusedConv", ins, {f32(name, out)}, "sluice");
  const int64_t p = dilation * (k - 1) / 2;
  set_ints(n, "strides", {stride, stride});
  set_ints(n, "pads", {p, p, p, p});
  set_ints(n, "dilations", {dilation, dilation});
  set_ints(n, "kernel_shape", {k, k});
  if (relu) set_string(n, "activation", "Relu");
  return name;
}

}  // namespace

Graph resnet_like(int64_t batch, int64_t size) {
  GraphBuilder b({batch, 3, size, size}, DType::U8);
  Node& nz = b.node("Normalize", {"x"}, {f32("norm", {batch, 3, size, size})}, "sluice");
  set_float(nz, "scale", 1.f / 255.f);
  set_floats(nz, "mean", {0.485f, 0.456f, 0.406f});
  set_floats(nz, "std", {0.229f, 0.224f, 0.225f});
  const int64_t s1 = size / 2, s2 = size / 4;
  std::string x = fused_conv(b, "norm", 3, 16, 7, 2, 1, {batch, 16, s1, s1}, "", true, 100);
  Node& mp = b.node("MaxPool", {x}, {f32("pool", {batch, 16, s2, s2})});
  set_ints(mp, "kernel_shape", {3, 3});
  set_ints(mp, "strides", {2, 2});
  set_ints(mp, "pads", {1, 1, 1, 1});
  x = "pool";
  int64_t cin = 16;
  uint32_t seed = 200;
  for (int block = 0; block < 2; ++block) {
    const Shape mid = {batch, 8, s2, s2}, out = {batch, 32, s2, s2};
    const std::string shortcut = block == 0 ? fused_conv(b, x, cin, 32, 1, 1, 1, out, "", false, seed + 50) : x;
    std::string h = fused_conv(b, x, cin, 8, 1, 1, 1, mid, "", true, seed);
    h = fused_conv(b, h, 8, 8, 3, 1, 1, mid, "", true, seed + 10);
    x = fused_conv(b, h, 8, 32, 1, 1, 1, out, shortcut, true, seed + 20);
    cin = 32;
    seed += 100;
  }
  b.node("GlobalAveragePool", {x}, {f32("gap", {batch, 32, 1, 1})});
  Node& fl = b.node("Flatten", {"gap"}, {f32("flat", {batch, 32})});
  set_int(fl, "axis", 1);
  b.random_f("fc.w", {10, 32}, 900, -0.3f, 0.3f).random_f("fc.b", {10}, 901);
  Node& fc = b.node("Gemm", {"flat", "fc.w", "fc.b"}, {f32("logits", {batch, 10})});
  set_int(fc, "transB", 1);
  b.output("logits");
  return b.g;
}

Graph deeplab_like(int64_t batch, int64_t size, bool argmax) {
  GraphBuilder b({batch, 3, size, size});
  const int64_t s = size / 4;
  std::string x = fused_conv(b, "x", 3, 16, 3, 2, 1, {batch, 16, size / 2, size / 2}, "", true, 300);
  x = fused_conv(b, x, 16, 24, 3, 2, 1, {batch, 24, s, s}, "", true, 310);
  const std::string a = fused_conv(b, x, 24, 8, 1, 1, 1, {batch, 8, s, s}, "", true, 320);
  const std::string d2 = fused_conv(b, x, 24, 8, 3, 1, 2, {batch, 8, s, s}, "", true, 330);
  const std::string d3 = fused_conv(b, x, 24, 8, 3, 1, 3, {batch, 8, s, s}, "", true, 340);
  Node& cat = b.node("Concat", {a, d2, d3}, {f32("aspp", {batch, 24, s, s})});
  set_int(cat, "axis", 1);
  const std::string cls = fused_conv(b, "aspp", 24, 5, 1, 1, 1, {batch, 5, s, s}, "", false, 350);
  b.constant_i("sizes", {4}, {batch, 5, size, size});
  Node& up = b.node("Resize", {cls, "", "", "sizes"}, {f32("logits", {batch, 5, size, size})});
  set_string(up, "mode", "linear");
  set_string(up, "coordinate_transformation_mode", "half_pixel");
  if (!argmax) {
    b.output("logits");
    return b.g;
  }
  Node& am = b.node("ArgMaxCast", {"logits"}, {typed("argmax", DType::U8, {batch, size, size})}, "sluice");
  set_int(am, "axis", 1);
  set_int(am, "to", dtype_to_onnx(DType::U8));
  b.output("argmax");
  return b.g;
}

}  // namespace sluice::gputest
