// PLACEHOLDER: replaced by the graph passes (issue 3).
#include "model/prepare.h"
#include "core/error.h"
namespace sluice {
Graph prepare_graph(Graph, const PrepareOptions&) { SLUICE_THROW("prepare_graph: not built yet"); }
}  // namespace sluice
