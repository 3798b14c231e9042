// The preprocessing kernel against the CPU's preprocess_rgb() on the same RGB pixels: random image
// sizes through every mode (exact resize, shorter side + center crop, crops larger than the image,
// letterbox with padding), within 1 uint8 level.  The host side of the same arithmetic
// (gpu_preprocess.h's preprocess_pixel) is checked first without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/cuda/cuda_raii.h"
#include "gpu_test_util.h"
#include "image/cuda/gpu_preprocess.h"
#include "image/cuda/tap_tables.h"
#include "image/image.h"
#include "image_test_util.h"

using namespace sluice;

namespace {

struct Case {
  PreprocessSpec spec;
  std::vector<std::pair<int, int>> sizes;  // (h, w) of the batch's decoded rows
};

// Random specs in every mode; sizes from 1 pixel to 700, shrinking and enlarging.
std::vector<Case> random_cases(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    Case c;
    PreprocessSpec& s = c.spec;
    switch (i % 4) {
      case 0:
        s.mode = PreprocessSpec::Resize::Exact;
        s.out_h = pick(1, 260);
        s.out_w = pick(1, 260);
        break;
      case 1:
        s.mode = PreprocessSpec::Resize::ShorterSide;
        s.resize_short = pick(4, 300);
        // Mostly smaller than the resized image; sometimes larger (padded).
        s.crop_h = s.crop_w = pick(2, s.resize_short + (i % 4 == 1 ? 40 : 0));
        if (i % 5 == 0) s.crop_w = pick(2, s.resize_short);
        s.out_h = s.crop_h;
        s.out_w = s.crop_w;
        s.pad = {static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255))};
        break;
      case 3:
        // DETR's and YOLOS's resize: top left, padded bottom and right (a larger image is cut here;
        // the inputs make it a bad sample before any plan).
        s.mode = PreprocessSpec::Resize::ShortestEdge;
        s.resize_short = pick(4, 300);
        s.max_size = i % 8 == 3 ? 0 : pick(s.resize_short, 400);
        s.size_multiple = i % 3 == 0 ? 16 : 0;
        s.out_h = pick(2, 300);
        s.out_w = pick(2, 300);
        s.pad = {static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255))};
        break;
      default:
        s.mode = PreprocessSpec::Resize::Letterbox;
        s.out_h = pick(2, 260);
        s.out_w = pick(2, 260);
        s.pad = {static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255)), static_cast<uint8_t>(pick(0, 255))};
        break;
    }
    // Every filter in every mode: bilinear, bicubic (each pass rounded), nearest.
    const Interpolation filters[] = {Interpolation::Bilinear, Interpolation::Bicubic, Interpolation::Nearest};
    s.interpolation = filters[(i / 4) % 3];
    const int rows = pick(1, 4);
    for (int r = 0; r < rows; ++r) c.sizes.push_back({pick(1, 700), pick(1, 700)});
    cases.push_back(c);
  }
  return cases;
}

// Plans of one case: a row per size, then one zero row and one host row.
struct Planned {
  std::vector<GpuRowPlan> plans;
  std::vector<TapSpan> spans;
  std::vector<float> weights;
  std::vector<std::vector<uint8_t>> images;
  std::vector<int64_t> offsets;
  int64_t arena_bytes = 0;
};

Planned plan_case(const Case& c, TapCache& cache, uint32_t seed) {
  Planned p;
  const std::size_t rows = c.sizes.size() + 2;
  const std::size_t room = rows * static_cast<std::size_t>(c.spec.out_h + c.spec.out_w);
  p.spans.resize(room);
  // Enough for every row's own tables: a shrink from `in` to `out` takes at most 2 * in / out + 3
  // taps per output coordinate (sizes are below 700).
  p.weights.resize(rows * (2 * 2 * 700 + 4 * static_cast<std::size_t>(c.spec.out_h + c.spec.out_w)));
  TapTables tables;
  tables.reset(p.spans.data(), p.spans.size(), p.weights.data(), p.weights.size(), &cache);
  for (std::size_t r = 0; r < c.sizes.size(); ++r) {
    const auto [h, w] = c.sizes[r];
    GpuRowPlan plan;
    EXPECT_TRUE(tables.plan_row(h, w, c.spec, &plan)) << "tap tables of " << h << "x" << w << " do not fit";
    plan.kind = kGpuRowDecoded;
    plan.arena_offset = p.arena_bytes;
    p.plans.push_back(plan);
    p.images.push_back(imagetest::natural_rgb(h, w, seed + static_cast<uint32_t>(r)));
    p.offsets.push_back(p.arena_bytes);
    p.arena_bytes += (static_cast<int64_t>(h) * w * 3 + 255) / 256 * 256;
  }
  GpuRowPlan zero, host;
  host.kind = kGpuRowHost;
  p.plans.push_back(zero);
  p.plans.push_back(host);
  return p;
}

std::vector<uint8_t> cpu_reference(const std::vector<uint8_t>& rgb, int h, int w, const PreprocessSpec& spec) {
  std::vector<uint8_t> out(static_cast<std::size_t>(3) * spec.out_h * spec.out_w);
  preprocess_rgb(rgb.data(), plan_resize(h, w, spec), out.data());
  return out;
}

std::string describe(const Case& c, std::size_t r) {
  const char* mode[] = {"exact", "shorter-side", "letterbox", "none"};
  return str(mode[static_cast<int>(c.spec.mode)], " ", interpolation_name(c.spec.interpolation), " S=", c.spec.resize_short, " out=", c.spec.out_h, "x", c.spec.out_w,
             " in=", c.sizes[r].first, "x", c.sizes[r].second);
}

