#pragma once
// Sharing the weights: rank `root` read the model; every other rank receives each constant tensor
// bit for bit.  GPU to GPU over NCCL when every rank has its own GPU (nccl_comm.h), over MPI when
// ranks share a GPU (NCCL refuses such communicators: "invalid usage") or on the CPU backend.
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "model/graph.h"

namespace sluice {

struct WeightBroadcast {
  std::string transport;   // "nccl" or "mpi"
  int tensors = 0;
  std::size_t bytes = 0;
  double seconds = 0;
};

// Every rank of `comm` ends with root's constants (names, types, shapes and bytes), replacing
// whatever its graph held.  Collective.  NCCL when `device` >= 0, the build has CUDA and no two
// ranks share a GPU; MPI otherwise.  The non-root ranks need not have read the weights.
WeightBroadcast broadcast_weights(Graph& g, MPI_Comm comm, int root, int device);
WeightBroadcast broadcast_weights_mpi(Graph& g, MPI_Comm comm, int root);

namespace weights_detail {
// Chunk of the byte stream moved per collective: bounded staging memory, and MPI counts fit int.
constexpr std::size_t kChunk = 64ull << 20;
struct Manifest {
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  std::size_t total = 0;
};
// Broadcasts the manifest (names, types, shapes) and makes every non-root rank's constants match
// it (allocated, not yet filled).  Returns the tensors in manifest order.
std::vector<Tensor*> agree_on_constants(Graph& g, MPI_Comm comm, int root, Manifest* out);
// Copies bytes [at, at+len) of the concatenation of `tensors` to (to_buf) or from `buf`.
void gather_range(const std::vector<Tensor*>& tensors, std::size_t at, std::size_t len, uint8_t* buf, bool to_buf);
}  // namespace weights_detail

}  // namespace sluice
