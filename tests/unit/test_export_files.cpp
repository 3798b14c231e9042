// An export's files (export/files.h), as both exporters use them: the temporaries' names (short,
// the same on every run, a rank's own), two samples on one file refused with what to do, and the
// run's own export folder (a file there is done; begin makes the folders, commit renames into
// place, and a folder that cannot be made is an InputError naming it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "export/files.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace fs = std::filesystem;

TEST(ExportFiles, TemporariesAreShortStableAndARanksOwn) {
  const std::string rel = "a/" + std::string(200, 'x') + ".png";
  const std::string p = partial_path("/out", rel), r1 = partial_path("/out", rel, 1);
  EXPECT_EQ(p, partial_path("/out", rel));
  EXPECT_EQ(fs::path(p).parent_path(), fs::path("/out/a"));
  EXPECT_EQ(fs::path(p).filename().string().size(), 1 + 16 + std::string(kPartial).size());
  EXPECT_EQ(fs::path(r1).filename().string(), fs::path(p).stem().string() + ".r1" + kPartial);
  EXPECT_NE(partial_path("/out", "a/y.png"), p);
  EXPECT_TRUE(is_partial(fs::path(r1).filename().string()));
  EXPECT_FALSE(is_partial("a.png"));
}

TEST(ExportFiles, TwoSamplesOnOneFileAreRefusedWithWhatToDo) {
  FileNames names("export: ", ".png", false, true);
  EXPECT_EQ(names.claim("a/cat.jpg", 0), "a/cat.png");
  EXPECT_EQ(names.claim("../up/dog.jpg", 1), "__/up/dog.png");
  EXPECT_EQ(names.went_up(), 1);
  EXPECT_EQ(names.first_up().second, "__/up/dog.png");
  try {
    names.claim("a/cat.png", 2);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("export: keys 'a/cat.jpg' (row 0) and 'a/cat.png' (row 2)", 0), 0u) << e.what();
    EXPECT_NE(e.hint().find("--keep-extension"), std::string::npos) << e.hint();
  }
  FileNames live("--export masks: ", ".png", false, false);
  live.claim("a.jpg", 0);
  try {
    live.claim("a.jpg", 1);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("listed twice"), std::string::npos) << e.what();
  }
}

TEST(ExportFiles, TheRunsOwnFolderSkipsFilesThereAndRenamesNewOnesIntoPlace) {
  TempDir dir;
  RunExportFolder f(dir.path(), 2);
  EXPECT_FALSE(f.done("a/b.png"));
  f.write("a/b.png", "a/b.jpg", "bytes");
  EXPECT_TRUE(f.done("a/b.png"));
  EXPECT_EQ(f.written(), 1);
  std::ifstream in(dir.file("a/b.png"));
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "bytes");
  EXPECT_FALSE(fs::exists(partial_path(dir.path(), "a/b.png", 2)));
  { std::ofstream(dir.file("c")) << "a file where a folder goes"; }
  const std::string e = input_error_of([&] { f.begin("c/d.png"); });
  EXPECT_NE(e.find("cannot create the folder"), std::string::npos) << e;
}
