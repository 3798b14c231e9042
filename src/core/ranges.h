#pragma once
// Ranges of sample indices: the unit of sharding, commit and resume (docs/protocol.md).
//
// Every cut is made at a multiple of the batch size counted from sample 0, so a range always starts
// on a batch boundary and ends on one or at N.  Batch k is then always [k*B, min((k+1)*B, N)),
// whatever the sharding, the stealing, the world size or the resumes: each sample lands in the same
// batch position, which keeps outputs bit-identical on the CPU backend.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct Range {
  int64_t first = 0, end = 0;  // [first, end)
  int64_t size() const { return end - first; }
  bool empty() const { return end <= first; }
  bool operator==(const Range& o) const { return first == o.first && end == o.end; }
};

// Sorted, with overlapping and touching ranges merged, empty ones dropped.
std::vector<Range> merge_ranges(std::vector<Range> ranges);
// [0, total) minus the merged `covered`.
std::vector<Range> complement(const std::vector<Range>& covered, int64_t total);
int64_t total_size(const std::vector<Range>& ranges);
// Batches in a batch-aligned range (its last one may be short).
int64_t batches_in(const Range& r, int64_t batch);
int64_t batches_in(const std::vector<Range>& ranges, int64_t batch);
// Batches [lo, hi) of the concatenation of the batch-aligned `ranges`.
std::vector<Range> batch_slice(const std::vector<Range>& ranges, int64_t batch, int64_t lo, int64_t hi);
// Rank `rank`'s contiguous share of the pending batches: batches [n*rank/world, n*(rank+1)/world).
std::vector<Range> share_of(const std::vector<Range>& pending, int64_t batch, int rank, int world);
// Whether every range starts on a batch boundary and ends on one or at `total`.
bool batch_aligned(const Range& r, int64_t batch, int64_t total);

// "first end first end ..." and back; throws InputError on malformed text.
std::string ranges_text(const std::vector<Range>& ranges);
std::vector<Range> parse_ranges(const std::string& text);

}  // namespace sluice
