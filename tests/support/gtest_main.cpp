// The main() of the GPU tests and the benchmarks: GoogleTest's, plus one exit status for "nothing
// ran".  When SLUICE_SKIPPED_EXIT is set (ctest sets it to 77, the tests' SKIP_RETURN_CODE) and no
// test passed or failed (every one skipped: no GPU, SLUICE_BENCH unset; or only disabled ones
// matched), the binary exits with that status, so ctest reports the suite as skipped.  A failure
// is never hidden: any failed test exits 1 whatever was skipped.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  const char* skipped_exit = std::getenv("SLUICE_SKIPPED_EXIT");
  if (status == 0 && skipped_exit && *skipped_exit && run.successful_test_count() == 0 && run.failed_test_count() == 0)
    return std::atoi(skipped_exit);
  return status;
}
