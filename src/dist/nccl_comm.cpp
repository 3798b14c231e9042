// NCCL communicator and the weight broadcast (nccl_comm.h).
#include "dist/nccl_comm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "core/log.h"
#include "engine/cuda/cuda_raii.h"

namespace sluice {
namespace {

// Chunk of the byte stream moved per collective: bounded staging memory, and MPI counts fit int.
constexpr std::size_t kChunk = 64ull << 20;

// What every rank must know before the bytes flow: constant names, types and shapes.
struct Manifest {
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  std::size_t total = 0;
};

void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
uint64_t get_u64(const std::string& s, std::size_t& at) {
  if (at + 8 > s.size()) SLUICE_THROW("weight manifest is truncated");
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  at += 8;
  return v;
}

std::string serialize(const Graph& g) {
  std::vector<std::string> names;
  for (const auto& kv : g.constants) names.push_back(kv.first);
  std::sort(names.begin(), names.end());   // the same order on every rank
  std::string s;
  put_u64(s, names.size());
  for (const auto& name : names) {
    const Tensor& t = g.constants.at(name);
    put_u64(s, name.size());
    s += name;
    put_u64(s, static_cast<uint64_t>(t.dtype));
    put_u64(s, t.shape.size());
    for (int64_t d : t.shape) put_u64(s, static_cast<uint64_t>(d));
  }
  return s;
}

Manifest deserialize(const std::string& s) {
  Manifest m;
  std::size_t at = 0;
  const uint64_t count = get_u64(s, at);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t len = get_u64(s, at);
    if (at + len > s.size()) SLUICE_THROW("weight manifest is truncated");
    m.names.emplace_back(s.substr(at, len));
    at += len;
    m.dtypes.push_back(static_cast<DType>(get_u64(s, at)));
    Shape shape(get_u64(s, at));
    for (auto& d : shape) d = static_cast<int64_t>(get_u64(s, at));
    m.shapes.push_back(shape);
    m.total += static_cast<std::size_t>(shape_numel(shape)) * dtype_size(m.dtypes.back());
  }
  return m;
}

std::string bcast_bytes(const std::string& s, MPI_Comm comm, int root) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  uint64_t n = s.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm));
  std::string out = rank == root ? s : std::string(n, '\0');
  for (std::size_t at = 0; at < n; at += kChunk) {
    const int len = static_cast<int>(std::min<std::size_t>(kChunk, n - at));
    MPI_CHECK(MPI_Bcast(&out[at], len, MPI_BYTE, root, comm));
  }
  return out;
}

// Broadcasts the manifest and makes every non-root rank's constants match it (allocated, not yet
// filled).  Returns the tensors in manifest order.
std::vector<Tensor*> agree_on_constants(Graph& g, MPI_Comm comm, int root, Manifest* out) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  *out = deserialize(bcast_bytes(rank == root ? serialize(g) : std::string(), comm, root));
  std::vector<Tensor*> tensors;
  for (std::size_t i = 0; i < out->names.size(); ++i) {
    const std::string& name = out->names[i];
    if (rank != root) {
      g.constants[name] = Tensor(out->dtypes[i], out->shapes[i]);
      g.values[name] = ValueInfo{name, out->dtypes[i], out->shapes[i]};
    }
    tensors.push_back(&g.constants.at(name));
  }
  if (rank != root) {
    // Constants the root does not have are stale here.
    const std::set<std::string> keep(out->names.begin(), out->names.end());
    for (auto it = g.constants.begin(); it != g.constants.end();)
      it = keep.count(it->first) ? std::next(it) : g.constants.erase(it);
  }
  return tensors;
}

// Copies bytes [at, at+len) of the concatenation of `tensors` to/from `buf`.
void gather_range(const std::vector<Tensor*>& tensors, std::size_t at, std::size_t len, uint8_t* buf, bool to_buf) {
  std::size_t pos = 0;
  for (Tensor* t : tensors) {
    const std::size_t n = t->nbytes();
    const std::size_t lo = std::max(at, pos), hi = std::min(at + len, pos + n);
    if (lo < hi) {
      if (to_buf) std::memcpy(buf + (lo - at), t->bytes.data() + (lo - pos), hi - lo);
      else std::memcpy(t->bytes.data() + (lo - pos), buf + (lo - at), hi - lo);
    }
    pos += n;
    if (pos >= at + len) break;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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

WeightBroadcast broadcast_weights_mpi(Graph& g, MPI_Comm comm, int root) {
  const auto t0 = std::chrono::steady_clock::now();
  Manifest m;
  std::vector<Tensor*> tensors = agree_on_constants(g, comm, root, &m);
  for (Tensor* t : tensors)
    for (std::size_t at = 0; at < t->nbytes(); at += kChunk) {
      const int len = static_cast<int>(std::min(kChunk, t->nbytes() - at));
      MPI_CHECK(MPI_Bcast(t->bytes.data() + at, len, MPI_BYTE, root, comm));
    }
  return WeightBroadcast{"mpi", static_cast<int>(tensors.size()), m.total, seconds_since(t0)};
}

WeightBroadcast broadcast_weights_nccl(Graph& g, NcclComm& nccl, MPI_Comm comm, int root) {
  const auto t0 = std::chrono::steady_clock::now();
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

WeightBroadcast broadcast_weights(Graph& g, MPI_Comm comm, int root, int device) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  if (device < 0 || size == 1 || ranks_share_gpu(comm, device)) return broadcast_weights_mpi(g, comm, root);
  NcclComm nccl(comm, device);
  return broadcast_weights_nccl(g, nccl, comm, root);
}

}  // namespace sluice
