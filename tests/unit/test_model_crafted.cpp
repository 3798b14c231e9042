// Crafted models (fuzz/corpus/onnx, written by fuzz/make_seeds.py): each bad one is refused with an
// InputError naming what is wrong, and every valid seed prepares.  Several of these once killed
// the process (SIGFPE, SIGSEGV, heap overflow).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/onnx_loader.h"
#include "model/prepare.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

const fs::path kSeeds = fs::path(SLUICE_SOURCE_DIR) / "fuzz" / "corpus" / "onnx";

Graph prepare_seed(const fs::path& path) {
  PrepareOptions o;
  o.batch_size = 2;
  o.sample_shape = path.filename() == "quickstart.onnx" ? Shape{3, 64, 64} : Shape{3, 4, 4};
  o.outputs = {{"logits", OutputSpec::Kind::Logits, DType::F32, 0},
               {"argmax", OutputSpec::Kind::ArgMax, DType::Undefined, 0}};
  return prepare_graph(load_onnx(path.string()), o);
}

}  // namespace

TEST(CraftedModels, EachIsAnInputErrorSayingWhatIsWrong) {
  std::ifstream f(kSeeds / "crafted.json");
  ASSERT_TRUE(f) << "run fuzz/make_seeds.py";
  const nlohmann::json manifest = nlohmann::json::parse(f);
  ASSERT_GE(manifest.size(), 30u);
  for (const auto& [file, words] : manifest.items()) {
    SCOPED_TRACE(file);
    try {
      prepare_seed(kSeeds / file);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(words.get<std::string>()), std::string::npos) << msg;
      EXPECT_NE(msg.find(file), std::string::npos) << "does not name the file: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    }
  }
}

TEST(CraftedModels, EveryValidSeedPrepares) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kSeeds)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".onnx" || name.rfind("crafted-", 0) == 0) continue;
    SCOPED_TRACE(name);
    const Graph g = prepare_seed(e.path());
    EXPECT_EQ(g.outputs.size(), 2u);
    EXPECT_EQ(g.outputs[0].shape.at(0), 2);
    ++n;
  }
  EXPECT_GE(n, 9);
}
