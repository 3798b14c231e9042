// The inputs --input takes besides synthetic data: image folders, globs and path lists (encoded
// sources: keys, order, sizes, bytes, fingerprint, a file vanishing mid-run), .npy arrays, HDF5
// with --input-keys and --samples, and how open_input tells the kinds apart.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/npy.h"
#include "io/source.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

namespace fs = std::filesystem;

// Writes `bytes` to `path`, creating its folders.
void put(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// File contents that say which file they are (the sources do not decode, so any bytes do).
std::string content_of(const std::string& rel) { return "bytes of " + rel + std::string(rel.size() * 3, '#'); }

std::vector<std::string> keys_of(const Source& s) {
  std::vector<std::string> k;
  for (int64_t i = 0; i < s.size(); ++i) k.push_back(s.key(i));
  return k;
}

// Every sample's bytes through read_encoded, checked against the file it names.
void expect_bytes_match(Source& s, const std::string& root) {
  const int64_t n = s.size();
  std::vector<uint8_t> area(s.max_encoded_bytes(n));
  std::vector<EncodedSample> out(static_cast<std::size_t>(n));
  s.read_encoded(0, n, area.data(), area.size(), out.data());
  for (int64_t i = 0; i < n; ++i) {
    const EncodedSample& e = out[static_cast<std::size_t>(i)];
    ASSERT_TRUE(e.error.empty()) << e.error;
    const std::string want = content_of(s.key(i));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(area.data() + e.offset), e.size), want) << s.key(i) << " in " << root;
  }
}


// A folder with images at several depths, upper-case extensions, non-images and hidden files.
std::string make_image_tree(const TempDir& dir) {
  const std::string root = dir.file("imgs");
  for (const char* rel : {"b/2.png", "b/10.JPG", "a.jpg", "a/x.jpeg", "a/deep/er/y.png", "A.png", "z.Png"})
    put(root + "/" + rel, content_of(rel));
  put(root + "/notes.txt", "text");
  put(root + "/b/labels.json", "{}");
  put(root + "/.hidden.jpg", "x");
  put(root + "/.cache/c.jpg", "x");
  return root;
}

}  // namespace

TEST(FolderSource, WalksRecursivelyKeysAreRelativePathsSortedBytewise) {
  TempDir dir;
  const std::string root = make_image_tree(dir);
  auto s = open_folder_source(root);
  EXPECT_TRUE(s->encoded());
  // Bytewise: upper case before lower case, '.' (0x2e) before '/' (0x2f).
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"A.png", "a.jpg", "a/deep/er/y.png", "a/x.jpeg", "b/10.JPG", "b/2.png",
                                                   "z.Png"}));
  EXPECT_EQ(s->key_bytes(), std::string("a/deep/er/y.png").size());
  // notes.txt, labels.json, .hidden.jpg and the .cache folder are not samples.
  EXPECT_NE(s->describe().find("7 files (4 other files ignored)"), std::string::npos) << s->describe();
  expect_bytes_match(*s, root);
}

TEST(FolderSource, MaxEncodedBytesIsTheSumOfTheLargestSamples) {
  TempDir dir;
  const std::string root = dir.file("sizes");
  const std::vector<std::size_t> sizes{5, 300, 17, 42, 1000, 8};
  for (std::size_t i = 0; i < sizes.size(); ++i) put(root + "/" + std::to_string(i) + ".jpg", std::string(sizes[i], 'x'));
  auto s = open_folder_source(root);
  EXPECT_EQ(s->max_encoded_bytes(1), 1000u);
  EXPECT_EQ(s->max_encoded_bytes(2), 1300u);
  EXPECT_EQ(s->max_encoded_bytes(3), 1342u);
  EXPECT_EQ(s->max_encoded_bytes(100), 1372u);
  // Samples 1..4 packed one after another.
  std::vector<uint8_t> area(s->max_encoded_bytes(4));
  std::vector<EncodedSample> out(4);
  s->read_encoded(1, 4, area.data(), area.size(), out.data());
  std::size_t offset = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(out[k].offset, offset);
    EXPECT_EQ(out[k].size, sizes[k + 1]);
    offset += out[k].size;
  }
}

TEST(FolderSource, SamplesKeepsTheFirstNInKeyOrder) {
  TempDir dir;
  const std::string root = make_image_tree(dir);
  auto s = open_folder_source(root, 3);
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"A.png", "a.jpg", "a/deep/er/y.png"}));
  InputOptions o;
  o.path = root;
  o.samples = 2;
  EXPECT_EQ(open_input(o)->size(), 2);
}

