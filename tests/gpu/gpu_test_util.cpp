#include "gpu_test_util.h"

#include <algorithm>
#include <cstdio>

namespace sluice::gputest {

Tensor random_tensor(const ValueInfo& v, uint32_t seed, float lo, float hi) {
  Tensor t(v.dtype, v.shape);
  const auto f = random_values(static_cast<std::size_t>(t.numel()), seed, lo, hi);
  switch (v.dtype) {
    case DType::F32: std::memcpy(t.bytes.data(), f.data(), t.nbytes()); break;
    case DType::U8:
      for (std::size_t i = 0; i < f.size(); ++i) t.bytes[i] = static_cast<uint8_t>(static_cast<int>((f[i] - lo) / (hi - lo) * 256.f) & 255);
      break;
    default: throw Error(str("random_tensor: ", dtype_name(v.dtype), " inputs are not supported"));
  }
  return t;
}

double tolerance(Precision p) {
  switch (p) {
    case Precision::FP32: return 1e-5;
    case Precision::TF32: return 1e-3;
    case Precision::FP16: return 1e-2;
    case Precision::BF16: return 2e-2;
  }
  return 0;
}

double rel_error(const Tensor& got, const Tensor& ref) {
  const auto a = got.as_float(), b = ref.as_float();
  if (a.size() != b.size()) return INFINITY;
  double mx = 0, md = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
      continue;
    }
    mx = std::max(mx, std::fabs(static_cast<double>(b[i])));
    md = std::max(md, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return mx == 0 ? md : md / mx;
}

std::vector<Tensor> run_cpu(const Graph& g, const Tensor& input) {
  EngineOptions o;
  o.threads = 2;
  o.io_sets = 1;
  auto e = create_cpu_engine(g, o);
  return cuda::run_forward(*e, input, 0);
}

std::vector<Tensor> run_cuda(const Graph& g, const Tensor& input, EngineOptions o) {
  auto e = create_cuda_engine(g, o);
  return cuda::run_forward(*e, input, 0);
}

namespace {
bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
}  // namespace

namespace {

void expect_matches(const Graph& g, Precision p, const CompareOptions& c, const HostReference& reference) {
  if (!have_gpu()) {
    if (cpu_check_mode()) {
      // What can be checked without a device: the reference runs, and the graph lowers.
      const Tensor x = random_tensor(g.inputs.at(0), c.seed, c.lo, c.hi);
      EXPECT_NO_THROW(reference(x));
      std::size_t steps = 0;
      EXPECT_NO_THROW({
        cuda::Builder b(g, p);
        b.lower_all();
        steps = b.steps.size();
        if (std::getenv("SLUICE_GPU_TESTS_DUMP"))
          for (const auto& st : b.steps) std::printf("    step: %s\n", st->label().c_str());
      });
      std::printf("[ cpu check] %s: reference ran, %zu cuda steps lowered\n", precision_name(p), steps);
    }
    GTEST_SKIP() << "no CUDA GPU: cudaGetDeviceCount reports none, so this GPU test is skipped";
  }
  const Tensor x = random_tensor(g.inputs.at(0), c.seed, c.lo, c.hi);
  const std::vector<Tensor> ref = reference(x);
  EngineOptions o;
  o.precision = p;
  o.io_sets = 1;
  o.cuda_graphs = false;
  const std::vector<Tensor> got = run_cuda(g, x, o);
  ASSERT_EQ(got.size(), ref.size());
  const double tol = c.tol >= 0 ? c.tol : tolerance(p);
  for (std::size_t k = 0; k < ref.size(); ++k) {
    SCOPED_TRACE(str("output ", k, " '", g.outputs[k].name, "' at ", precision_name(p)));
    ASSERT_EQ(got[k].shape, ref[k].shape);
    ASSERT_EQ(got[k].dtype, ref[k].dtype);
    if (is_float(ref[k].dtype)) {
      const double err = rel_error(got[k], ref[k]);
      EXPECT_LE(err, tol) << "max|diff|/max|ref| = " << err;
    } else {
      const auto a = got[k].as_int64(), b = ref[k].as_int64();
      std::size_t same = 0;
      for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
      if (c.exact_ints) EXPECT_EQ(same, a.size()) << "integer outputs differ in " << a.size() - same << " places";
      else EXPECT_GE(static_cast<double>(same), c.int_agreement * static_cast<double>(a.size()));
    }
  }
}


}  // namespace

void expect_matches_cpu(const Graph& g, Precision p, const CompareOptions& c) {
  expect_matches(g, p, c, [&](const Tensor& x) { return run_cpu(g, x); });
}

void expect_matches_reference(const Graph& g, Precision p, const HostReference& ref, const CompareOptions& c) {
  expect_matches(g, p, c, ref);
}

float round_to(Precision p, float v) {
  switch (p) {
    case Precision::BF16: return bf16_to_f32(f32_to_bf16(v));
    case Precision::FP16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}

std::vector<std::string> step_kinds(const Graph& g, Precision p) {
  cuda::Builder b(g, p);
  b.lower_all();
  std::vector<std::string> kinds;
  for (const auto& s : b.steps) kinds.push_back(s->kind);
  return kinds;
}

std::vector<std::string> step_kinds_with(const Graph& g, Precision p, const char* name, const char* value) {
  ScopedEnv env(name, value);
  return step_kinds(g, p);
}

}  // namespace sluice::gputest
