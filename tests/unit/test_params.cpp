// core/params: the table of SLUICE_* environment switches.  Every entry's default parses as its
// kind, a bad value is refused naming the variable, an undeclared name throws, and every quoted
// "SLUICE_..." name in src/ is declared (so that a new raw getenv of one fails here).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/params.h"

using namespace sluice;

namespace {

// Sets a variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Reads `p` through the accessor of its kind (the value is discarded: the read's check is the test).
void read(const Param& p) {
  switch (p.kind) {
    case ParamKind::On: param_on(p.name); break;
    case ParamKind::Int: param_int(p.name); break;
    case ParamKind::Double: param_double(p.name); break;
    case ParamKind::Enum:
    case ParamKind::Text: param_string(p.name); break;
  }
}

// A value of the entry's kind that it refuses.
std::string bad_value(const Param& p) {
  switch (p.kind) {
    case ParamKind::On: return "yes";
    case ParamKind::Int: return "2.5";
    case ParamKind::Double: return "soon";
    case ParamKind::Enum: return "no-such-value";
    case ParamKind::Text: return "no such value";
  }
  return "";
}

}  // namespace

TEST(Params, EveryNameIsDeclaredOnceWithADescription) {
  std::set<std::string> seen;
  for (const Param& p : params()) {
    EXPECT_TRUE(seen.insert(p.name).second) << p.name << " is declared twice";
    EXPECT_EQ(std::string(p.name).rfind("SLUICE_", 0), 0u) << p.name;
    EXPECT_GT(std::string(p.description).size(), 10u) << p.name;
  }
}

TEST(Params, EveryDefaultIsAValueOfItsKind) {
  for (const Param& p : params()) {
    SCOPED_TRACE(p.name);
    if (*p.def) EXPECT_NO_THROW(check_param_value(p, p.def));
    else EXPECT_EQ(p.kind, ParamKind::Text);   // only a text switch has no default ("unset": its reader's own choice)
    if (p.read == ParamRead::AtUse) {
      const ScopedEnv unset(p.name, nullptr);
      EXPECT_NO_THROW(read(p));
      if (p.kind == ParamKind::Enum || p.kind == ParamKind::Text) EXPECT_EQ(param_string(p.name), p.def);
    }
  }
}

TEST(Params, ABadValueIsAUsageErrorThatNamesTheVariable) {
  for (const Param& p : params()) {
    SCOPED_TRACE(p.name);
    try {
      check_param_value(p, bad_value(p));
      ADD_FAILURE() << "'" << bad_value(p) << "' was taken";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(p.name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad_value(p)), std::string::npos) << e.what();
    }
    if (p.read != ParamRead::AtUse) continue;   // a Once entry keeps the process's first read
    const ScopedEnv bad(p.name, bad_value(p).c_str());
    EXPECT_THROW(read(p), UsageError);
  }
}

TEST(Params, ValuesAreReadAtEachUseWithTheirPolarity) {
  {
    const ScopedEnv off("SLUICE_FUSE_ATTENTION", "0");
    EXPECT_FALSE(param_on("SLUICE_FUSE_ATTENTION"));
  }
  {
    const ScopedEnv unset("SLUICE_FUSE_ATTENTION", nullptr), unset_gelu("SLUICE_FUSE_CONV_GELU", nullptr);
    EXPECT_TRUE(param_on("SLUICE_FUSE_ATTENTION"));   // on by default
    EXPECT_FALSE(param_on("SLUICE_FUSE_CONV_GELU"));  // off by default
  }
  {
    const ScopedEnv on("SLUICE_FUSE_CONV_GELU", "1");
    EXPECT_TRUE(param_on("SLUICE_FUSE_CONV_GELU"));
  }
  {
    const ScopedEnv empty("SLUICE_CUDA_ATTENTION", "");
    EXPECT_EQ(param_string("SLUICE_CUDA_ATTENTION"), "auto");
  }
  {
    const ScopedEnv path("SLUICE_CUDA_ATTENTION", "window");
    EXPECT_EQ(param_string("SLUICE_CUDA_ATTENTION"), "window");
  }
  {
    const ScopedEnv n("SLUICE_DECODE_OVERLAP", "8");
    EXPECT_EQ(param_int("SLUICE_DECODE_OVERLAP"), 8);
  }
  {
    const ScopedEnv n("SLUICE_DECODE_OVERLAP", "9");
    EXPECT_THROW(param_int("SLUICE_DECODE_OVERLAP"), UsageError);
  }
  {
    const ScopedEnv s("SLUICE_LOCK_WAIT_S", "2.5");
    EXPECT_DOUBLE_EQ(param_double("SLUICE_LOCK_WAIT_S"), 2.5);
  }
  {
    const ScopedEnv s("SLUICE_LOCK_WAIT_S", "-1");
    EXPECT_THROW(param_double("SLUICE_LOCK_WAIT_S"), UsageError);
  }
  for (const char* ok : {"off", "0", "2", "4:all"}) {
    const ScopedEnv a("SLUICE_CUDA_ATROUS", ok);
    EXPECT_EQ(param_string("SLUICE_CUDA_ATROUS"), ok);
  }
  for (const char* bad : {"1", "4:some", "x"}) {
    const ScopedEnv a("SLUICE_CUDA_ATROUS", bad);
    EXPECT_THROW(param_string("SLUICE_CUDA_ATROUS"), UsageError) << bad;
  }
}

TEST(Params, AnUndeclaredNameOrAnotherKindThrows) {
  EXPECT_THROW(param_on("SLUICE_NO_SUCH_SWITCH"), Error);
  EXPECT_THROW(param_int("SLUICE_FUSE_ATTENTION"), Error);   // an on/off switch
  EXPECT_THROW(param_on("SLUICE_CUDA_ATTENTION"), Error);    // an enum
}

// A quoted SLUICE_ name in the sources is an environment switch (build-time macros such as
// SLUICE_HAVE_CUDA or SLUICE_THROW are never quoted): each must be in the table.
TEST(Params, EveryQuotedSwitchInTheSourcesIsDeclared) {
  std::set<std::string> declared;
  for (const Param& p : params()) declared.insert(p.name);
  const std::regex quoted("\"(SLUICE_[A-Z0-9_]+)\"");
  std::set<std::string> found;
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(SLUICE_SOURCE_DIR) + "/src")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
    ++files;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator m(s.begin(), s.end(), quoted), end; m != end; ++m) {
      found.insert((*m)[1]);
      EXPECT_TRUE(declared.count((*m)[1])) << (*m)[1] << " in " << e.path() << " is not declared in src/core/params.cpp";
    }
  }
  EXPECT_GT(files, 100);
  // The other way round: a declared switch nobody reads is a stale entry.
  for (const std::string& name : declared) EXPECT_TRUE(found.count(name)) << name << " is declared but read nowhere in src/";
}
