// The weight broadcast of cluster/nccl_comm.h.  These tests need MPI: they run when the binary is
// started by mpirun (e.g. `mpirun -np 2 sluice_gpu_tests --gtest_filter='WeightBroadcast*'`) or
// with SLUICE_MPI_TESTS=1 (an MPI singleton), and skip otherwise.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>

#include "cluster/nccl_comm.h"
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

bool mpi_wanted() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("SLUICE_MPI_TESTS"); }

// MPI is started on first use and finalized after the last test.
class MpiEnvironment : public ::testing::Environment {
 public:
  static bool start() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return false;
      started_ = true;
    }
    return true;
  }
  void TearDown() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (started_ && !fin) MPI_Finalize();
  }

 private:
  static inline bool started_ = false;
};
::testing::Environment* const g_mpi_env = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

#define SLUICE_REQUIRE_MPI()                                                                           \
  do {                                                                                                 \
    SLUICE_REQUIRE_GPU();                                                                              \
    if (!mpi_wanted()) GTEST_SKIP() << "not started by mpirun (set SLUICE_MPI_TESTS=1 for a singleton)"; \
    ASSERT_TRUE(MpiEnvironment::start()) << "MPI_Init_thread failed";                                  \
  } while (0)

// A graph whose constants are random on the root and absent (or stale) elsewhere.
Graph weights_graph(bool root) {
  GraphBuilder b({1, 4});
  if (root) {
    b.random_f("w.big", {3 * 1024 * 1024 + 7}, 1);   // > one 64 MiB chunk? no: 12 MiB, odd size
    b.random_f("w.small", {5}, 2);
    b.constant_i("shape", {2}, {1, -1});
    Tensor h(DType::F16, {33});
    for (std::size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = static_cast<uint8_t>(i * 7);
    b.constant("w.half", h);
  } else {
    b.constant_f("stale", {2}, {1.f, 2.f});
  }
  return b.g;
}

// FNV-1a over names, types, shapes and bytes of every constant, in name order.
uint64_t fingerprint(const Graph& g) {
  std::vector<std::string> names;
  for (const auto& kv : g.constants) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  for (const auto& n : names) {
    const Tensor& t = g.constants.at(n);
    mix(n.data(), n.size());
    mix(&t.dtype, sizeof t.dtype);
    mix(t.shape.data(), t.shape.size() * sizeof(int64_t));
    mix(t.bytes.data(), t.bytes.size());
  }
  return h;
}

void expect_same_everywhere(const Graph& g, MPI_Comm comm) {
  const uint64_t mine = fingerprint(g);
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<uint64_t> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm);
  for (int r = 0; r < size; ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], all[0]) << "rank " << r << " differs from the root";
  EXPECT_EQ(mine, fingerprint(weights_graph(true))) << "the weights are not the root's";
}

TEST(WeightBroadcast, MpiTransportDeliversIdenticalConstants) {
  SLUICE_REQUIRE_MPI();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Graph g = weights_graph(rank == 0);
  const WeightBroadcast r = broadcast_weights_mpi(g, MPI_COMM_WORLD, 0);
  EXPECT_EQ(r.transport, "mpi");
  EXPECT_EQ(r.tensors, 4);
  EXPECT_EQ(g.constants.count("stale"), 0u) << "constants the root lacks must go";
  EXPECT_EQ(g.values.at("w.half").dtype, DType::F16);
  expect_same_everywhere(g, MPI_COMM_WORLD);
}

TEST(WeightBroadcast, RanksSharingAGpuFallBackToMpi) {
  SLUICE_REQUIRE_MPI();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const int device = rank % gpus;
  const bool shared = ranks_share_gpu(MPI_COMM_WORLD, device);
  EXPECT_EQ(shared, size > gpus) << size << " ranks on " << gpus << " GPUs";
  Graph g = weights_graph(rank == 0);
  const WeightBroadcast r = broadcast_weights(g, MPI_COMM_WORLD, 0, device);
  EXPECT_EQ(r.transport, (shared || size == 1) ? "mpi" : "nccl");
  expect_same_everywhere(g, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("[ weights  ] %d ranks: %s, %d tensors, %zu bytes, %.3f s\n", size, r.transport.c_str(), r.tensors, r.bytes,
                r.seconds);
}

TEST(WeightBroadcast, NcclTransportWithOneRankPerGpu) {
  SLUICE_REQUIRE_MPI();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const int device = rank % gpus;
  // Ranks that share a GPU cannot form one NCCL communicator: each uses its own (MPI_COMM_SELF).
  const bool shared = ranks_share_gpu(MPI_COMM_WORLD, device);
  MPI_Comm comm = shared ? MPI_COMM_SELF : MPI_COMM_WORLD;
  NcclComm nccl(comm, device);
  Graph g = weights_graph(shared || rank == 0);
  const WeightBroadcast r = broadcast_weights_nccl(g, nccl, comm, 0);
  EXPECT_EQ(r.transport, "nccl");
  EXPECT_EQ(r.tensors, 4);
  EXPECT_EQ(fingerprint(g), fingerprint(weights_graph(true)));
}

}  // namespace
