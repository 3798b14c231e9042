#include "engine/engine.h"

#include "core/error.h"

namespace sluice {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

Precision precision_from_name(const std::string& n) {
  if (n == "fp32") return Precision::FP32;
  if (n == "tf32") return Precision::TF32;
  if (n == "fp16") return Precision::FP16;
  if (n == "bf16") return Precision::BF16;
  throw UsageError(str("unknown precision '", n, "' (expected fp32, tf32, fp16 or bf16)"));
}

const char* autotune_name(Autotune a) {
  switch (a) {
    case Autotune::Quick: return "quick";
    case Autotune::Full: return "full";
    case Autotune::Off: return "off";
  }
  return "?";
}

Autotune autotune_from_name(const std::string& n) {
  if (n == "quick") return Autotune::Quick;
  if (n == "full") return Autotune::Full;
  if (n == "off") return Autotune::Off;
  throw UsageError(str("unknown autotune mode '", n, "' (expected quick, full or off)"));
}

EngineProfile Engine::profile(const ProfileOptions&) {
  throw UsageError(str("engine '", describe(), "' cannot be profiled"));
}

std::unique_ptr<Engine> create_engine(const std::string& backend, const Graph& graph, const EngineOptions& options) {
  if (backend == "cpu") return create_cpu_engine(graph, options);
#ifdef SLUICE_HAVE_CUDA
  if (backend == "cuda") return create_cuda_engine(graph, options);
#endif
  throw UsageError(str("backend '", backend, "' is not available in this build"));
}

}  // namespace sluice
