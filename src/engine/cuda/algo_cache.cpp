#include "engine/cuda/algo_cache.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/log.h"

namespace sluice::cuda {
namespace {
constexpr const char* kHeader = "# sluice cuDNN algorithm cache v1: key<TAB>value";
constexpr const char* kFileName = "cudnn-algorithms.tsv";
}  // namespace

AlgoCache::AlgoCache(std::string dir) : dir_(std::move(dir)) {
  if (enabled()) entries_ = read_file(path());
}

std::string AlgoCache::path() const { return enabled() ? (std::filesystem::path(dir_) / kFileName).string() : ""; }

std::map<std::string, std::string> AlgoCache::read_file(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) return out;   // no cache yet
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    // A damaged line (e.g. from a full disk) costs one re-measurement, not a failure.
    if (tab == std::string::npos || tab == 0) continue;
    out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

std::optional<std::string> AlgoCache::get(const std::string& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgoCache::put(const std::string& key, const std::string& value) {
  SLUICE_CHECK(key.find_first_of("\t\n") == std::string::npos && value.find('\n') == std::string::npos,
               "algorithm cache key or value contains a tab or newline: '", key, "'");
  entries_[key] = value;
  if (enabled()) added_[key] = value;
}

void AlgoCache::save() {
  if (!enabled() || added_.empty()) return;
  namespace fs = std::filesystem;
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    // Other ranks may have saved since we loaded: keep their entries too.
    std::map<std::string, std::string> merged = read_file(path());
    for (const auto& kv : added_) merged[kv.first] = kv.second;
    const std::string tmp = path() + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      if (!out) throw Error(str("cannot write ", tmp));
      out << kHeader << "\n";
      for (const auto& kv : merged) out << kv.first << '\t' << kv.second << '\n';
      out.flush();
      if (!out) throw Error(str("cannot write ", tmp));
    }
    fs::rename(tmp, path());
    entries_ = std::move(merged);
    added_.clear();
  } catch (const std::exception& e) {
    log_warn("cuda engine: could not save the algorithm cache in ", dir_, ": ", e.what());
  }
}

}  // namespace sluice::cuda
