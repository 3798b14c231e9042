// The CPU image BatchInput over an encoded source of in-memory files: good rows are decoded and
// preprocessed into the slot with their sizes; bad ones (unreadable, empty, truncated, corrupt,
// not an image) are zeros with a reason, or end the job under --on-bad-sample fail; and the image
// options resolve against the model's input with clear errors.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <thread>

#include "core/error.h"
#include "image/image_input.h"
#include "test_image_util.h"

using namespace sluice;
using namespace sluice_test;

namespace {

constexpr int kOut = 24;

PreprocessSpec crop_spec() {
  PreprocessSpec s;
  s.mode = PreprocessSpec::Resize::ShorterSide;
  s.resize_short = 28;
  s.crop_h = s.crop_w = s.out_h = s.out_w = kOut;
  return s;
}

// What the input should put in a good row: the same decode and preprocessing, done directly.
Bytes expected_row(const Bytes& file, const PreprocessSpec& spec) {
  Bytes rgb;
  int h = 0, w = 0;
  std::string error;
  EXPECT_TRUE(decode_image_rgb(file.data(), file.size(), rgb, &h, &w, &error)) << error;
  Bytes out(static_cast<std::size_t>(3 * spec.out_h * spec.out_w));
  preprocess_rgb(rgb.data(), plan_resize(h, w, spec), out.data());
  return out;
}

struct Files {
  std::vector<Bytes> blobs;
  Files() {
    const Bytes jpeg = encode_jpeg(test_picture(30, 45), 30, 45, TJPF_RGB);
    blobs.push_back(jpeg);                                                       // 0 ok
    blobs.push_back(png_rgb(test_picture(50, 33), 50, 33));                      // 1 ok (portrait PNG)
    blobs.push_back(Bytes{});                                                    // 2 empty
    blobs.push_back(Bytes(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2)));  // 3 truncated
    blobs.push_back(Bytes{'#', '!', '/', 'b', 'i', 'n', '/', 's', 'h'});         // 4 not an image
    blobs.push_back(BlobSource::unreadable());                                   // 5 vanished
    blobs.push_back(encode_jpeg(test_picture(40, 40, 1), 40, 40, TJPF_GRAY, 90, true));  // 6 ok (grey, progressive)
  }
};

}  // namespace

TEST(ImageInput, DecodesGoodRowsAndMarksBadOnes) {
  Files f;
  BlobSource src(f.blobs);
  const int64_t batch = 8;  // one more row than samples: a short last batch
  auto input = make_cpu_image_input(src, crop_spec(), batch, ImageInputOptions{});
  const std::size_t row = 3 * kOut * kOut;
  ASSERT_EQ(input->slot_bytes(), static_cast<std::size_t>(batch) * row);
  EXPECT_TRUE(input->has_sizes());
  Bytes slot(input->slot_bytes(), 0xAB);
  BatchRows rows;
  rows.reset(batch, true);
  input->fill(0, 7, slot.data(), rows);

  const int ok_rows[] = {0, 1, 6};
  for (int r : ok_rows) {
    EXPECT_EQ(rows.status[static_cast<std::size_t>(r)], kRowOk) << r;
    const Bytes want = expected_row(f.blobs[static_cast<std::size_t>(r)], crop_spec());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), slot.begin() + static_cast<std::ptrdiff_t>(r * row))) << "row " << r;
  }
  EXPECT_EQ(rows.orig_hw[0], 30);
  EXPECT_EQ(rows.orig_hw[1], 45);
  EXPECT_EQ(rows.orig_hw[2], 50);
  EXPECT_EQ(rows.orig_hw[3], 33);
  EXPECT_EQ(rows.orig_hw[12], 40);

  std::map<int64_t, std::string> bad(rows.bad.begin(), rows.bad.end());
  EXPECT_EQ(bad.size(), 4u);
  EXPECT_EQ(bad[2], "empty file");
  EXPECT_EQ(bad[3], "truncated JPEG: no end-of-image marker");
  EXPECT_EQ(bad[4], "not a JPEG or PNG file");
  EXPECT_EQ(bad[5], "cannot read: No such file or directory");
  for (int r : {2, 3, 4, 5, 7}) {
    EXPECT_EQ(rows.status[static_cast<std::size_t>(r)], r == 7 ? kRowOk : kRowBad) << r;
    EXPECT_TRUE(std::all_of(slot.begin() + static_cast<std::ptrdiff_t>(r * row),
                            slot.begin() + static_cast<std::ptrdiff_t>((r + 1) * row), [](uint8_t v) { return v == 0; }))
        << "row " << r << " is not zeros";
  }
  EXPECT_GT(input->cpu_decode_seconds(), 0.0);
}

TEST(ImageInput, FailModeNamesTheKeyAndTheReason) {
  Files f;
  BlobSource src(f.blobs);
  ImageInputOptions o;
  o.fail_on_bad = true;
  auto input = make_cpu_image_input(src, crop_spec(), 4, o);
  Bytes slot(input->slot_bytes());
  BatchRows rows;
  rows.reset(4, true);
  input->fill(0, 2, slot.data(), rows);  // good rows only: no error
  rows.reset(4, true);
  try {
    input->fill(2, 4, slot.data(), rows);
    FAIL() << "no error for a bad sample";
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), kExitBadInput);
    EXPECT_NE(std::string(e.what()).find("bad sample 'img/2.jpg' (index 2): empty file"), std::string::npos) << e.what();
  }
}

