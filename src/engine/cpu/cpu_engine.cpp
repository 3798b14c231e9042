// PLACEHOLDER: replaced by the CPU engine (issue 3).
#include "engine/engine.h"
#include "core/error.h"
namespace sluice {
std::unique_ptr<Engine> create_cpu_engine(const Graph&, const EngineOptions&) { SLUICE_THROW("cpu engine: not built yet"); }
}  // namespace sluice
