#pragma once
// NCCL for the job's GPU-to-GPU traffic: a communicator made from an MPI communicator, and the
// weight broadcast (rank `root` read the model; every other rank receives each constant tensor
// bit for bit).  NCCL refuses communicators whose ranks share a GPU ("invalid usage"), so the
// broadcast falls back to MPI there.
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "cluster/mpi_context.h"   // MPI_CHECK
#include "cluster/weights.h"
#include "core/error.h"
#include "model/graph.h"

#define NCCL_CHECK(call)                                                                                   \
  do {                                                                                                     \
    const ncclResult_t sluice_nccl_res_ = (call);                                                          \
    if (sluice_nccl_res_ != ncclSuccess)                                                                   \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__,                            \
                                                     ::sluice::str(ncclGetErrorString(sluice_nccl_res_),   \
                                                                   " ", ncclGetLastError(nullptr))));      \
  } while (0)

namespace sluice {

class NcclComm {
 public:
  // Collective over `comm`: the root of `comm` (rank 0) creates the unique id and broadcasts it
  // with MPI; each rank brings the CUDA device it drives.
  NcclComm(MPI_Comm comm, int device);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&&) = delete;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

 private:
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
};

// True when two ranks of `comm` drive the same GPU (same host and PCI bus id).  Collective.
bool ranks_share_gpu(MPI_Comm comm, int device);

// The NCCL transport of broadcast_weights (dist/weights.h), for callers that know it applies.
WeightBroadcast broadcast_weights_nccl(Graph& g, NcclComm& nccl, MPI_Comm comm, int root);

}  // namespace sluice
