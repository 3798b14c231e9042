// The weight broadcast's manifest and its MPI transport (weights.h); the NCCL transport is in
// nccl_comm.cpp, compiled only with CUDA.
#include "cluster/weights.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "cluster/mpi_context.h"
#include "core/error.h"
#include "core/timer.h"
#ifdef SLUICE_HAVE_CUDA
#include "cluster/nccl_comm.h"
#endif

namespace sluice {
namespace weights_detail {
namespace {

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

}  // namespace

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

}  // namespace weights_detail

using namespace weights_detail;

WeightBroadcast broadcast_weights_mpi(Graph& g, MPI_Comm comm, int root) {
  const auto t0 = Clock::now();
  Manifest m;
  std::vector<Tensor*> tensors = agree_on_constants(g, comm, root, &m);
  for (Tensor* t : tensors)
    for (std::size_t at = 0; at < t->nbytes(); at += kChunk) {
      const int len = static_cast<int>(std::min(kChunk, t->nbytes() - at));
      MPI_CHECK(MPI_Bcast(t->bytes.data() + at, len, MPI_BYTE, root, comm));
    }
  return WeightBroadcast{"mpi", static_cast<int>(tensors.size()), m.total, seconds_since(t0)};
}

WeightBroadcast broadcast_weights(Graph& g, MPI_Comm comm, int root, int device) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
#ifdef SLUICE_HAVE_CUDA
  if (device >= 0 && size > 1 && !ranks_share_gpu(comm, device)) {
    NcclComm nccl(comm, device);
    return broadcast_weights_nccl(g, nccl, comm, root);
  }
#endif
  (void)device;
  return broadcast_weights_mpi(g, comm, root);
}

}  // namespace sluice