TEST(ImageInput, ConcurrentFillsGiveTheSameBytes) {
  // Reader threads fill different slots at once, each with its own scratch.
  std::vector<Bytes> blobs;
  for (int i = 0; i < 24; ++i) blobs.push_back(encode_jpeg(test_picture(30 + i, 50 - i), 30 + i, 50 - i, TJPF_RGB));
  BlobSource src(blobs);
  auto input = make_cpu_image_input(src, crop_spec(), 4, ImageInputOptions{});
  std::vector<Bytes> slots(6, Bytes(input->slot_bytes()));
  std::vector<BatchRows> rows(6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int b = t; b < 6; b += 3) {
        rows[static_cast<std::size_t>(b)].reset(4, true);
        input->fill(4 * b, 4, slots[static_cast<std::size_t>(b)].data(), rows[static_cast<std::size_t>(b)]);
      }
    });
  for (auto& t : threads) t.join();
  const std::size_t row = 3 * kOut * kOut;
  for (int i = 0; i < 24; ++i) {
    const Bytes want = expected_row(blobs[static_cast<std::size_t>(i)], crop_spec());
    const Bytes& slot = slots[static_cast<std::size_t>(i / 4)];
    EXPECT_TRUE(std::equal(want.begin(), want.end(), slot.begin() + static_cast<std::ptrdiff_t>((i % 4) * row))) << i;
  }
}

TEST(ImageInput, EnqueueCopyMovesTheSlotToTheEngineInput) {
  std::vector<Bytes> blobs = {encode_jpeg(test_picture(30, 30), 30, 30, TJPF_RGB)};
  BlobSource src(blobs);
  auto device = create_host_device();
  auto input = make_image_input(src, crop_spec(), 2, *device, ImageInputOptions{});
  Bytes slot(input->slot_bytes()), engine(input->slot_bytes(), 0x11);
  BatchRows rows;
  rows.reset(2, true);
  input->fill(0, 1, slot.data(), rows);
  input->enqueue_copy(slot.data(), rows, engine.data(), *device);
  input->enqueue_decode(slot.data(), rows, engine.data(), *device);
  device->synchronize();
  EXPECT_EQ(engine, slot);
}

// ---- options ---------------------------------------------------------------------------------------

namespace {

ImageJobOptions opts(std::string resize, std::string crop, bool letterbox = false) {
  ImageJobOptions o;
  o.resize = std::move(resize);
  o.center_crop = std::move(crop);
  o.letterbox = letterbox;
  return o;
}

template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ImageOptions, ResolveAgainstTheModelInput) {
  const Shape fixed = {-1, 3, 224, 224};
  PreprocessSpec s = resolve_preprocess(opts("256", "224"), fixed, "m.onnx");
  EXPECT_EQ(s.mode, PreprocessSpec::Resize::ShorterSide);
  EXPECT_EQ(s.resize_short, 256);
  EXPECT_EQ(s.crop_h, 224);
  EXPECT_EQ(s.out_w, 224);
  s = resolve_preprocess(opts("", ""), fixed, "m.onnx");  // no options: exact resize to the model's size
  EXPECT_EQ(s.mode, PreprocessSpec::Resize::Exact);
  EXPECT_EQ(s.out_h, 224);
  EXPECT_EQ(s.crop_h, 0);
  s = resolve_preprocess(opts("", "", true), fixed, "m.onnx");
  EXPECT_EQ(s.mode, PreprocessSpec::Resize::Letterbox);
  // A dynamic model takes its size from the options.
  s = resolve_preprocess(opts("300x200", ""), {-1, 3, -1, -1}, "m.onnx");
  EXPECT_EQ(s.out_h, 300);
  EXPECT_EQ(s.out_w, 200);
  s = resolve_preprocess(opts("", "64x32"), {-1, -1, -1, 32}, "m.onnx");
  EXPECT_EQ(s.mode, PreprocessSpec::Resize::None);
  EXPECT_EQ(s.out_h, 64);
}

TEST(ImageOptions, ClearErrorsWithHints) {
  const Shape fixed = {-1, 3, 224, 224};
  EXPECT_EQ(error_of<InputError>([&] { resolve_preprocess(opts("256", "200"), fixed, "r50.onnx"); }),
            "--center-crop 200 makes 200x200 images but the model r50.onnx takes 224x224 (input [-1,3,224,224]); "
            "use --center-crop 224x224");
  EXPECT_NE(error_of<InputError>([&] { resolve_preprocess(opts("256x256", ""), fixed, "r50.onnx"); })
                .find("(or --resize S --center-crop H[xW])"), std::string::npos);
  EXPECT_NE(error_of<InputError>([&] { resolve_preprocess(opts("", ""), {-1, 3, -1, -1}, "d.onnx"); })
                .find("dynamic image size"), std::string::npos);
  EXPECT_NE(error_of<InputError>([&] { resolve_preprocess(opts("", ""), {-1, 224, 224, 3}, "nhwc.onnx"); })
                .find("uint8 [B, 3, H, W]"), std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { check_image_options(opts("256", "")); }).find("add --center-crop"), std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { check_image_options(opts("25x", "")); }).find("expected a size"), std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { check_image_options(opts("", "224", true)); }).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([&] { check_image_options(opts("640", "", true)); }).find("give --resize HxW"),
            std::string::npos);
  ImageJobOptions bad = opts("", "");
  bad.on_bad_sample = "ignore";
  EXPECT_NE(error_of<UsageError>([&] { check_image_options(bad); }).find("not one of skip, fail"), std::string::npos);
}