TEST(FolderSource, EmptyOrMissingFoldersAndUnreadableFilesFailAtOpen) {
  TempDir dir;
  put(dir.file("empty/readme.txt"), "no images here");
  std::string e = input_error_of([&] { open_folder_source(dir.file("empty")); });
  EXPECT_NE(e.find("no image files (.jpg, .jpeg, .png)"), std::string::npos) << e;
  EXPECT_NE(e.find("(1 other files)"), std::string::npos) << e;
  e = input_error_of([&] { open_folder_source(dir.file("nowhere")); });
  EXPECT_NE(e.find("no such folder"), std::string::npos) << e;
  put(dir.file("links/ok.jpg"), "x");
  ASSERT_EQ(::symlink("missing-target.jpg", dir.file("links/dangling.jpg").c_str()), 0);
  e = input_error_of([&] { open_folder_source(dir.file("links")); });
  EXPECT_NE(e.find("dangling.jpg is a link to nothing"), std::string::npos) << e;
  if (::geteuid() != 0) {  // root reads everything
    put(dir.file("locked/a.jpg"), "x");
    ::chmod(dir.file("locked/a.jpg").c_str(), 0);
    e = input_error_of([&] { open_folder_source(dir.file("locked")); });
    EXPECT_NE(e.find("cannot be read"), std::string::npos) << e;
  }
}

TEST(FolderSource, FollowsLinkedFoldersOnceEvenInALoop) {
  TempDir dir;
  put(dir.file("data/real/a.jpg"), content_of("real/a.jpg"));
  ASSERT_EQ(::symlink("..", dir.file("data/real/up").c_str()), 0);  // a loop back to data/
  auto s = open_folder_source(dir.file("data"));
  EXPECT_EQ(keys_of(*s), std::vector<std::string>{"real/a.jpg"});
}

TEST(FolderSource, AFileThatVanishesOrChangesMidRunIsABadSampleNotAFailure) {
  TempDir dir;
  const std::string root = make_image_tree(dir);
  auto s = open_folder_source(root);
  ASSERT_EQ(s->key(1), "a.jpg");
  ASSERT_EQ(s->key(4), "b/10.JPG");
  fs::remove(root + "/a.jpg");
  put(root + "/b/10.JPG", "grew: " + content_of("b/10.JPG"));
  std::vector<uint8_t> area(s->max_encoded_bytes(7));
  std::vector<EncodedSample> out(7);
  s->read_encoded(0, 7, area.data(), area.size(), out.data());
  EXPECT_NE(out[1].error.find("a.jpg: cannot open: No such file"), std::string::npos) << out[1].error;
  EXPECT_EQ(out[1].size, 0u);
  EXPECT_NE(out[4].error.find("changed since the job started"), std::string::npos) << out[4].error;
  for (std::size_t k : {0u, 2u, 3u, 5u, 6u}) {
    ASSERT_TRUE(out[k].error.empty()) << out[k].error;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(area.data() + out[k].offset), out[k].size), content_of(s->key(static_cast<int64_t>(k))));
  }
}

TEST(FolderSource, ConcurrentReadersGetTheirOwnSamples) {
  TempDir dir;
  const std::string root = dir.file("many");
  for (int i = 0; i < 40; ++i) put(root + "/" + std::to_string(1000 + i) + ".png", content_of(std::to_string(1000 + i) + ".png"));
  auto s = open_folder_source(root);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint8_t> area(s->max_encoded_bytes(5));
      std::vector<EncodedSample> out(5);
      for (int rep = 0; rep < 30; ++rep) {
        const int64_t first = (t * 7 + rep * 3) % 36;
        s->read_encoded(first, 5, area.data(), area.size(), out.data());
        for (int64_t k = 0; k < 5; ++k)
          bad[static_cast<std::size_t>(t)] += std::string(reinterpret_cast<const char*>(area.data() + out[k].offset), out[k].size) !=
                                              content_of(s->key(first + k));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, (std::vector<int>{0, 0, 0, 0}));
}

