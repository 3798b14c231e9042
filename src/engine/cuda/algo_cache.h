#pragma once
// The on-disk cache of measured convolution algorithms.  Measuring every convolution at start-up
// takes seconds for a ResNet; a second start with the same GPU, cuDNN version, precision and shapes
// reads the choice back instead.  One text file per cache folder, one "key<TAB>value" line per
// entry; writes go to a temporary file renamed over the old one, merged with what other processes
// (ranks) wrote meanwhile, so a reader never sees a half-written file.
#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace sluice::cuda {

class AlgoCache {
 public:
  // dir "" disables the cache (get finds nothing, save writes nothing).
  explicit AlgoCache(std::string dir);

  bool enabled() const { return !dir_.empty(); }
  std::string path() const;
  std::optional<std::string> get(const std::string& key) const;
  void put(const std::string& key, const std::string& value);
  std::size_t size() const { return entries_.size(); }
  // Writes the entries added since loading (no-op when nothing is new or the cache is disabled).
  // A failure to write is only a warning: the cache is an optimization.
  void save();

 private:
  static std::map<std::string, std::string> read_file(const std::string& path);

  std::string dir_;
  std::map<std::string, std::string> entries_;
  std::map<std::string, std::string> added_;
};

}  // namespace sluice::cuda
