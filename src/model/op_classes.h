#pragma once
// Classes of ops that the batch-axis passes (model/batch_axis.cpp checks a prepared graph,
// model/batch_adapt.cpp re-specializes a static batch) treat alike, kept in one place so that a new
// op is taught to both at once.
#include <string>

namespace sluice {

// Element by element on input 0; any further inputs are parameters (Clip's bounds).
bool is_unary_elementwise(const std::string& op);
// Element by element over all inputs, numpy broadcasting (Where's condition included).
bool is_broadcasting_elementwise(const std::string& op);
// Works on each sample of an [N, C, ...] tensor on its own: the batch must be axis 0 of input 0 and
// the other inputs are weights (Conv, pools, Group/InstanceNormalization, Col2Im).
bool is_per_sample_op(const std::string& op);

}  // namespace sluice
