// nvJPEG through our batched decoder against TurboJPEG (image.h's decode_image_rgb) on the same
// JPEGs, and whole batches through the GPU image input with bad files, a PNG, a progressive, a
// CMYK and a 4:1:1 JPEG mixed in.
//
// Decoders differ: JPEG fixes the IDCT only up to an accuracy bound, and chroma upsampling is the
// decoder's choice: libjpeg-turbo interpolates ("fancy upsampling", PIL's and image.h's default),
// nvJPEG replicates unless asked to interpolate.  On these pictures the two upsamplings alone
// differ (TurboJPEG with and without TJFLAG_FASTUPSAMPLE, measured on the build machine) by a
// mean 0.1-0.4 levels and 0.0-0.6 % of values more than 8 apart at 257-640 pixels a side (max up to
// 50 at sharp colour edges), far more on thumbnails (17x23 4:2:0: mean 9, a third of the values).
// So nvJPEG is compared with both TurboJPEG upsamplings and held, against the closer one, to a
// bound that a wrong decode (a channel swap, a wrong pitch, a shifted row, the wrong colour
// conversion) cannot meet: mean |difference| <= 2 levels, at most 1 % of values more than 8 apart;
// pictures under 100 pixels a side only to a mean of 12 (a swap or a wrong pitch is far above).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

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

constexpr double kMeanBound = 2.0;
constexpr double kOverBound = 0.01;
constexpr int kOverLevels = 8;
constexpr double kThumbnailMeanBound = 12.0;

// TurboJPEG straight, with replicated chroma (TJFLAG_FASTUPSAMPLE) or interpolated (its default).
std::vector<uint8_t> turbo_decode(const std::vector<uint8_t>& file, int h, int w, bool replicate) {
  tjhandle d = tjInitDecompress();
  std::vector<uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  const int rc = tjDecompress2(d, file.data(), static_cast<unsigned long>(file.size()), rgb.data(), w, 0, h, TJPF_RGB,
                               TJFLAG_ACCURATEDCT | (replicate ? TJFLAG_FASTUPSAMPLE : 0));
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(d);
  tjDestroy(d);
  return rgb;
}

std::vector<uint8_t> cpu_decode(const std::vector<uint8_t>& file, int* h, int* w) {
  std::vector<uint8_t> rgb;
  std::string error;
  EXPECT_TRUE(decode_image_rgb(file.data(), file.size(), rgb, h, w, &error)) << error;
  return rgb;
}

struct Sample {
  std::string name;
  std::vector<uint8_t> file;
  int h, w;
};

std::vector<Sample> decode_samples() {
  std::vector<Sample> v;
  const std::pair<int, int> sizes[] = {{375, 500}, {333, 257}, {17, 23}, {49, 67}, {640, 480}};
  const Jpeg kinds[] = {Jpeg::S444, Jpeg::S422, Jpeg::S420, Jpeg::S440, Jpeg::S411, Jpeg::Grey};
  uint32_t seed = 1;
  for (Jpeg k : kinds)
    for (auto [h, w] : sizes)
      for (int q : {90, 75}) {
        if (q == 75 && h < 100) continue;
        const std::vector<uint8_t> rgb = natural_rgb(h, w, seed++);
        v.push_back({str(jpeg_name(k), " ", h, "x", w, " q", q), encode_jpeg(rgb, h, w, k, q), h, w});
      }
  return v;
}

