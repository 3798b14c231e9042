// Throughput of the GPU image path on real files, disabled in normal runs.  On the GPU host:
//   SLUICE_IMAGE_DIR=DIR [SLUICE_BENCH_IMAGES=4096] [SLUICE_BENCH_BATCHES="64 128 256"]
//   [SLUICE_BENCH_BACKENDS="auto hybrid"]
//   sluice_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='ImageBench.*'
// Prints, per backend and batch size (data_tools/bench_images.py reads these lines):
//   [ bench nvjpeg ] ... images_per_s=N     nvJPEG alone: batched decode to interleaved RGB, files
//                                           already in memory, no resize (the decoder's ceiling)
//   [ bench input ] ... gpu_images_per_s=N fill_images_per_s_per_thread=M
//                                           the GPU image input: N = the driver's half (H2D, nvJPEG,
//                                           resize 256 + crop 224 kernel) on filled slots; M = one
//                                           reader thread's fill() (copy of the bytes, header
//                                           parsing, tap tables, CPU decoding of what nvJPEG skips)
// Both are files/s over two timed passes after a warm-up pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/cuda/cuda_raii.h"
#include "core/device.h"
#include "gpu_test_util.h"
#include "image/cuda/gpu_image_input.h"
#include "image/cuda/nvjpeg_decoder.h"
#include "image/image.h"
#include "image_test_util.h"

using namespace sluice;
using namespace sluice::imagetest;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> words(const char* env, const char* fallback) {
  std::istringstream in(std::getenv(env) ? std::getenv(env) : fallback);
  std::vector<std::string> v;
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

GpuImageOptions::Backend backend_of(const std::string& name) {
  if (name == "hardware") return GpuImageOptions::Backend::Hardware;
  if (name == "hybrid") return GpuImageOptions::Backend::Hybrid;
  return GpuImageOptions::Backend::Auto;
}

std::vector<MemorySource::File> load_jpegs(const std::string& dir, std::size_t limit) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > limit) paths.resize(limit);
  std::vector<MemorySource::File> files;
  for (const std::string& p : paths) files.push_back({p, read_file(p), ""});
  return files;
}

void bench_decoder(const std::vector<MemorySource::File>& files, GpuImageOptions::Backend backend, int batch) {
  NvjpegBatchDecoder dec(backend, false, batch);
  std::vector<std::pair<int, int>> hw;
  int max_w = 0, max_h = 0;
  for (const auto& f : files) {
    ImageHeader ih;
    std::string error;
    ASSERT_TRUE(parse_image_header(f.bytes.data(), f.bytes.size(), &ih, &error)) << f.key << ": " << error;
    hw.push_back({ih.height, ih.width});
    max_w = std::max(max_w, ih.width);
    max_h = std::max(max_h, ih.height);
  }
  const std::size_t image_bytes = static_cast<std::size_t>(max_w) * max_h * 3;
  cuda::DeviceBuffer arena(image_bytes * static_cast<std::size_t>(batch));
  cuda::Stream stream = cuda::make_stream();
  std::vector<const unsigned char*> data(static_cast<std::size_t>(batch));
  std::vector<std::size_t> len(static_cast<std::size_t>(batch));
  std::vector<nvjpegImage_t> out(static_cast<std::size_t>(batch));
  auto pass = [&] {
    for (std::size_t first = 0; first < files.size(); first += static_cast<std::size_t>(batch)) {
      const int n = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(batch), files.size() - first));
      for (int i = 0; i < n; ++i) {
        const auto& f = files[first + static_cast<std::size_t>(i)];
        data[static_cast<std::size_t>(i)] = f.bytes.data();
        len[static_cast<std::size_t>(i)] = f.bytes.size();
        out[static_cast<std::size_t>(i)] = nvjpegImage_t{};
        out[static_cast<std::size_t>(i)].channel[0] = arena.as<unsigned char>() + static_cast<std::size_t>(i) * image_bytes;
        out[static_cast<std::size_t>(i)].pitch[0] = static_cast<std::size_t>(hw[first + static_cast<std::size_t>(i)].second) * 3;
      }
      std::string error;
      ASSERT_TRUE(dec.decode(n, data.data(), len.data(), out.data(), max_w, max_h, stream, &error)) << error;
    }
  };
  pass();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  pass();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double s = since(t0);
  std::printf("[ bench nvjpeg ] backend=%s batch=%d images=%zu images_per_s=%.0f\n",
              dec.hardware() ? "hardware" : "hybrid", batch, files.size(), 2.0 * static_cast<double>(files.size()) / s);
}

