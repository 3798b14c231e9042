// kill -9 at random moments: a forked child writes chunk after chunk to a rank file and reports
// each commit that returned through a pipe; the parent kills it with SIGKILL after a random delay.
// Whatever the moment, the file must read (as a SWMR reader), hold at least every reported commit
// (and at most the one in flight) with the right values, and recover (in place) to a clean file
// holding exactly those chunks, to which a resume can append.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "io/rank_file.h"
#include "test_io_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

constexpr int64_t kChunkSamples = 12;   // samples per commit
constexpr int64_t kBatch = 5;           // appended 5 + 5 + 2, straddling the file's 4-row chunks
constexpr int64_t kChunks = 400;        // more than any trial lives to write

std::vector<DatasetSpec> crash_specs(bool compressed) {
  return {DatasetSpec{"logits", DType::F32, {6, 8}, compressed ? 1 : 0}, DatasetSpec{"argmax", DType::U8, {3}}};
}

// Chunk k holds samples [perm(k) * 12, +12): a scattered order, as dynamic sharding gives.
int64_t chunk_first(int64_t k) { return (k * 7919) % kChunks * kChunkSamples; }

[[noreturn]] void child_writes(const std::string& path, bool compressed, int report_fd) {
  try {
    const auto specs = crash_specs(compressed);
    RankFileMeta meta = test_meta();
    meta.total_samples = kChunks * kChunkSamples;
    meta.chunk_samples = kChunkSamples;
    auto f = open_rank_file(path, specs, 4, meta, false);
    for (int32_t k = 0; k < kChunks; ++k) {
      write_chunk(*f, specs, k, chunk_first(k), kChunkSamples, kBatch);
      const int32_t done = k + 1;
      if (::write(report_fd, &done, sizeof done) != sizeof done) _exit(6);
    }
    f->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash child: %s\n", e.what());
    _exit(3);
  }
  _exit(0);
}

struct Trial {
  int32_t reported = 0;  // commits the child saw return
  bool finished = false;
};

Trial run_and_kill(const std::string& path, bool compressed, int wait_commits, int delay_us) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    child_writes(path, compressed, fds[1]);
  }
  ::close(fds[1]);
  Trial t;
  // Wait until the child reported `wait_commits` commits (0: not at all), then a random delay.  A
  // child that reports nothing for a minute is stuck: it is killed and the trial fails, rather
  // than the test waiting forever.
  while (t.reported < wait_commits) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) {
      ADD_FAILURE() << "the writing child reported no commit for 60 s after " << t.reported;
      break;
    }
    int32_t v = 0;
    if (::read(fds[0], &v, sizeof v) != sizeof v) break;
    t.reported = v;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  ::kill(pid, SIGKILL);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  t.finished = WIFEXITED(status);
  EXPECT_TRUE(t.finished ? WEXITSTATUS(status) == 0 : WTERMSIG(status) == SIGKILL) << "child status " << status;
  int32_t v = 0;
  while (::read(fds[0], &v, sizeof v) == sizeof v) t.reported = v;
  ::close(fds[0]);
  return t;
}

// Checks the file's committed chunks against what the child wrote; returns how many there are.
std::size_t check_committed(const RankFileInfo& info, const std::vector<DatasetSpec>& specs, int32_t reported) {
  EXPECT_GE(info.chunks.size(), static_cast<std::size_t>(reported)) << info.path;
  EXPECT_LE(info.chunks.size(), static_cast<std::size_t>(reported) + 1) << info.path;
  int64_t end_row = 0;
  for (std::size_t k = 0; k < info.chunks.size(); ++k) {
    const ChunkRecord& c = info.chunks[k];
    EXPECT_EQ(c.seq, static_cast<int64_t>(k));
    EXPECT_EQ(c.first_index, chunk_first(static_cast<int64_t>(k)));
    EXPECT_EQ(c.count, kChunkSamples);
    EXPECT_GE(c.first_row, end_row);
    end_row = c.first_row + c.count;
    EXPECT_EQ(check_chunk_rows(info.path, specs, c), 0) << info.path << " chunk " << k;
  }
  EXPECT_EQ(info.committed_rows, end_row);
  return info.chunks.size();
}

}  // namespace