TEST(FolderSource, FingerprintChangesWithTheListTheSizesAndTheSampledBytes) {
  TempDir dir;
  const std::string root = dir.file("fp");
  for (int i = 0; i < 9; ++i) put(root + "/" + std::to_string(i) + ".jpg", std::string(20 + i, 'a'));
  const std::string base = open_folder_source(root)->fingerprint();
  EXPECT_EQ(open_folder_source(root)->fingerprint(), base);  // deterministic
  EXPECT_NE(base.find("folder "), std::string::npos);
  put(root + "/4.jpg", std::string(24, 'b'));  // the middle file, same size, other bytes
  const std::string middle = open_folder_source(root)->fingerprint();
  EXPECT_NE(middle, base);
  put(root + "/2.jpg", std::string(23, 'a'));  // an unsampled file's size
  const std::string size = open_folder_source(root)->fingerprint();
  EXPECT_NE(size, middle);
  put(root + "/9.jpg", "new");  // one more file
  EXPECT_NE(open_folder_source(root)->fingerprint(), size);
  EXPECT_NE(open_folder_source(root, 5)->fingerprint(), open_folder_source(root, 6)->fingerprint());
}

TEST(GlobSource, MatchesPerComponentKeysRelativeToTheFixedPrefix) {
  TempDir dir;
  for (const char* rel : {"data/cats/img_1.jpg", "data/cats/img_2.jpg", "data/cats/other.jpg", "data/dogs/img_1.jpg",
                          "data/dogs/deep/img_3.jpg", "data/img_0.jpg", "data/.hid/img_9.jpg"})
    put(dir.file(rel), content_of(rel));
  auto s = open_glob_source(dir.file("data/*/img_*.jpg"));
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"cats/img_1.jpg", "cats/img_2.jpg", "dogs/img_1.jpg"}));
  auto deep = open_glob_source(dir.file("data/**/img_*.jpg"));
  EXPECT_EQ(keys_of(*deep), (std::vector<std::string>{"cats/img_1.jpg", "cats/img_2.jpg", "dogs/deep/img_3.jpg",
                                                      "dogs/img_1.jpg", "img_0.jpg"}));
  // A folder reached both as the literal 'deep' and inside '**' is walked for both.
  put(dir.file("data/dogs/deep/deep/img_4.jpg"), content_of("dogs/deep/deep/img_4.jpg"));
  EXPECT_EQ(keys_of(*open_glob_source(dir.file("data/**/deep/img_*.jpg"))),
            (std::vector<std::string>{"dogs/deep/deep/img_4.jpg", "dogs/deep/img_3.jpg"}));
  fs::remove(dir.file("data/dogs/deep/deep/img_4.jpg"));
  auto all = open_glob_source(dir.file("data/**"));
  EXPECT_EQ(all->size(), 6);
  auto one = open_glob_source(dir.file("data/[cd]*/img_?.jpg"), 1);
  EXPECT_EQ(keys_of(*one), std::vector<std::string>{"cats/img_1.jpg"});
  std::string e = input_error_of([&] { open_glob_source(dir.file("data/*/nothing_*.png")); });
  EXPECT_NE(e.find("matches no image files"), std::string::npos) << e;
}

TEST(ListSource, PathsRelativeToTheListInItsOrderWithComments) {
  TempDir dir;
  for (const char* rel : {"imgs/b.jpg", "imgs/a.png", "other/c.jpeg"}) put(dir.file(rel), content_of(std::string("../") + rel));
  put(dir.file("lists/abs.jpg"), content_of(dir.file("lists/abs.jpg")));
  put(dir.file("lists/files.txt"), "# the order is the list's\n../imgs/b.jpg\n\n  ../imgs/a.png  \r\n# more\n" +
                                       dir.file("lists/abs.jpg") + "\n../other/c.jpeg\n");
  auto s = open_list_source(dir.file("lists/files.txt"));
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>{"../imgs/b.jpg", "../imgs/a.png", dir.file("lists/abs.jpg"),
                                                   "../other/c.jpeg"}));
  expect_bytes_match(*s, dir.path());
  EXPECT_EQ(open_list_source(dir.file("lists/files.txt"), 2)->size(), 2);
}