void bench_input(const std::vector<MemorySource::File>& files, GpuImageOptions::Backend backend, int batch) {
  MemorySource src(files);
  std::unique_ptr<Device> device = create_cuda_device(0);
  PreprocessSpec spec;
  spec.mode = PreprocessSpec::Resize::ShorterSide;
  spec.resize_short = 256;
  spec.crop_h = spec.crop_w = spec.out_h = spec.out_w = 224;
  GpuImageOptions opt;
  opt.backend = backend;
  std::unique_ptr<BatchInput> input = make_gpu_image_input(src, spec, batch, *device, opt);
  const int slots = 4;
  const int64_t batches = (static_cast<int64_t>(files.size()) + batch - 1) / batch;
  std::vector<void*> slot;
  std::vector<BatchRows> rows(static_cast<std::size_t>(slots));
  for (int k = 0; k < slots; ++k) slot.push_back(device->pinned_alloc(input->slot_bytes()));
  cuda::DeviceBuffer engine_input(static_cast<std::size_t>(batch) * 3 * 224 * 224);
  // One reader thread fills every batch once (the CPU side), into the slots in turn.
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    BatchRows& r = rows[static_cast<std::size_t>(b % slots)];
    r.reset(batch, true);
    const int64_t first = b * batch;
    input->fill(first, std::min<int64_t>(batch, static_cast<int64_t>(files.size()) - first),
                slot[static_cast<std::size_t>(b % slots)], r);
  }
  const double fill_s = since(t0);
  // The driver's half over the filled slots (the last batches), as many batches as the files make.
  auto pass = [&] {
    for (int64_t b = 0; b < batches; ++b) {
      const int k = static_cast<int>(b % std::min<int64_t>(slots, batches));
      input->enqueue_copy(slot[static_cast<std::size_t>(k)], rows[static_cast<std::size_t>(k)], engine_input.get(), *device);
      input->enqueue_decode(slot[static_cast<std::size_t>(k)], rows[static_cast<std::size_t>(k)], engine_input.get(), *device);
    }
  };
  pass();
  device->synchronize();
  t0 = std::chrono::steady_clock::now();
  pass();
  pass();
  device->synchronize();
  const double gpu_s = since(t0);
  std::printf("[ bench input ] %s batch=%d images=%zu gpu_images_per_s=%.0f fill_images_per_s_per_thread=%.0f\n",
              input->describe().c_str(), batch, files.size(), 2.0 * static_cast<double>(files.size()) / gpu_s,
              static_cast<double>(files.size()) / fill_s);
  for (void* p : slot) device->pinned_free(p);
}

TEST(ImageBench, DISABLED_DecodeAndInput) {
  SLUICE_REQUIRE_GPU();
  const char* dir = std::getenv("SLUICE_IMAGE_DIR");
  if (!dir) GTEST_SKIP() << "SLUICE_IMAGE_DIR is not set";
  CUDA_CHECK(cudaSetDevice(0));
  const std::size_t limit = std::getenv("SLUICE_BENCH_IMAGES") ? std::strtoull(std::getenv("SLUICE_BENCH_IMAGES"), nullptr, 10) : 4096;
  const std::vector<MemorySource::File> files = load_jpegs(dir, limit);
  ASSERT_FALSE(files.empty()) << "no .jpg files under " << dir;
  for (const std::string& b : words("SLUICE_BENCH_BACKENDS", "auto hybrid"))
    for (const std::string& n : words("SLUICE_BENCH_BATCHES", "64 128 256")) {
      bench_decoder(files, backend_of(b), std::stoi(n));
      bench_input(files, backend_of(b), std::stoi(n));
    }
}

}  // namespace
