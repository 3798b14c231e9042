#include "engine/algo_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/log.h"

namespace sluice::cuda {
namespace {

// v2: keys name the driver too.  A file of another version is foreign: ignored and rewritten.
constexpr const char* kHeader = "# sluice cuDNN algorithm cache v2: key<TAB>value";
// A save holds the lock for milliseconds; one held longer belongs to a process that hangs (a stuck
// file system).  Rather than hang with it, the save goes on unlocked: at worst an entry is lost and
// measured again by a later start.
constexpr double kLockWaitSeconds = 10;

std::string without_controls(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

// An exclusive flock on PATH.lock for the life of the object (none when the file system has no locks).
class SaveLock {
 public:
  explicit SaveLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (errno != EWOULDBLOCK || waited > kLockWaitSeconds) {
        if (errno == EWOULDBLOCK)
          log_warn("cuda engine: the algorithm cache ", path, " stayed locked for ", kLockWaitSeconds,
                   " s; saving without the lock");
        ::close(fd_);
        fd_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  ~SaveLock() {
    if (fd_ >= 0) ::close(fd_);   // closing releases the flock
  }
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string algo_cache_prefix(const AlgoCacheDevice& d) {
  return without_controls(str(d.gpu, "|sm_", d.sm_major, d.sm_minor, "|driver ", d.driver, "|cudnn ", d.cudnn, "|",
                              d.precision, d.deterministic ? "|det" : ""));
}

std::string tuned_value(TuneLevel level, const std::string& choice) {
  switch (level) {
    case TuneLevel::Heuristic: return "heuristic " + choice;
    case TuneLevel::Quick: return "quick " + choice;
    case TuneLevel::Full: break;
  }
  return choice;
}

Tuned parse_tuned(const std::string& value) {
  Tuned t;
  t.choice = value;
  for (const auto& [word, level] : {std::pair<const char*, TuneLevel>{"heuristic ", TuneLevel::Heuristic},
                                    std::pair<const char*, TuneLevel>{"quick ", TuneLevel::Quick}}) {
    const std::string w = word;
    if (value.compare(0, w.size(), w) == 0) {
      t.level = level;
      t.choice = value.substr(w.size());
    }
  }
  return t;
}

double negligible_flops(const std::vector<double>& flops, double share) {
  std::vector<double> known;
  double total = 0;
  for (double f : flops)
    if (f > 0) {
      known.push_back(f);
      total += f;
    }
  std::sort(known.begin(), known.end());
  const double budget = share * total;
  double sum = 0, below = -1;
  for (std::size_t i = 0; i < known.size();) {
    std::size_t j = i;
    double group = 0;
    for (; j < known.size() && known[j] == known[i]; ++j) group += known[j];
    if (sum + group > budget) break;
    sum += group;
    below = known[i];
    i = j;
  }
  return below;
}

int64_t tuning_batch(int64_t batch, int64_t positions_per_sample) {
  if (batch <= 1) return batch;
  const int64_t p = std::max<int64_t>(1, positions_per_sample);
  const int64_t by_positions = (kTuningPositions + p - 1) / p;
  const int64_t by_share = (batch + kTuningBatchDivisor - 1) / kTuningBatchDivisor;
  return std::min(batch, std::max(by_positions, by_share));
}

AlgoCache::AlgoCache(std::string dir) : dir_(std::move(dir)) {
  if (!enabled()) return;
  Loaded l = read_file(path());
  entries_ = std::move(l.entries);
  if (!l.problem.empty()) {
    rewrite_ = true;
    log_warn("cuda engine: ignoring the algorithm cache ", path(), " (", l.problem,
             "); measuring again and writing a new one");
  }
}

std::string AlgoCache::path() const { return enabled() ? (std::filesystem::path(dir_) / kFileName).string() : ""; }

AlgoCache::Loaded AlgoCache::read_file(const std::string& path) {
  Loaded l;
  std::ifstream in(path, std::ios::binary);
  if (!in) return l;   // no cache yet
  std::string line;
  if (!std::getline(in, line)) return l;   // empty: as good as none
  if (line != kHeader) {
    l.problem = line.rfind("# sluice cuDNN algorithm cache", 0) == 0 ? "written by another version of sluice"
                                                                     : "not a sluice algorithm cache";
    return l;
  }
  for (int n = 2; std::getline(in, line); ++n) {
    const auto tab = line.find('\t');
    // eof() after a line: it had no newline, so the file was cut off there (it is only ever renamed
    // into place whole, so something else wrote it).
    if (line.empty() || tab == std::string::npos || tab == 0 || in.eof()) {
      l.problem = str("damaged at line ", n);
      l.entries.clear();
      return l;
    }
    l.entries[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return l;
}

std::optional<std::string> AlgoCache::get(const std::string& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgoCache::put(const std::string& key, const std::string& value) {
  SLUICE_CHECK(!key.empty() && key.find_first_of("\t\n\r") == std::string::npos &&
                   value.find_first_of("\n\r") == std::string::npos,
               "algorithm cache key or value is empty or contains a tab or newline: '", key, "'");
  entries_[key] = value;
  if (enabled()) added_[key] = value;
}

void AlgoCache::save() {
  if (!enabled() || (added_.empty() && !rewrite_)) return;
  namespace fs = std::filesystem;
  static std::atomic<int> serial{0};
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    const SaveLock lock(path());
    // Other ranks and jobs may have saved since we loaded: keep their entries too (unless the file
    // is damaged or foreign now, then it is replaced).
    std::map<std::string, std::string> merged = read_file(path()).entries;
    for (const auto& kv : added_) merged[kv.first] = kv.second;
    const std::string tmp = str(path(), ".tmp.", ::getpid(), ".", serial++);
    {
      std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
      if (!out) throw Error(str("cannot write ", tmp));
      out << kHeader << "\n";
      for (const auto& kv : merged) out << kv.first << '\t' << kv.second << '\n';
      out.flush();
      if (!out) {
        out.close();
        std::remove(tmp.c_str());
        throw Error(str("cannot write ", tmp, " (disk full?)"));
      }
    }
    fs::rename(tmp, path());
    entries_ = std::move(merged);
    added_.clear();
    rewrite_ = false;
  } catch (const std::exception& e) {
    log_warn("cuda engine: could not save the algorithm cache in ", dir_, ": ", e.what());
  }
}

}  // namespace sluice::cuda
