// Chunk arithmetic and static sharding: every chunk goes to exactly one rank, contiguously.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "dist/work.h"

using namespace sluice;

TEST(Chunking, CoversEverySampleOnceWithAShortLastChunk) {
  Chunking c{1000, 96};
  ASSERT_EQ(c.chunks(), 11);
  int64_t next = 0;
  for (int64_t id = 0; id < c.chunks(); ++id) {
    WorkItem w = c.item(id);
    EXPECT_EQ(w.chunk_id, id);
    EXPECT_EQ(w.first, next);
    next += w.count;
  }
  EXPECT_EQ(next, 1000);
  EXPECT_EQ(c.item(10).count, 1000 - 960);
}

TEST(Chunking, ExactMultipleHasNoEmptyChunk) {
  Chunking c{512, 64};
  EXPECT_EQ(c.chunks(), 8);
  EXPECT_EQ(c.item(7).count, 64);
}

TEST(StaticShare, SplitsPendingChunksIntoContiguousRunsCoveringAll) {
  for (int world : {1, 2, 3, 4, 7, 16}) {
    for (int n : {0, 1, 5, 16, 33}) {
      std::vector<int64_t> pending(static_cast<std::size_t>(n));
      std::iota(pending.begin(), pending.end(), 100);
      std::vector<int64_t> seen;
      std::size_t smallest = SIZE_MAX, largest = 0;
      for (int r = 0; r < world; ++r) {
        auto mine = static_share(pending, r, world);
        for (std::size_t i = 1; i < mine.size(); ++i) EXPECT_EQ(mine[i], mine[i - 1] + 1);
        seen.insert(seen.end(), mine.begin(), mine.end());
        smallest = std::min(smallest, mine.size());
        largest = std::max(largest, mine.size());
      }
      EXPECT_EQ(seen, pending) << "world " << world << " n " << n;
      EXPECT_LE(largest - smallest, 1u);
    }
  }
}

TEST(StaticShare, ResumeSplitsOnlyWhatIsLeft) {
  std::vector<int64_t> pending = {1, 4, 5, 9};
  EXPECT_EQ(static_share(pending, 0, 2), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(static_share(pending, 1, 2), (std::vector<int64_t>{5, 9}));
}