TEST(ListSource, MissingFilesAndEmptyListsFailAtOpenNamingThem) {
  TempDir dir;
  put(dir.file("ok.jpg"), "x");
  std::string list = "ok.jpg\n";
  for (int i = 0; i < 8; ++i) list += "gone" + std::to_string(i) + ".jpg\n";
  put(dir.file("l.lst"), list);
  std::string e = input_error_of([&] { open_list_source(dir.file("l.lst")); });
  EXPECT_NE(e.find("8 of its 9 files cannot be read"), std::string::npos) << e;
  EXPECT_NE(e.find("gone0.jpg does not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("; and 3 more"), std::string::npos) << e;
  put(dir.file("empty.txt"), "# nothing\n\n");
  e = input_error_of([&] { open_list_source(dir.file("empty.txt")); });
  EXPECT_NE(e.find("names no files"), std::string::npos) << e;
}

TEST(NpySource, ReadsRowsByPreadAndKeepsTheFirstN) {
  TempDir dir;
  std::vector<float> data(7 * 2 * 3);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  write_npy(dir.file("x.npy"), DType::F32, {7, 2, 3}, data.data());
  auto s = open_npy_source(dir.file("x.npy"));
  EXPECT_FALSE(s->encoded());
  EXPECT_EQ(s->size(), 7);
  EXPECT_EQ(s->sample_shape(), (Shape{2, 3}));
  EXPECT_EQ(s->key(6), "6");
  std::vector<float> got(12);
  s->read(4, 2, got.data());
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], data[24 + i]);
  EXPECT_EQ(open_npy_source(dir.file("x.npy"), 5)->size(), 5);
  EXPECT_NE(open_npy_source(dir.file("x.npy"), 5)->fingerprint(), s->fingerprint());
  std::vector<uint8_t> u8(4 * 9, 3);
  write_npy(dir.file("u.npy"), DType::U8, {4, 9}, u8.data());
  EXPECT_EQ(open_npy_source(dir.file("u.npy"))->dtype(), DType::U8);
}

