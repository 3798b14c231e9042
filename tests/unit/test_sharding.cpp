// Sample ranges: every cut on a batch boundary counted from 0, shares that cover the pending
// samples once, and the complement that --resume computes from the ledgers.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "core/ranges.h"

using namespace sluice;

namespace {

std::vector<int64_t> samples_of(const std::vector<Range>& ranges) {
  std::vector<int64_t> v;
  for (const Range& r : ranges)
    for (int64_t i = r.first; i < r.end; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(Ranges, MergeSortsAndJoinsTouchingAndOverlappingRanges) {
  EXPECT_EQ(merge_ranges({{10, 20}, {0, 5}, {5, 8}, {15, 30}, {40, 40}}), (std::vector<Range>{{0, 8}, {10, 30}}));
  EXPECT_TRUE(merge_ranges({}).empty());
}

TEST(Ranges, ComplementIsWhatNoRangeHolds) {
  EXPECT_EQ(complement({{0, 8}, {10, 30}}, 40), (std::vector<Range>{{8, 10}, {30, 40}}));
  EXPECT_EQ(complement({}, 7), (std::vector<Range>{{0, 7}}));
  EXPECT_TRUE(complement({{0, 7}}, 7).empty());
  EXPECT_EQ(complement({{3, 7}}, 7), (std::vector<Range>{{0, 3}}));
}

TEST(Ranges, BatchesCountAShortLastBatch) {
  EXPECT_EQ(batches_in(Range{96, 203}, 8), 14);  // 13 whole batches and one of 3
  EXPECT_EQ(batches_in(std::vector<Range>{{0, 16}, {96, 203}}, 8), 16);
  EXPECT_TRUE(batch_aligned({96, 203}, 8, 203));
  EXPECT_FALSE(batch_aligned({96, 201}, 8, 203));  // ends inside a batch that is not the last
  EXPECT_FALSE(batch_aligned({4, 16}, 8, 203));
  EXPECT_FALSE(batch_aligned({200, 210}, 8, 203));
}

// Whatever the world size and however the pending samples are scattered (a resume), the shares
// are contiguous runs of the pending batches, cover every pending sample once, differ by at most
// one batch, and every cut is on a batch boundary counted from sample 0.
TEST(Ranges, SharesCoverThePendingSamplesOnceAndCutOnlyAtBatchBoundaries) {
  const int64_t batch = 8, total = 1003;
  const std::vector<std::vector<Range>> pendings{
      {{0, total}}, {}, {{16, 24}}, {{0, 64}, {200, 208}, {504, 1003}}, {{992, 1003}}};
  for (const auto& pending : pendings) {
    for (int world : {1, 2, 3, 4, 7, 16, 200}) {
      std::vector<int64_t> seen;
      int64_t smallest = INT64_MAX, largest = 0;
      for (int r = 0; r < world; ++r) {
        const std::vector<Range> mine = share_of(pending, batch, r, world);
        for (const Range& x : mine) EXPECT_TRUE(batch_aligned(x, batch, total)) << x.first << " " << x.end;
        const std::vector<int64_t> s = samples_of(mine);
        seen.insert(seen.end(), s.begin(), s.end());
        smallest = std::min(smallest, batches_in(mine, batch));
        largest = std::max(largest, batches_in(mine, batch));
      }
      EXPECT_EQ(seen, samples_of(pending)) << "world " << world;
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

TEST(Ranges, SliceTakesWholeBatchesFromTheConcatenation) {
  const std::vector<Range> r{{0, 16}, {96, 203}};
  EXPECT_EQ(batch_slice(r, 8, 1, 4), (std::vector<Range>{{8, 16}, {96, 112}}));
  EXPECT_EQ(batch_slice(r, 8, 14, 16), (std::vector<Range>{{192, 203}}));
  EXPECT_TRUE(batch_slice(r, 8, 5, 5).empty());
}

TEST(Ranges, TextRoundTripsAndRejectsGarbage) {
  const std::vector<Range> r{{0, 16}, {96, 203}};
  EXPECT_EQ(parse_ranges(ranges_text(r)), r);
  EXPECT_TRUE(parse_ranges("").empty());
  EXPECT_THROW(parse_ranges("1 2 3"), InputError);
  EXPECT_THROW(parse_ranges("1 x"), InputError);
}
