#include "core/ranges.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace sluice {

std::vector<Range> merge_ranges(std::vector<Range> ranges) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(), [](const Range& r) { return r.empty(); }), ranges.end());
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.first < b.first; });
  std::vector<Range> out;
  for (const Range& r : ranges) {
    if (!out.empty() && r.first <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

std::vector<Range> complement(const std::vector<Range>& covered, int64_t total) {
  std::vector<Range> out;
  int64_t next = 0;
  for (const Range& r : covered) {
    if (r.first > next) out.push_back({next, std::min(r.first, total)});
    next = std::max(next, r.end);
    if (next >= total) break;
  }
  if (next < total) out.push_back({next, total});
  return out;
}

int64_t total_size(const std::vector<Range>& ranges) {
  int64_t n = 0;
  for (const Range& r : ranges) n += r.size();
  return n;
}

int64_t batches_in(const Range& r, int64_t batch) { return r.empty() ? 0 : (r.size() + batch - 1) / batch; }

int64_t batches_in(const std::vector<Range>& ranges, int64_t batch) {
  int64_t n = 0;
  for (const Range& r : ranges) n += batches_in(r, batch);
  return n;
}

std::vector<Range> batch_slice(const std::vector<Range>& ranges, int64_t batch, int64_t lo, int64_t hi) {
  std::vector<Range> out;
  int64_t seen = 0;  // batches before the current range
  for (const Range& r : ranges) {
    const int64_t nb = batches_in(r, batch);
    const int64_t a = std::max(lo, seen), b = std::min(hi, seen + nb);
    if (a < b) out.push_back({r.first + (a - seen) * batch, std::min(r.end, r.first + (b - seen) * batch)});
    seen += nb;
    if (seen >= hi) break;
  }
  return out;
}

std::vector<Range> share_of(const std::vector<Range>& pending, int64_t batch, int rank, int world) {
  const int64_t n = batches_in(pending, batch);
  return batch_slice(pending, batch, n * rank / world, n * (rank + 1) / world);
}

bool batch_aligned(const Range& r, int64_t batch, int64_t total) {
  return r.first >= 0 && r.first < r.end && r.end <= total && r.first % batch == 0 &&
         (r.end % batch == 0 || r.end == total);
}

std::string ranges_text(const std::vector<Range>& ranges) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ranges.size(); ++i) os << (i ? " " : "") << ranges[i].first << " " << ranges[i].end;
  return os.str();
}

std::vector<Range> parse_ranges(const std::string& text) {
  std::istringstream is(text);
  std::vector<Range> out;
  Range r;
  while (is >> r.first) {
    if (!(is >> r.end)) throw InputError("malformed range list: an odd number of values");
    out.push_back(r);
  }
  if (!is.eof()) throw InputError("malformed range list: not a number");
  return out;
}

}  // namespace sluice