void decode_against_turbojpeg(bool interpolate) {
  std::unique_ptr<NvjpegBatchDecoder> dec;
  try {
    dec = std::make_unique<NvjpegBatchDecoder>(GpuImageOptions::Backend::Auto, interpolate, 64);
  } catch (const Error& e) {
    GTEST_SKIP() << "nvJPEG refuses this configuration: " << e.what();
  }
  std::vector<Sample> samples = decode_samples();
  std::vector<const Sample*> taken;
  for (const Sample& s : samples) {
    if (dec->supports(s.file.data(), s.file.size()))
      taken.push_back(&s);
    else
      std::printf("[ nvjpeg ] %s: %s does not take it (the CPU decodes it)\n", dec->describe().c_str(), s.name.c_str());
  }
  ASSERT_GE(taken.size(), samples.size() * 2 / 3) << "the decoder refuses most baseline JPEGs";
  std::vector<cuda::DeviceBuffer> out;
  std::vector<const unsigned char*> data;
  std::vector<std::size_t> len;
  std::vector<nvjpegImage_t> dst(taken.size());
  int max_w = 0, max_h = 0;
  for (std::size_t i = 0; i < taken.size(); ++i) {
    out.emplace_back(static_cast<std::size_t>(taken[i]->h) * taken[i]->w * 3);
    data.push_back(taken[i]->file.data());
    len.push_back(taken[i]->file.size());
    dst[i] = nvjpegImage_t{};
    dst[i].channel[0] = out.back().as<unsigned char>();
    dst[i].pitch[0] = static_cast<std::size_t>(taken[i]->w) * 3;
    max_w = std::max(max_w, taken[i]->w);
    max_h = std::max(max_h, taken[i]->h);
  }
  cuda::Stream stream = cuda::make_stream();
  std::string error;
  // Three times: the second batch takes the decoder's other state, the third its first again.
  for (int round = 0; round < 3; ++round)
    ASSERT_TRUE(dec->decode(static_cast<int>(taken.size()), data.data(), len.data(), dst.data(), max_w, max_h, stream, &error))
        << error;
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (std::size_t i = 0; i < taken.size(); ++i) {
    int h = 0, w = 0;
    const std::vector<uint8_t> ref = cpu_decode(taken[i]->file, &h, &w);
    ASSERT_EQ(h, taken[i]->h);
    ASSERT_EQ(w, taken[i]->w);
    const std::vector<uint8_t> direct = turbo_decode(taken[i]->file, h, w, false);
    EXPECT_EQ(diff_stats(ref.data(), direct.data(), ref.size(), 0).max, 0) << "image.h's decoder is TurboJPEG's";
    std::vector<uint8_t> got(ref.size());
    CUDA_CHECK(cudaMemcpy(got.data(), out[i].get(), got.size(), cudaMemcpyDeviceToHost));
    const DiffStats fancy = diff_stats(got.data(), ref.data(), got.size(), kOverLevels);
    const std::vector<uint8_t> rep = turbo_decode(taken[i]->file, h, w, true);
    const DiffStats plain = diff_stats(got.data(), rep.data(), got.size(), kOverLevels);
    std::printf("[ nvjpeg vs turbojpeg ] %s  %-24s interpolated chroma: max %3d mean %.3f >%d %.3f %%;  replicated: "
                "max %3d mean %.3f >%d %.3f %%\n", dec->describe().c_str(), taken[i]->name.c_str(), fancy.max,
                fancy.mean, kOverLevels, 100 * fancy.over, plain.max, plain.mean, kOverLevels, 100 * plain.over);
    const DiffStats& d = fancy.mean <= plain.mean ? fancy : plain;
    if (std::min(h, w) < 100) {
      EXPECT_LE(d.mean, kThumbnailMeanBound) << taken[i]->name;
      continue;
    }
    EXPECT_LE(d.mean, kMeanBound) << taken[i]->name;
    EXPECT_LE(d.over, kOverBound) << taken[i]->name;
  }
}

TEST(NvjpegDecode, MatchesTurboJpegWithinDecoderDifferences) {
  SLUICE_REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  decode_against_turbojpeg(false);
}

TEST(NvjpegDecode, InterpolatedChromaMatchesTurboJpeg) {
  SLUICE_REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  decode_against_turbojpeg(true);
}

// A JPEG whose scan names a Huffman table that was never defined: the header parses, decoders fail.
std::vector<uint8_t> undefined_huffman_table(std::vector<uint8_t> jpeg) {
  for (std::size_t i = 2; i + 6 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA) {
      jpeg[i + 6] = 0x33;  // first component of the scan: DC and AC table 3
      return jpeg;
    }
  ADD_FAILURE() << "no SOS marker";
  return jpeg;
}

class GpuImageInputTest : public ::testing::TestWithParam<GpuImageOptions::Backend> {
 protected:
  void SetUp() override {
    if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA GPU: this GPU test is skipped";
    device_ = create_cuda_device(0);
    spec_.mode = PreprocessSpec::Resize::ShorterSide;
    spec_.resize_short = 256;
    spec_.crop_h = spec_.crop_w = spec_.out_h = spec_.out_w = 224;
  }

