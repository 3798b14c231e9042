#pragma once
// Families of ops that the batch-axis trace (model/batch_trace.cpp, which both the batch-axis check
// and static-batch re-specialization use) treats alike, named in one place.
#include <string>

namespace sluice {

// Element by element on input 0; any further inputs are parameters (Clip's bounds).
bool is_unary_elementwise(const std::string& op);
// Element by element over all inputs, numpy broadcasting (Where's condition included).
bool is_broadcasting_elementwise(const std::string& op);
// Works on each sample of an [N, C, ...] tensor on its own: the batch must be axis 0 of input 0 and
// the other inputs are weights (Conv, pools, Group/InstanceNormalization, Col2Im).
bool is_per_sample_op(const std::string& op);
// ReduceSum, ReduceMean, ReduceMax, ...: over the axes of input 1 (model/canonicalize.h moves them there).
bool is_reduction(const std::string& op);

}  // namespace sluice
