#include "core/error.h"

#include <algorithm>

#include <atomic>

namespace sluice {

namespace {
std::atomic<int> g_rank{-1};
thread_local int t_device = -1;
}  // namespace

void set_error_rank(int rank) { g_rank = rank; }
void set_thread_device(int device) { t_device = device; }
int thread_device() { return t_device; }

std::string format_failure(const char* call, const char* file, int line, const std::string& detail) {
  std::ostringstream os;
  os << call << " failed at " << file << ":" << line;
  const int rank = g_rank.load();
  if (rank >= 0 || t_device >= 0) {
    os << " [";
    if (rank >= 0) os << "rank " << rank;
    if (rank >= 0 && t_device >= 0) os << ", ";
    if (t_device >= 0) os << "device " << t_device;
    os << "]";
  }
  if (!detail.empty()) os << ": " << detail;
  return os.str();
}

std::string error_text(const std::exception& e) {
  std::string text = e.what();
  if (const auto* err = dynamic_cast<const Error*>(&e); err && !err->hint().empty()) text += "\nsluice: hint: " + err->hint();
  return text;
}

std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
  // Levenshtein distance, one row at a time.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  // Letters two words share (as multisets): between candidates as near as each other, the one that
  // keeps every letter typed wins ("outpus" is "outputs" with a letter left out, not "output").
  auto shared = [](const std::string& a, const std::string& b) {
    std::size_t counts[256] = {0}, n = 0;
    for (unsigned char c : a) ++counts[c];
    for (unsigned char c : b)
      if (counts[c] > 0) --counts[c], ++n;
    return n;
  };
  std::string best;
  std::size_t best_d = 0, best_shared = 0;
  for (const auto& c : candidates) {
    const std::size_t d = distance(word, c), s = shared(word, c);
    if (best.empty() || d < best_d || (d == best_d && s > best_shared)) {
      best = c;
      best_d = d;
      best_shared = s;
    }
  }
  // A typo: a few edits, and fewer than half the word (so "x" does not suggest "xyz-abc").
  if (best.empty() || best_d > std::max<std::size_t>(2, word.size() / 3) || best_d * 2 >= word.size()) return "";
  return best;
}

}  // namespace sluice