  // Runs one batch: fill, copy, decode; returns the engine input bytes.
  std::vector<uint8_t> run(MemorySource& src, const GpuImageOptions& opt, int64_t batch, int64_t count, BatchRows& rows) {
    std::unique_ptr<BatchInput> input = make_gpu_image_input(src, spec_, batch, *device_, opt);
    std::printf("[ image input ] %s\n", input->describe().c_str());
    void* slot = device_->pinned_alloc(input->slot_bytes());
    const std::size_t sample = 3 * 224 * 224;
    cuda::DeviceBuffer engine_input(sample * static_cast<std::size_t>(batch));
    // Stale bytes: every row must be written (zeros for bad and padding rows).
    // Waited for: the device's streams are non-blocking, so nothing orders them after this memset.
    CUDA_CHECK(cudaMemset(engine_input.get(), 0x5A, engine_input.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> out(engine_input.bytes());
    try {
      rows.reset(batch, input->has_sizes());
      input->fill(0, count, slot, rows);
      input->enqueue_copy(slot, rows, engine_input.get(), *device_);
      input->enqueue_decode(slot, rows, engine_input.get(), *device_);
      device_->synchronize();
      CUDA_CHECK(cudaMemcpy(out.data(), engine_input.get(), out.size(), cudaMemcpyDeviceToHost));
    } catch (...) {
      device_->pinned_free(slot);
      throw;
    }
    device_->pinned_free(slot);
    return out;
  }

  // The CPU path of the same file: decode_image_rgb + preprocess_rgb.
  std::vector<uint8_t> reference(const std::vector<uint8_t>& file) {
    int h = 0, w = 0;
    const std::vector<uint8_t> rgb = cpu_decode(file, &h, &w);
    std::vector<uint8_t> out(3 * 224 * 224);
    preprocess_rgb(rgb.data(), plan_resize(h, w, spec_), out.data());
    return out;
  }

  std::unique_ptr<Device> device_;
  PreprocessSpec spec_;
};

TEST_P(GpuImageInputTest, BatchWithBadFilesPngProgressiveCmykAndPadding) {
  GpuImageOptions opt;
  opt.backend = GetParam();
  std::vector<MemorySource::File> files;
  auto jpeg = [](int h, int w, Jpeg k, uint32_t seed) { return encode_jpeg(natural_rgb(h, w, seed), h, w, k); };
  files.push_back({"baseline420.jpg", jpeg(375, 500, Jpeg::S420, 1), ""});
  std::vector<uint8_t> garbage(5000);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 131 + 7);
  files.push_back({"garbage.jpg", garbage, ""});
  files.push_back({"picture.png", encode_png(natural_rgb(200, 300, 2), 200, 300), ""});
  files.push_back({"progressive.jpg", jpeg(300, 200, Jpeg::Progressive420, 3), ""});
  files.push_back({"baseline444.jpg", jpeg(257, 333, Jpeg::S444, 4), ""});
  std::vector<uint8_t> truncated = jpeg(375, 500, Jpeg::S420, 5);
  truncated.resize(truncated.size() / 2);
  files.push_back({"truncated.jpg", truncated, ""});
  files.push_back({"empty.jpg", {}, ""});
  files.push_back({"cmyk.jpg", jpeg(160, 120, Jpeg::Cmyk, 6), ""});
  files.push_back({"grey.jpg", jpeg(123, 77, Jpeg::Grey, 7), ""});
  files.push_back({"unreadable.jpg", {}, "Permission denied"});
  files.push_back({"sub411.jpg", jpeg(240, 320, Jpeg::S411, 8), ""});
  files.push_back({"baseline422.jpg", jpeg(480, 640, Jpeg::S422, 9), ""});
  MemorySource src(files);
  const int64_t batch = 16, count = static_cast<int64_t>(files.size());
  BatchRows rows;
  const std::vector<uint8_t> out = run(src, opt, batch, count, rows);
  const std::size_t sample = 3 * 224 * 224;

  const std::set<int64_t> bad = {1, 5, 6, 9};
  std::set<int64_t> marked;
  for (const auto& [row, reason] : rows.bad) {
    marked.insert(row);
    EXPECT_FALSE(reason.empty()) << files[static_cast<std::size_t>(row)].key;
    std::printf("[ image input ] bad %s: %s\n", files[static_cast<std::size_t>(row)].key.c_str(), reason.c_str());
  }
  EXPECT_EQ(marked, bad);
  for (const auto& [row, reason] : rows.bad)
    if (row == 9) EXPECT_NE(reason.find("Permission denied"), std::string::npos) << reason;
  for (int64_t r = 0; r < batch; ++r) {
    const uint8_t* got = out.data() + static_cast<std::size_t>(r) * sample;
    const std::string& key = r < count ? files[static_cast<std::size_t>(r)].key : std::string("padding");
    EXPECT_EQ(static_cast<int>(rows.status[static_cast<std::size_t>(r)]), bad.count(r) ? int{kRowBad} : int{kRowOk}) << key;
    if (r >= count || bad.count(r)) {
      EXPECT_EQ(std::count(got, got + sample, 0), static_cast<std::ptrdiff_t>(sample)) << key << ": not zeros";
      continue;
    }
    const std::vector<uint8_t> ref = reference(files[static_cast<std::size_t>(r)].bytes);
    const DiffStats d = diff_stats(got, ref.data(), sample, kOverLevels);
    std::printf("[ image input ] %-16s vs CPU path: max %3d  mean %.3f\n", key.c_str(), d.max, d.mean);
    // Files the CPU decodes on every backend come out exactly as the CPU path has them.
    if (r == 2 || r == 3 || r == 7) EXPECT_EQ(d.max, 0) << key;
    EXPECT_LE(d.mean, kMeanBound) << key;
    EXPECT_LE(d.over, kOverBound) << key;
    ImageHeader ih;
    std::string error;
    ASSERT_TRUE(parse_image_header(files[static_cast<std::size_t>(r)].bytes.data(),
                                   files[static_cast<std::size_t>(r)].bytes.size(), &ih, &error));
    EXPECT_EQ(rows.orig_hw[static_cast<std::size_t>(2 * r)], ih.height) << key;
    EXPECT_EQ(rows.orig_hw[static_cast<std::size_t>(2 * r + 1)], ih.width) << key;
  }
}

// Whether nvJPEG rejects the batch (then its JPEGs are decoded on the CPU) or its header check
// turns the file away first, the undecodable file is the batch's only bad row.
TEST_P(GpuImageInputTest, UndecodableJpegAmongGoodOnesIsTheOnlyBadRow) {
  GpuImageOptions opt;
  opt.backend = GetParam();
  std::vector<MemorySource::File> files;
  for (uint32_t i = 0; i < 6; ++i)
    files.push_back({str("ok", i, ".jpg"), encode_jpeg(natural_rgb(300 + 10 * i, 400, 20 + i), 300 + 10 * i, 400, Jpeg::S420), ""});
  files.insert(files.begin() + 3, MemorySource::File{"no-table.jpg", undefined_huffman_table(files[0].bytes), ""});
  MemorySource src(files);
  BatchRows rows;
  const std::vector<uint8_t> out = run(src, opt, 8, 7, rows);
  ASSERT_EQ(rows.bad.size(), 1u);
  EXPECT_EQ(rows.bad[0].first, 3);
  std::printf("[ image input ] bad no-table.jpg: %s\n", rows.bad[0].second.c_str());
  const std::size_t sample = 3 * 224 * 224;
  for (int64_t r = 0; r < 7; ++r) {
    const uint8_t* got = out.data() + static_cast<std::size_t>(r) * sample;
    if (r == 3) {
      EXPECT_EQ(std::count(got, got + sample, 0), static_cast<std::ptrdiff_t>(sample));
      continue;
    }
    const DiffStats d = diff_stats(got, reference(files[static_cast<std::size_t>(r)].bytes).data(), sample, kOverLevels);
    EXPECT_LE(d.mean, kMeanBound) << files[static_cast<std::size_t>(r)].key;
    EXPECT_LE(d.over, kOverBound) << files[static_cast<std::size_t>(r)].key;
  }
}

// DETR's resize (--resize-shortest N --max-size M): each image top left at the size the rule gives,
// padded bottom and right with the pad colour; an image whose size passes the input is a bad row,
// turned away from its header before any decoding.
TEST_P(GpuImageInputTest, ShortestEdgePadsBottomRightAndTurnsAwayWhatDoesNotFit) {
  GpuImageOptions opt;
  opt.backend = GetParam();
  spec_ = PreprocessSpec{};
  spec_.mode = PreprocessSpec::Resize::ShortestEdge;
  spec_.resize_short = 160;
  spec_.max_size = 300;
  spec_.out_h = spec_.out_w = 224;
  spec_.pad = {124, 116, 104};
  std::vector<MemorySource::File> files;
  auto jpeg = [](int h, int w, uint32_t seed) { return encode_jpeg(natural_rgb(h, w, seed), h, w, Jpeg::S420); };
  files.push_back({"landscape.jpg", jpeg(375, 500, 1), ""});           // 160 x 213
  files.push_back({"portrait.jpg", jpeg(500, 375, 2), ""});            // 213 x 160
  files.push_back({"strip.jpg", jpeg(100, 600, 3), ""});               // capped: 50 x 300, too wide
  files.push_back({"small.png", encode_png(natural_rgb(90, 120, 4), 90, 120), ""});  // enlarged: 160 x 213
  files.push_back({"wide.jpg", jpeg(200, 300, 5), ""});                // 160 x 240, too wide
  MemorySource src(files);
  BatchRows rows;
  const int64_t count = static_cast<int64_t>(files.size());
  const std::vector<uint8_t> out = run(src, opt, 6, count, rows);
  std::set<int64_t> marked;
  for (const auto& [row, reason] : rows.bad) {
    marked.insert(row);
    EXPECT_NE(reason.find("larger than the model's input 224x224"), std::string::npos) << reason;
  }
  EXPECT_EQ(marked, (std::set<int64_t>{2, 4}));
  const std::size_t plane = 224 * 224, sample = 3 * plane;
  for (int64_t r = 0; r < count; ++r) {
    if (marked.count(r)) continue;
    const std::string& key = files[static_cast<std::size_t>(r)].key;
    const uint8_t* got = out.data() + static_cast<std::size_t>(r) * sample;
    const std::vector<uint8_t> ref = reference(files[static_cast<std::size_t>(r)].bytes);
    const DiffStats d = diff_stats(got, ref.data(), sample, kOverLevels);
    std::printf("[ image input ] shortest edge %-14s vs CPU path: max %3d  mean %.3f\n", key.c_str(), d.max, d.mean);
    EXPECT_LE(d.mean, kMeanBound) << key;
    EXPECT_LE(d.over, kOverBound) << key;
    ImageHeader ih;
    std::string error;
    ASSERT_TRUE(parse_image_header(files[static_cast<std::size_t>(r)].bytes.data(),
                                   files[static_cast<std::size_t>(r)].bytes.size(), &ih, &error));
    const ResizePlan p = plan_resize(ih.height, ih.width, spec_);
    ASSERT_EQ(p.offset_y, 0);
    ASSERT_EQ(p.offset_x, 0);
    int wrong_pad = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 224; ++y)
        for (int x = 0; x < 224; ++x)
          if ((y >= p.resized_h || x >= p.resized_w) &&
              got[static_cast<std::size_t>(c) * plane + static_cast<std::size_t>(y) * 224 + static_cast<std::size_t>(x)] !=
                  spec_.pad[static_cast<std::size_t>(c)])
            ++wrong_pad;
    EXPECT_EQ(wrong_pad, 0) << key;
  }
}