TEST(NpySource, RefusesWhatItCannotReadAndFailsOnATruncatedFile) {
  TempDir dir;
  std::vector<int32_t> ints(6, 1);
  write_npy(dir.file("i.npy"), DType::I32, {3, 2}, ints.data());
  std::string e = input_error_of([&] { open_npy_source(dir.file("i.npy")); });
  EXPECT_NE(e.find("holds int32"), std::string::npos) << e;
  std::vector<float> flat(5, 1.f);
  write_npy(dir.file("flat.npy"), DType::F32, {5}, flat.data());
  e = input_error_of([&] { open_npy_source(dir.file("flat.npy")); });
  EXPECT_NE(e.find("at least 2 dimensions"), std::string::npos) << e;
  std::vector<float> rows(10 * 4, 2.f);
  write_npy(dir.file("t.npy"), DType::F32, {10, 4}, rows.data());
  fs::resize_file(dir.file("t.npy"), fs::file_size(dir.file("t.npy")) - 16);
  e = input_error_of([&] { open_npy_source(dir.file("t.npy")); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // Truncated after the open: the read names the file instead of crashing.
  write_npy(dir.file("t.npy"), DType::F32, {10, 4}, rows.data());
  auto s = open_npy_source(dir.file("t.npy"));
  fs::resize_file(dir.file("t.npy"), 200);
  std::vector<float> got(40);
  e = input_error_of([&] { s->read(0, 10, got.data()); });
  EXPECT_NE(e.find("t.npy"), std::string::npos) << e;
}

TEST(Hdf5Source, InputKeysNameEverySampleAndSamplesLimitsTheRows) {
  TempDir dir;
  const std::string path = dir.file("k.h5");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<float> data(6 * 4);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  hsize_t dims[2] = {6, 4};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t d = H5Dcreate2(f, "/images", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  H5Dclose(d);
  H5Sclose(space);
  // Variable-length keys (h5py's default for str) and fixed-length ones.
  const char* names[6] = {"cat/0001.jpg", "cat/0002.jpg", "dog/1.jpg", "dog/a-much-longer-name.jpg", "x", "y"};
  hsize_t n = 6;
  space = H5Screate_simple(1, &n, nullptr);
  hid_t vstr = H5Tcopy(H5T_C_S1);
  H5Tset_size(vstr, H5T_VARIABLE);
  d = H5Dcreate2(f, "/names", vstr, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, vstr, H5S_ALL, H5S_ALL, H5P_DEFAULT, names);
  H5Dclose(d);
  hid_t fstr = H5Tcopy(H5T_C_S1);
  H5Tset_size(fstr, 8);
  H5Tset_strpad(fstr, H5T_STR_SPACEPAD);
  const char fixed[6 * 8 + 1] = "id0     id1     id2     id3     id4     id5     ";
  d = H5Dcreate2(f, "/ids", fstr, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, fstr, H5S_ALL, H5S_ALL, H5P_DEFAULT, fixed);
  H5Dclose(d);
  hsize_t five = 5;
  hid_t short_space = H5Screate_simple(1, &five, nullptr);
  d = H5Dcreate2(f, "/short", vstr, short_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(d);
  H5Sclose(short_space);
  H5Tclose(fstr);
  H5Tclose(vstr);
  H5Sclose(space);
  H5Fclose(f);

  auto s = open_hdf5_source(path, "/images", "/names");
  EXPECT_EQ(keys_of(*s), (std::vector<std::string>(names, names + 6)));
  EXPECT_EQ(s->key_bytes(), std::string("dog/a-much-longer-name.jpg").size());
  auto ids = open_hdf5_source(path, "/images", "/ids", 4);
  EXPECT_EQ(keys_of(*ids), (std::vector<std::string>{"id0", "id1", "id2", "id3"}));
  EXPECT_EQ(ids->size(), 4);
  std::vector<float> row(4);
  ids->read(3, 1, row.data());
  EXPECT_EQ(row[0], 12.f);
  EXPECT_THROW(ids->read(4, 1, row.data()), Error);  // past --samples
  auto plain = open_hdf5_source(path, "/images", "", 3);
  EXPECT_EQ(keys_of(*plain), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_NE(plain->fingerprint(), open_hdf5_source(path, "/images")->fingerprint());
  EXPECT_NE(s->fingerprint(), open_hdf5_source(path, "/images", "/ids")->fingerprint());
  std::string e = input_error_of([&] { open_hdf5_source(path, "/images", "/short"); });
  EXPECT_NE(e.find("must be [6]"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/images", "/images"); });
  EXPECT_NE(e.find("it must hold strings"), std::string::npos) << e;
  e = input_error_of([&] { open_hdf5_source(path, "/images", "/none"); });
  EXPECT_NE(e.find("no key dataset '/none'"), std::string::npos) << e;
}

TEST(OpenInput, TheKindComesFromWhatThePathIsOrFromInputKind) {
  TempDir dir;
  put(dir.file("d/a.jpg"), "x");
  put(dir.file("l.txt"), "d/a.jpg\n");
  put(dir.file("names"), "d/a.jpg\n");
  std::vector<float> v(4, 0.f);
  write_npy(dir.file("arr.bin"), DType::F32, {2, 2}, v.data());
  EXPECT_EQ(detect_input_kind("synthetic"), "synthetic");
  EXPECT_EQ(detect_input_kind(dir.file("d")), "folder");
  EXPECT_EQ(detect_input_kind(dir.file("l.txt")), "list");
  EXPECT_EQ(detect_input_kind(dir.file("x.LST")), "list");
  EXPECT_EQ(detect_input_kind(dir.file("x.npy")), "npy");
  EXPECT_EQ(detect_input_kind(dir.file("x.hdf5")), "hdf5");
  EXPECT_EQ(detect_input_kind(dir.file("s/train-{000..009}.tar")), "tar");
  EXPECT_EQ(detect_input_kind(dir.file("s/*.tar")), "tar");
  EXPECT_EQ(detect_input_kind(dir.file("one.tar")), "tar");
  EXPECT_EQ(detect_input_kind(dir.file("d/{a,b}.jpg")), "");  // braces name tar shards only
  EXPECT_EQ(detect_input_kind(dir.file("d/*.jpg")), "glob");
  EXPECT_EQ(detect_input_kind(dir.file("arr.bin")), "npy");  // by its magic bytes
  EXPECT_EQ(detect_input_kind(dir.file("names")), "");
  InputOptions o;
  o.path = dir.file("names");
  std::string e = input_error_of([&] { open_input(o); });
  EXPECT_NE(e.find("not an input sluice knows"), std::string::npos) << e;
  EXPECT_NE(e.find("--input-kind (synthetic, hdf5, npy, folder, glob, list, tar)"), std::string::npos) << e;
  o.kind = "list";
  EXPECT_EQ(open_input(o)->key(0), "d/a.jpg");
  o.path = dir.file("d/{a,b}.jpg");
  o.kind = "auto";
  e = input_error_of([&] { open_input(o); });
  EXPECT_NE(e.find("brace patterns"), std::string::npos) << e;
  o.path = dir.file("nothing/here");
  o.kind = "auto";
  e = input_error_of([&] { open_input(o); });
  EXPECT_NE(e.find("no such file or folder"), std::string::npos) << e;
  o.path = dir.file("d");
  o.keys = "/names";
  EXPECT_THROW(open_input(o), UsageError);
}
