// The CPU engine's op registry (op key to kernel factory, filled by each kernel file's add_*_kernels;
// `sluice check` reads its keys, tests/unit/test_op_registry.cpp holds them to the model layer's op
// table), and the helpers of KernelInit.
#include <algorithm>

#include "engine/cpu/kernel.h"
#include "model/op_arity.h"

namespace sluice::cpu {

const ValueInfo& KernelInit::input(std::size_t i) const {
  if (!has_input(i)) fail("input ", i, " is missing");
  return *in[i];
}

const ValueInfo& KernelInit::output(std::size_t i) const {
  if (i >= out.size() || out[i] == nullptr) fail("output ", i, " is missing");
  return *out[i];
}

const Tensor& KernelInit::const_input(std::size_t i, const char* what) const {
  if (!has_input(i)) fail(what, " (input ", i, ") is missing");
  if (i >= cin.size() || cin[i] == nullptr)
    fail(what, " (input '", node.inputs[i], "') must be a constant once the input shape is fixed");
  return *cin[i];
}

std::vector<int64_t> KernelInit::const_ints(std::size_t i, const char* what) const {
  const Tensor& t = const_input(i, what);
  if (t.dtype != DType::I64 && t.dtype != DType::I32) fail(what, " must be int64 or int32, not ", dtype_name(t.dtype));
  return t.as_int64();
}

void KernelInit::require_dtype(const ValueInfo& v, DType t) const {
  if (v.dtype != t)
    fail("tensor '", v.name, "' is ", dtype_name(v.dtype), "; the cpu engine implements this op for ", dtype_name(t),
         " only");
}

int64_t KernelInit::axis(int64_t a, int64_t rank) const {
  if (a < -rank || a >= rank) fail("axis ", a, " is out of range for rank ", rank);
  return a < 0 ? a + rank : a;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

namespace {
const KernelTable& table() {
  static const KernelTable t = [] {
    KernelTable k;
    add_conv_kernels(k);
    add_conv_transpose_kernels(k);
    add_pool_kernels(k);
    add_elementwise_kernels(k);
    add_binary_kernels(k);
    add_matmul_kernels(k);
    add_resize_kernels(k);
    add_shape_kernels(k);
    add_data_kernels(k);
    add_reduce_kernels(k);
    add_logic_kernels(k);
    add_norm_kernels(k);
    add_index_kernels(k);
    add_detect_kernels(k);
    add_sample_kernels(k);
    add_einsum_kernels(k);
    add_attention_kernels(k);
    return k;
  }();
  return t;
}

}  // namespace

std::unique_ptr<Kernel> make_kernel(const KernelInit& init) {
  const auto it = table().find(op_key(init.node.domain, init.node.op));
  if (it == table().end())
    throw InputError(str("cpu engine: ", init.node.describe(), ": op ",
                         init.node.domain.empty() ? "" : init.node.domain + ".", init.node.op,
                         " is not implemented"));
  return it->second(init);
}

std::vector<std::string> cpu_kernel_ops() {
  std::vector<std::string> ops;
  for (const auto& kv : table()) ops.push_back(kv.first);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace sluice::cpu
