// NCCL communicator and the weight broadcast (nccl_comm.h).
#include "cluster/nccl_comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "core/cuda/cuda_raii.h"
#include "core/log.h"
#include "core/timer.h"

namespace sluice {

using namespace weights_detail;

NcclComm::NcclComm(MPI_Comm comm, int device) : device_(device) {
  MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  MPI_CHECK(MPI_Comm_size(comm, &size_));
  ncclUniqueId id{};
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  CUDA_CHECK(cudaSetDevice(device));
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclComm::~NcclComm() {
  if (comm_) (void)ncclCommDestroy(comm_);
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_), device_(o.device_) {}

bool ranks_share_gpu(MPI_Comm comm, int device) {
  char host[128] = {0}, bus[32] = {0};
  gethostname(host, sizeof host - 1);
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  std::string me = str(host, "|", bus);
  me.resize(160, '\0');
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::string all(160 * static_cast<std::size_t>(size), '\0');
  MPI_CHECK(MPI_Allgather(me.data(), 160, MPI_CHAR, &all[0], 160, MPI_CHAR, comm));
  std::set<std::string> seen;
  for (int r = 0; r < size; ++r)
    if (!seen.insert(all.substr(static_cast<std::size_t>(r) * 160, 160)).second) return true;
  return false;
}

WeightBroadcast broadcast_weights_nccl(Graph& g, NcclComm& nccl, MPI_Comm comm, int root) {
  const auto t0 = Clock::now();
  Manifest m;
  std::vector<Tensor*> tensors = agree_on_constants(g, comm, root, &m);
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  CUDA_CHECK(cudaSetDevice(nccl.device()));
  // One pinned staging buffer and one device buffer, reused chunk by chunk.
  const std::size_t chunk = std::min(kChunk, std::max<std::size_t>(m.total, 1));
  cuda::PinnedBuffer host(chunk);
  cuda::DeviceBuffer dev(chunk);
  cuda::Stream stream = cuda::make_stream();
  auto* hb = static_cast<uint8_t*>(host.get());
  for (std::size_t at = 0; at < m.total; at += chunk) {
    const std::size_t len = std::min(chunk, m.total - at);
    if (rank == root) {
      gather_range(tensors, at, len, hb, true);
      CUDA_CHECK(cudaMemcpyAsync(dev.get(), hb, len, cudaMemcpyHostToDevice, stream));
    }
    NCCL_CHECK(ncclBroadcast(dev.get(), dev.get(), len, ncclUint8, root, nccl.get(), stream));
    if (rank != root) CUDA_CHECK(cudaMemcpyAsync(hb, dev.get(), len, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (rank != root) gather_range(tensors, at, len, hb, false);
  }
  return WeightBroadcast{"nccl", static_cast<int>(tensors.size()), m.total, seconds_since(t0)};
}

}  // namespace sluice
