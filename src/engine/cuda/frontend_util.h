#pragma once
// What the engine's cuDNN graphs (conv_graph.cpp, attention_graph.cpp) build alike through the
// header-only cudnn-frontend: the element type of their ends, a graph whose intermediates and
// compute are float, a tensor with explicit strides and the steps from a described graph to
// execution plans.  Included only where CMake puts the frontend on the include path
// (SLUICE_HAVE_CUDNN_FRONTEND).
#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace sluice::cuda::frontend {

namespace fe = cudnn_frontend;

// The frontend's name of the engine's storage type t (fp16, bf16; float otherwise).
inline fe::DataType_t data_type(DType t) {
  switch (t) {
    case DType::F16: return fe::DataType_t::HALF;
    case DType::BF16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::FLOAT;
  }
}

// An empty graph whose ends are of type t and whose intermediates and arithmetic are float.
inline std::shared_ptr<fe::graph::Graph> float_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(data_type(t)).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// A graph input with the given name, uid (its key in the variant pack at execution), dims and
// strides (in elements).
inline std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                           const std::vector<int64_t>& dims,
                                                           const std::vector<int64_t>& strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

// From a described graph to built execution plans: validation, the operation graph, plans from
// heuristics modes A and FALLBACK (without those that are not deterministic when asked), the
// support check and the build of the plans `policy` picks.  False with *why = "stage: message"
// when a step fails.
inline bool build_graph(fe::graph::Graph& g, cudnnHandle_t h, std::string* why, bool deterministic = false,
                        fe::BuildPlanPolicy_t policy = fe::BuildPlanPolicy_t::HEURISTICS_CHOICE) {
  auto failed = [&](const char* stage, fe::error_t e) {
    *why = str(stage, ": ", e.get_message());
    return false;
  };
  if (auto e = g.validate(); e.is_bad()) return failed("validate", e);
  if (auto e = g.build_operation_graph(h); e.is_bad()) return failed("operation graph", e);
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return failed("heuristics", e);
  if (deterministic) g.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  if (auto e = g.check_support(h); e.is_bad()) return failed("support", e);
  if (auto e = g.build_plans(h, policy); e.is_bad()) return failed("plans", e);
  return true;
}

}  // namespace sluice::cuda::frontend