TEST_P(GpuImageInputTest, FailOnBadNamesTheSample) {
  GpuImageOptions opt;
  opt.backend = GetParam();
  opt.fail_on_bad = true;
  MemorySource src({{"fine.jpg", encode_jpeg(natural_rgb(64, 64, 1), 64, 64, Jpeg::S420), ""},
                    {"broken/cat.jpg", std::vector<uint8_t>(100, 0xAB), ""}});
  BatchRows rows;
  try {
    run(src, opt, 2, 2, rows);
    FAIL() << "a bad sample with fail_on_bad did not stop the batch";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("broken/cat.jpg"), std::string::npos) << e.what();
  }
}

// Batches decoded ahead (decode threads, each context on its own stream) or by the driver on the
// copy stream, with the driver running ahead of the device (no wait between batches), come out
// byte for byte as batches decoded one at a time with the device idle in between: the same decoder
// and kernel on the same bytes, so any difference is a batch decoded into an arena still being
// read, a missed event, or a batch given another batch's pixels.  The slots are filled out of order,
// as reader threads do; rows and their bad-file reasons must match too.
TEST_P(GpuImageInputTest, BatchesDecodedAheadMatchOneAtATime) {
  const int64_t batch = 6, batches = 5;
  std::vector<MemorySource::File> files;
  const Jpeg kinds[] = {Jpeg::S420, Jpeg::S444, Jpeg::S422, Jpeg::Grey, Jpeg::S420};
  for (int64_t i = 0; i < batch * batches; ++i) {
    const int h = 180 + static_cast<int>((i * 37) % 200), w = 200 + static_cast<int>((i * 53) % 260);
    const uint32_t seed = 100 + static_cast<uint32_t>(i);
    if (i == 8) files.push_back({str("f", i, ".png"), encode_png(natural_rgb(h, w, seed), h, w), ""});
    else if (i == 15) files.push_back({str("f", i, ".jpg"), std::vector<uint8_t>(700, 0x3C), ""});
    else files.push_back({str("f", i, ".jpg"), encode_jpeg(natural_rgb(h, w, seed), h, w, kinds[i % 5]), ""});
  }
  // One batch of the five holds a JPEG nvJPEG cannot decode (rejected, or turned away by the header check).
  files[20].bytes = undefined_huffman_table(files[21].bytes);
  const std::size_t sample = 3 * 224 * 224, bytes = sample * static_cast<std::size_t>(batch);

  // The reference: each batch alone, decoded on the driver thread, the device idle before and after.
  GpuImageOptions ref_opt;
  ref_opt.backend = GetParam();
  ref_opt.decode_threads = 0;
  std::vector<std::vector<uint8_t>> want(static_cast<std::size_t>(batches));
  std::vector<BatchRows> want_rows(static_cast<std::size_t>(batches));
  for (int64_t b = 0; b < batches; ++b) {
    MemorySource one(std::vector<MemorySource::File>(files.begin() + b * batch, files.begin() + (b + 1) * batch));
    want[static_cast<std::size_t>(b)] = run(one, ref_opt, batch, batch, want_rows[static_cast<std::size_t>(b)]);
  }

  for (const auto& [threads, own_handles] : {std::pair{0, false}, std::pair{2, true}, std::pair{3, true}, std::pair{2, false}}) {
    SCOPED_TRACE(str("decode_threads ", threads, own_handles ? ", own handles" : ", one handle"));
    GpuImageOptions opt;
    opt.backend = GetParam();
    opt.decode_threads = threads;
    opt.handle_per_context = own_handles;
    MemorySource src(files);
    std::unique_ptr<BatchInput> input = make_gpu_image_input(src, spec_, batch, *device_, opt);
    std::vector<void*> slots;
    std::vector<cuda::DeviceBuffer> engine_inputs;
    std::vector<BatchRows> rows(static_cast<std::size_t>(batches));
    for (int64_t b = 0; b < batches; ++b) {
      slots.push_back(device_->pinned_alloc(input->slot_bytes()));
      engine_inputs.emplace_back(bytes);
      CUDA_CHECK(cudaMemset(engine_inputs.back().get(), 0x5A, bytes));
      rows[static_cast<std::size_t>(b)].reset(batch, true);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t b = 0; b < batches; ++b) input->begin_batch(b, slots[static_cast<std::size_t>(b)]);
    // Filled last to first, on threads of their own.
    std::vector<std::thread> readers;
    for (int64_t b = batches - 1; b >= 0; --b)
      readers.emplace_back([&, b] {
        input->fill(b * batch, batch, slots[static_cast<std::size_t>(b)], rows[static_cast<std::size_t>(b)]);
      });
    for (auto& t : readers) t.join();
    for (int64_t b = 0; b < batches; ++b) {
      const std::size_t k = static_cast<std::size_t>(b);
      input->enqueue_copy(slots[k], rows[k], engine_inputs[k].get(), *device_);
      input->enqueue_decode(slots[k], rows[k], engine_inputs[k].get(), *device_);
    }
    device_->synchronize();
    input->quiesce();
    for (int64_t b = 0; b < batches; ++b) {
      const std::size_t k = static_cast<std::size_t>(b);
      std::vector<uint8_t> got(bytes);
      CUDA_CHECK(cudaMemcpy(got.data(), engine_inputs[k].get(), bytes, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < batch; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * sample;
        int64_t differ = 0;
        for (std::size_t i = o; i < o + sample; ++i) differ += got[i] != want[k][i];
        EXPECT_EQ(differ, 0) << "batch " << b << " row " << r << " (" << files[static_cast<std::size_t>(b * batch + r)].key
                             << "): values differing from the batch decoded alone";
      }
      EXPECT_EQ(rows[k].status, want_rows[k].status) << "batch " << b;
      EXPECT_EQ(rows[k].bad, want_rows[k].bad) << "batch " << b;
      EXPECT_EQ(rows[k].orig_hw, want_rows[k].orig_hw) << "batch " << b;
    }
    for (void* s : slots) device_->pinned_free(s);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuImageInputTest,
                         ::testing::Values(GpuImageOptions::Backend::Auto, GpuImageOptions::Backend::Hybrid),
                         [](const auto& info) {
                           return std::string(info.param == GpuImageOptions::Backend::Auto ? "auto" : "hybrid");
                         });

}  // namespace