TEST(GpuPreprocessMath, HostSideOfTheKernelMatchesPreprocessRgb) {
  TapCache cache;
  int64_t values = 0, exact = 0;
  for (const Case& c : random_cases(45, 7)) {
    const Planned p = plan_case(c, cache, 100);
    for (std::size_t r = 0; r < c.sizes.size(); ++r) {
      const auto [h, w] = c.sizes[r];
      const std::vector<uint8_t> ref = cpu_reference(p.images[r], h, w, c.spec);
      const int64_t plane = static_cast<int64_t>(c.spec.out_h) * c.spec.out_w;
      int worst = 0;
      for (int y = 0; y < c.spec.out_h; ++y)
        for (int x = 0; x < c.spec.out_w; ++x) {
          uint8_t rgb[3];
          preprocess_pixel(p.plans[r], p.spans.data(), p.weights.data(), p.images[r].data(), y, x, c.spec.pad.data(), rgb);
          for (int ch = 0; ch < 3; ++ch) {
            const int d = std::abs(rgb[ch] - ref[static_cast<std::size_t>(ch * plane + y * c.spec.out_w + x)]);
            worst = std::max(worst, d);
            exact += d == 0;
            ++values;
          }
        }
      EXPECT_LE(worst, 1) << describe(c, r);
    }
  }
  std::printf("[ image math ] host emulation of the kernel: %.4f %% of %lld values equal to preprocess_rgb\n",
              100.0 * static_cast<double>(exact) / static_cast<double>(values), static_cast<long long>(values));
}

TEST(GpuPreprocess, KernelMatchesPreprocessRgbWithinOneLevel) {
  SLUICE_REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  cuda::Stream stream = cuda::make_stream();
  TapCache cache;
  int64_t values = 0, exact = 0;
  int worst_all = 0;
  for (const Case& c : random_cases(60, 11)) {
    const Planned p = plan_case(c, cache, 300);
    const int batch = static_cast<int>(p.plans.size());
    const std::size_t sample = static_cast<std::size_t>(3) * c.spec.out_h * c.spec.out_w;
    std::vector<uint8_t> arena(static_cast<std::size_t>(p.arena_bytes));
    for (std::size_t r = 0; r < p.images.size(); ++r)
      std::copy(p.images[r].begin(), p.images[r].end(), arena.begin() + p.offsets[r]);
    cuda::DeviceBuffer d_plans(p.plans.size() * sizeof(GpuRowPlan)), d_spans(p.spans.size() * sizeof(TapSpan)),
        d_weights(p.weights.size() * sizeof(float)), d_arena(arena.size()), d_out(sample * batch);
    CUDA_CHECK(cudaMemcpy(d_plans.get(), p.plans.data(), d_plans.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_spans.get(), p.spans.data(), d_spans.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_weights.get(), p.weights.data(), d_weights.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_arena.get(), arena.data(), arena.size(), cudaMemcpyHostToDevice));
    // A sentinel: the host row must keep it, every other byte must be written.
    CUDA_CHECK(cudaMemsetAsync(d_out.get(), 0x77, d_out.bytes(), stream));
    // The uploads ran on the legacy default stream (a cudaMemcpy from pageable memory may return
    // before its DMA ends), which the kernel's non-blocking stream does not wait for.
    CUDA_CHECK(cudaDeviceSynchronize());
    PreprocessLaunch L;
    L.rows = d_plans.as<GpuRowPlan>();
    L.spans = d_spans.as<TapSpan>();
    L.weights = d_weights.as<float>();
    L.arena = d_arena.as<uint8_t>();
    L.out = d_out.as<uint8_t>();
    L.batch = batch;
    L.out_h = c.spec.out_h;
    L.out_w = c.spec.out_w;
    for (int ch = 0; ch < 3; ++ch) L.pad[ch] = c.spec.pad[static_cast<std::size_t>(ch)];
    launch_image_preprocess(L, stream);
    std::vector<uint8_t> got(d_out.bytes());
    CUDA_CHECK(cudaMemcpyAsync(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t r = 0; r < c.sizes.size(); ++r) {
      const std::vector<uint8_t> ref = cpu_reference(p.images[r], c.sizes[r].first, c.sizes[r].second, c.spec);
      const imagetest::DiffStats d = imagetest::diff_stats(got.data() + r * sample, ref.data(), sample, 0);
      EXPECT_LE(d.max, 1) << describe(c, r);
      worst_all = std::max(worst_all, d.max);
      exact += static_cast<int64_t>(sample) - static_cast<int64_t>(d.over * static_cast<double>(sample) + 0.5);
      values += static_cast<int64_t>(sample);
    }
    const uint8_t* zero = got.data() + c.sizes.size() * sample;
    const uint8_t* host = zero + sample;
    EXPECT_EQ(std::count(zero, zero + sample, 0), static_cast<std::ptrdiff_t>(sample)) << "zero row";
    EXPECT_EQ(std::count(host, host + sample, 0x77), static_cast<std::ptrdiff_t>(sample)) << "host row overwritten";
  }
  std::printf("[ image preprocess ] kernel vs preprocess_rgb: max |diff| %d, %.4f %% of %lld values equal\n", worst_all,
              100.0 * static_cast<double>(exact) / static_cast<double>(values), static_cast<long long>(values));
}

}  // namespace
