// The attempts record settles an attempt that never wrote its end from the notes its ranks left
// (report/attempts.h): failure notes make it "failed", and ranks that left neither a failure nor a
// stop note went silent, named with their nodes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/timer.h"
#include "report/attempts.h"

using namespace sluice;

namespace {

struct Folder {
  std::string path;
  Folder() {
    char tmpl[] = "/tmp/sluice-attempts-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~Folder() { std::filesystem::remove_all(path); }
};

// An attempt of 4 ranks: ranks 0 and 3 on node1 and node3, ranks 1 and 2 on node2.
AttemptRecord four_ranks_on_three_nodes() {
  AttemptRecord a;
  a.attempt = 0;
  a.started_unix = 1000;
  a.world_size = 4;
  a.nodes = 3;
  a.hosts = {"node1", "node2", "node3"};
  a.rank_hosts = {0, 1, 1, 2};
  return a;
}

AttemptRecord next_attempt(int64_t committed_before) {
  AttemptRecord b;
  b.attempt = 1;
  b.world_size = 2;
  b.committed_before = committed_before;
  return b;
}

}  // namespace

TEST(Attempts, RanksThatLeftNoNoteAreTheNodeThatWentSilent) {
  Folder dir;
  begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  // The launcher stopped the ranks of node1 and node3 with a signal; node2's said nothing.
  note_attempt_stopping(dir.path, 0, 0, "by SIGTERM");
  note_attempt_stopping(dir.path, 0, 3, "by SIGTERM");
  const auto all = begin_attempt(dir.path, true, next_attempt(96));
  const AttemptRecord& lost = all.at(0);
  EXPECT_EQ(lost.ended, "killed");
  EXPECT_EQ(lost.silent_hosts, std::vector<std::string>({"node2"}));
  EXPECT_EQ(lost.silent_ranks, std::vector<int>({1, 2}));
  EXPECT_NE(lost.message.find("node node2 (ranks 1, 2) went silent"), std::string::npos) << lost.message;
  EXPECT_NE(lost.message.find("stopped by SIGTERM"), std::string::npos) << lost.message;
  EXPECT_EQ(lost.samples, 96);
  // The notes are folded into the record and gone from the folder.
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".stopping"), std::string::npos) << e.path();
}

TEST(Attempts, AFailureNoteCountsAsAWordAndTheSilentNodeIsStillNamed) {
  Folder dir;
  begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  note_attempt_failure(dir.path, 0, 0, "MPI_Recv failed: a peer is gone");
  note_attempt_stopping(dir.path, 0, 3, "by SIGTERM");
  const auto all = begin_attempt(dir.path, true, next_attempt(0));
  EXPECT_EQ(all.at(0).ended, "failed");
  EXPECT_NE(all.at(0).message.find("rank 0: MPI_Recv failed"), std::string::npos) << all.at(0).message;
  EXPECT_NE(all.at(0).message.find("node node2 (ranks 1, 2) went silent"), std::string::npos) << all.at(0).message;
}

TEST(Attempts, OneSilentRankOnANodeOtherwiseHeardIsNamedAsARank) {
  Folder dir;
  begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  for (int r : {0, 1, 3}) note_attempt_stopping(dir.path, 0, r, "by SIGTERM");
  const auto all = begin_attempt(dir.path, true, next_attempt(0));
  EXPECT_TRUE(all.at(0).silent_hosts.empty());
  EXPECT_EQ(all.at(0).silent_ranks, std::vector<int>({2}));
  EXPECT_NE(all.at(0).message.find("rank 2 went silent"), std::string::npos) << all.at(0).message;
}

TEST(Attempts, NoNoteAtAllIsAKillOfEveryRank) {
  Folder dir;
  begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  const auto all = begin_attempt(dir.path, true, next_attempt(0));
  EXPECT_EQ(all.at(0).ended, "killed");
  EXPECT_EQ(all.at(0).silent_ranks.size(), 4u);
  EXPECT_EQ(all.at(0).silent_hosts.size(), 3u);
  EXPECT_NE(all.at(0).message.find("ended without a word"), std::string::npos) << all.at(0).message;
}

TEST(Attempts, AnAttemptThatEndedLeavesNoStopNotesBehind) {
  Folder dir;
  auto all = begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  for (int r = 0; r < 4; ++r) note_attempt_stopping(dir.path, 0, r, "by SIGUSR1");
  all = end_attempt(dir.path, all, "stopped", "by SIGUSR1", 10);
  EXPECT_TRUE(std::filesystem::exists(attempts_path(dir.path)));
  int notes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    notes += e.path().extension() == ".stopping";
  EXPECT_EQ(notes, 0);
  const auto again = begin_attempt(dir.path, true, next_attempt(10));
  EXPECT_EQ(again.at(0).ended, "stopped");
  EXPECT_TRUE(again.at(0).silent_ranks.empty());
}

