#pragma once
// Does every output keep the batch on axis 0, one row per sample?  The writer stores output row i
// as sample i's result, so a model that reduces over the batch (ReduceMean over axis 0), moves it
// (Transpose), or mixes samples along it (Softmax over axis 0, Concat or Gather along it) would
// store garbage, or make the writer read past its buffer.  Shapes alone cannot tell (a Transpose
// of [B, B] keeps the shape), so this follows the batch axis from the input through every node of
// a prepared graph (static shapes, folded constants).
#include "model/graph.h"

namespace sluice {

// Throws InputError naming the output and the first node that moved, dropped or mixed the batch
// axis.  `batch` is the batch size the graph was prepared for.
void check_batch_axis(const Graph& g, int64_t batch);

}  // namespace sluice
