#pragma once
// Einsum equations ("bhqd,bhkd->bhqk", "...ij,...jk->...ik"): parsed once into one label per axis of
// every operand and of the output, with the ellipsis expanded, so shape inference, the batch-axis
// trace and the engines read the same contraction.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace sluice {

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // label ids per axis of each operand
  std::vector<int> output;               // label ids per output axis
  std::vector<int64_t> sizes;            // size of each label (the broadcast size for ellipsis labels)
  int labels = 0;
};

// Throws InputError (prefixed with `where`) for a malformed equation or operands that disagree on a
// label's size.  Ellipsis dimensions broadcast like numpy (size 1 against n).
EinsumSpec parse_einsum(const std::string& equation, const std::vector<Shape>& shapes, const std::string& where);

}  // namespace sluice
