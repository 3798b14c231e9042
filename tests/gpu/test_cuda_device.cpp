// The pipeline's CUDA device (core/device.h): pinned slots, copies on the three streams,
// events ordering one stream after another, timing events, and thread binding.
#include <thread>

#include "core/cuda/cuda_raii.h"
#include "core/device.h"
#include "engine/cuda/kernels.h"
#include "gpu_test_util.h"

using namespace sluice;
using namespace sluice::gputest;

namespace {

TEST(CudaDevice, DescribesTheGpuAndItsBus) {
  SLUICE_REQUIRE_GPU();
  auto d = create_cuda_device(0);
  EXPECT_TRUE(d->is_gpu());
  EXPECT_EQ(d->ordinal(), 0);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(d->describe().find(prop.name), std::string::npos) << d->describe();
  EXPECT_NE(d->describe().find(":"), std::string::npos) << "expected a PCI bus id in " << d->describe();
  for (StreamKind s : {StreamKind::Copy, StreamKind::Compute, StreamKind::Egress}) EXPECT_NE(d->stream(s), nullptr);
  EXPECT_NE(d->stream(StreamKind::Copy), d->stream(StreamKind::Compute));
}

TEST(CudaDevice, BindThreadSetsTheDeviceForErrorsAndCuda) {
  SLUICE_REQUIRE_GPU();
  auto d = create_cuda_device(0);
  int seen = -2, cuda_dev = -2;
  std::thread t([&] {
    d->bind_thread();
    seen = thread_device();
    cudaGetDevice(&cuda_dev);
  });
  t.join();
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(cuda_dev, 0);
}

TEST(CudaDevice, PinnedMemoryIsPageLocked) {
  SLUICE_REQUIRE_GPU();
  auto d = create_cuda_device(0);
  void* p = d->pinned_alloc(1 << 20);
  ASSERT_NE(p, nullptr);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  d->pinned_free(p);
}

// The pipeline's pattern: H2D on the copy stream, a kernel on compute after the H2D event, D2H on
// egress after the compute event, the host waiting only on the last event.
TEST(CudaDevice, EventsOrderCopyComputeAndEgressStreams) {
  SLUICE_REQUIRE_GPU();
  auto d = create_cuda_device(0);
  d->bind_thread();
  const std::size_t n = 1 << 22;   // 16 MiB of floats: long enough for a race to show
  auto* in = static_cast<float*>(d->pinned_alloc(n * sizeof(float)));
  auto* out = static_cast<float*>(d->pinned_alloc(n * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) - 500.f;
  void* dx = nullptr;
  void* dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, n * sizeof(float)), cudaSuccess);
  const int h2d = d->create_event(), done = d->create_event(), d2h = d->create_event();
  const int t0 = d->create_event(true), t1 = d->create_event(true);
  for (int round = 0; round < 3; ++round) {   // events are re-recorded per batch
    d->record(t0, StreamKind::Copy);
    d->copy_h2d(dx, in, n * sizeof(float), StreamKind::Copy);
    d->record(h2d, StreamKind::Copy);
    d->stream_wait(StreamKind::Compute, h2d);
    cuda::ActParams relu;
    relu.act = cuda::Act::Relu;
    cuda::unary(DType::F32, dx, dy, static_cast<int64_t>(n), relu, static_cast<cudaStream_t>(d->stream(StreamKind::Compute)));
    d->record(done, StreamKind::Compute);
    d->stream_wait(StreamKind::Egress, done);
    d->copy_d2h(out, dy, n * sizeof(float), StreamKind::Egress);
    d->record(d2h, StreamKind::Egress);
    d->record(t1, StreamKind::Egress);
    d->event_sync(d2h);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += out[i] != std::max(in[i], 0.f);
    EXPECT_EQ(bad, 0u) << "round " << round;
    d->event_sync(t1);
    const double s = d->elapsed(t0, t1);
    EXPECT_GT(s, 0.0);
    EXPECT_LT(s, 10.0);
    std::fill(out, out + n, -1.f);
  }
  d->synchronize();
  cudaFree(dx);
  cudaFree(dy);
  d->pinned_free(in);
  d->pinned_free(out);
}

TEST(CudaDevice, MissingDeviceAndEventAreErrors) {
  SLUICE_REQUIRE_GPU();
  EXPECT_THROW(create_cuda_device(1000), UsageError);
  auto d = create_cuda_device(0);
  EXPECT_THROW(d->record(42, StreamKind::Copy), Error);
}

}  // namespace
