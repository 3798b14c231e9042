#include "model/op_classes.h"

#include <unordered_set>

namespace sluice {

bool is_unary_elementwise(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Identity", "Cast", "Clip", "Gelu", "Erf", "Tanh",
      "Sign", "Cos", "Sin", "Softplus", "Elu", "Round", "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Floor",
      "Ceil", "IsNaN", "IsInf", "Not", "Selu", "Mish", "Softsign", "Tan", "Atan"};
  return ops.count(op) != 0;
}

bool is_broadcasting_elementwise(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Equal", "Less", "Greater", "LessOrEqual",
      "GreaterOrEqual", "And", "Or", "Xor", "Where"};
  return ops.count(op) != 0;
}

bool is_per_sample_op(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      "Conv", "FusedConv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
      "GroupNormalization", "InstanceNormalization", "Col2Im", "DepthToSpace", "SpaceToDepth"};
  return ops.count(op) != 0;
}

bool is_reduction(const std::string& op) { return op.rfind("Reduce", 0) == 0; }

}  // namespace sluice