TEST(Attempts, ARecordWhoseRankHostsNameNoListedHostStillSettlesByRanks) {
  Folder dir;
  AttemptRecord a = four_ranks_on_three_nodes();
  a.rank_hosts = {0, 7, 7, 2};  // as an edited attempts.json might say
  begin_attempt(dir.path, false, a);
  for (int r : {0, 3}) note_attempt_stopping(dir.path, 0, r, "by SIGTERM");
  const auto all = begin_attempt(dir.path, true, next_attempt(0));
  EXPECT_TRUE(all.at(0).silent_hosts.empty());
  EXPECT_EQ(all.at(0).silent_ranks, std::vector<int>({1, 2}));
  EXPECT_NE(all.at(0).message.find("ranks 1, 2 went silent"), std::string::npos) << all.at(0).message;
}

// Read straight from attempts.json, as a user (or plot_reports.py) would after the job ended.
std::vector<nlohmann::json> on_record(const std::string& dir) {
  std::ifstream f(attempts_path(dir));
  const nlohmann::json j = nlohmann::json::parse(f);
  return {j.at("attempts").begin(), j.at("attempts").end()};
}

TEST(Attempts, AFailingRankMarksTheAttemptFailedAtOnceAndTheNextOneSettlesIt) {
  Folder dir;
  begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  // Two ranks fail; no later attempt may come, so the record says so now.
  record_attempt_failure(dir.path, 0, 1, "bad sample 'a.jpg': not a JPEG or PNG file");
  record_attempt_failure(dir.path, 0, 2, "bad sample 'b.jpg': empty file");
  const auto now = on_record(dir.path);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].at("ended"), "failed");
  const std::string message = now[0].at("message");
  EXPECT_NE(message.find("rank 1: bad sample 'a.jpg'"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 2: bad sample 'b.jpg'"), std::string::npos) << message;
  EXPECT_GT(now[0].at("finished_unix").get<double>(), 0);
  EXPECT_FALSE(now[0].at("finished").get<std::string>().empty());
  // No temporary file of a failing rank is left.
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  // A resume settles it from the notes (the silent node named) and counts its samples.
  note_attempt_stopping(dir.path, 0, 0, "by SIGTERM");
  const auto all = begin_attempt(dir.path, true, next_attempt(40));
  EXPECT_EQ(all.at(0).ended, "failed");
  EXPECT_EQ(all.at(0).samples, 40);
  EXPECT_NE(all.at(0).message.find("rank 1: bad sample 'a.jpg'"), std::string::npos) << all.at(0).message;
  EXPECT_NE(all.at(0).message.find("rank 2: bad sample 'b.jpg'"), std::string::npos) << all.at(0).message;
  EXPECT_EQ(all.at(0).message.find("rank 1: bad sample 'a.jpg'"), all.at(0).message.rfind("rank 1: bad sample"))
      << "each rank's message once: " << all.at(0).message;
  EXPECT_EQ(all.at(1).ended, "running");
  // Settled: a later resume keeps it as it is.
  const auto later = begin_attempt(dir.path, true, AttemptRecord{2});
  EXPECT_EQ(later.at(0).message, all.at(0).message);
}

TEST(Attempts, AFailureAfterTheEndWasWrittenStillReadsAsFailed) {
  Folder dir;
  auto all = begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  end_attempt(dir.path, all, "complete", "", 96);
  record_attempt_failure(dir.path, 0, 0, "cannot write outputs.h5 (disk full?)");
  EXPECT_EQ(on_record(dir.path).at(0).at("ended"), "failed");
}

TEST(Attempts, AFailureBeforeTheAttemptIsOnRecordChangesNoEntry) {
  Folder dir;
  auto all = begin_attempt(dir.path, false, four_ranks_on_three_nodes());
  end_attempt(dir.path, all, "stopped", "by SIGUSR1", 10);
  record_attempt_failure(dir.path, 1, 0, "set-up failed");  // attempt 1 never began
  const auto now = on_record(dir.path);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].at("ended"), "stopped");
}

TEST(Clock, AnOffsetIsTakenOutOfEveryTimeRead) {
  const double before = unix_time_now();
  set_clock_offset(3600);
  const double shifted = unix_time_now();
  set_clock_offset(0);
  EXPECT_NEAR(before - shifted, 3600, 5);
  EXPECT_NEAR(unix_time_now(), before, 5);
}