TEST(RankFileCrash, KillNineAtRandomMomentsLosesNoCommittedChunk) {
  TempDir dir;
  std::mt19937 rng(20240229);
  const int trials = trial_count(30);
  int mid_commit = 0, before_first = 0, torn = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const bool compressed = trial % 3 == 2;
    const auto specs = crash_specs(compressed);
    const std::string path = dir.file("rank-" + std::to_string(trial) + ".h5");
    // Mostly: let it commit a few chunks, then kill within the next ~2 commits' time; a few trials
    // kill during start-up (creation) instead.
    const bool startup = trial < 6;
    const int wait_commits = startup ? 0 : std::uniform_int_distribution<int>(1, 60)(rng);
    const int delay_us = startup ? trial * 1500 : std::uniform_int_distribution<int>(0, 1500)(rng);
    const Trial t = run_and_kill(path, compressed, wait_commits, delay_us);
    ASSERT_FALSE(t.finished) << "the child finished all " << kChunks << " chunks before the kill; raise kChunks";
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(t.reported) + " commits reported, delay " +
                 std::to_string(delay_us) + " us");

    if (!std::filesystem::exists(path)) {
      // Killed before the file was published: nothing can have been committed.
      EXPECT_EQ(t.reported, 0);
      ++before_first;
      continue;
    }
    const KilledCopy killed(path, str("crash-", getpid(), "-trial-", trial, compressed ? "-compressed" : "", ".h5"));
    const RankFileInfo crashed = read_rank_file(path);
    EXPECT_FALSE(crashed.closed_cleanly);
    const std::size_t n = check_committed(crashed, specs, t.reported);
    if (n == static_cast<std::size_t>(t.reported) + 1) ++mid_commit;

    // A throw below names its trial (a SCOPED_TRACE does not reach gtest's report of an exception).
    const std::string where = "trial " + std::to_string(trial) + " (" + std::to_string(t.reported) + " commits reported, " +
                              std::to_string(n) + " on disk, delay " + std::to_string(delay_us) + " us" +
                              (compressed ? ", compressed" : "") + ")";
    std::string recovered;
    try {
      recovered = recover_rank_file(path);
    } catch (const std::exception& e) {
      FAIL() << where << ": recovery threw: " << e.what();
    }
    const RankFileInfo rec = read_rank_file(path);
    EXPECT_TRUE(rec.closed_cleanly);
    EXPECT_EQ(rec.file_rows, rec.committed_rows);
    // A kill that cut a metadata write short (a chunk index block half new, half old) leaves a
    // file recovery salvages: the commits before the block's rows are kept, the rest redone.
    const bool salvaged = recovered.find("fails its checksum") != std::string::npos;
    std::size_t kept = n;
    if (salvaged) {
      ++torn;
      kept = rec.chunks.size();
      EXPECT_LT(kept, n) << recovered;
      for (std::size_t k = 0; k < kept; ++k) {
        EXPECT_EQ(rec.chunks[k].first_index, chunk_first(static_cast<int64_t>(k)));
        EXPECT_EQ(check_chunk_rows(path, specs, rec.chunks[k]), 0) << path << " chunk " << k;
      }
    } else {
      EXPECT_EQ(check_committed(rec, specs, t.reported), n);
      for (std::size_t k = 0; k < n; ++k) EXPECT_EQ(rec.chunks[k].first_row, crashed.chunks[k].first_row);
    }
    EXPECT_EQ(every_row_reads(path), "") << where << " after the recovery said \"" << recovered << "\"";

    // Every trial resumes: the next commits land right after the recovered ones, over the space
    // (and the stale chunk index entries past the extent) the killed writer left, and every
    // commit, old and new, still reads back right.
    try {
      auto f = open_rank_file(path, specs, 4, test_meta(), true);
      for (int64_t k = static_cast<int64_t>(kept); k < static_cast<int64_t>(kept) + 3; ++k)
        write_chunk(*f, specs, k, chunk_first(k), kChunkSamples, kBatch);
      f->close();
    } catch (const std::exception& e) {
      FAIL() << where << ": the resume's writes threw after the recovery said \"" << recovered << "\": " << e.what();
    }
    const RankFileInfo resumed = read_rank_file(path);
    EXPECT_EQ(resumed.attempt, 1);
    EXPECT_EQ(check_committed(resumed, specs, static_cast<int32_t>(kept + 3)), kept + 3);
    EXPECT_EQ(every_row_reads(path), "") << where << ", resumed";
    std::error_code ec;
    std::filesystem::remove(path, ec);  // a soak's thousands of trials would fill the folder
  }
  std::printf("[ crash trials ] %d trials, %d killed before the file existed, %d with the in-flight commit on disk, "
              "%d salvaged (a metadata write cut short)\n",
              trials, before_first, mid_commit, torn);
}
