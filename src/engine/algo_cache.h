#pragma once
// The on-disk cache of measured convolution algorithms.  Measuring every convolution at start-up
// takes seconds for a ResNet; a second start with the same GPU, driver, cuDNN version, precision and
// shapes reads the choice back instead.  One text file per cache folder: a header line naming the
// format, then one "key<TAB>value" line per entry.
//
// Ranks of one job and concurrent jobs share the file: a save takes an exclusive lock on a lock file
// beside it, merges its new entries into what is on disk then, and renames a temporary file over the
// old one, so no reader sees a half-written file and no writer drops another's entries.  A file that
// is damaged (a line without its tab, a cut-off last line) or foreign (another header) is ignored as
// a whole, with one warning, and rewritten at the next save.
//
// The file logic needs no GPU and is built with every backend, so its tests run anywhere; the cuda
// engine (engine/cuda/) fills and reads it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::cuda {

// What a measured choice depends on besides the layer itself.
struct AlgoCacheDevice {
  std::string gpu;            // the device's name ("NVIDIA H200")
  int sm_major = 0, sm_minor = 0;
  int driver = 0;             // cudaDriverGetVersion(): 12080 for 12.8
  std::string cudnn;          // "9.19.0"
  std::string precision;      // "bf16"
  bool deterministic = false; // only deterministic algorithms were candidates
};

// The part of every key that the device fields make, e.g. "NVIDIA H200|sm_90|driver 12080|cudnn
// 9.19.0|bf16"; tabs and newlines in the GPU's name become spaces.  The layer's shapes follow it.
std::string algo_cache_prefix(const AlgoCacheDevice& d);

// How thoroughly a cached choice was made, weakest first.  A cached choice is used when it was made
// at least as thoroughly as this start asks for; otherwise it is measured again and replaced, so a
// `--autotune full` start upgrades the entries a quick one wrote, and a quick start keeps them.
enum class TuneLevel { Heuristic = 0, Quick = 1, Full = 2 };

// A cache value: the level as a word before the choice ("quick 1 2 0"); full choices carry no word,
// which is also how every entry written before the levels existed reads (they were all measured in
// full).
std::string tuned_value(TuneLevel level, const std::string& choice);
struct Tuned {
  TuneLevel level = TuneLevel::Full;
  std::string choice;
};
Tuned parse_tuned(const std::string& value);

// The FLOPs at or below which a layer is too small to be worth timing: the smallest layers whose
// FLOPs add up to at most `share` of the total (layers of equal FLOPs all or none).  -1 when none
// qualifies; layers of unknown FLOPs (0 or less) are ignored and never negligible.
double negligible_flops(const std::vector<double>& flops, double share);

// Quick autotuning times a layer on the first samples of its batch only (the buffers are the real
// ones; the batch is the outermost axis in either layout): at least kTuningPositions output
// positions (samples x output pixels) and at least 1/kTuningBatchDivisor of the batch, so that the
// kernels still fill the GPU several times over and rank as at the full batch.  The full batch when
// it is no larger.
constexpr int64_t kTuningPositions = 65536;
constexpr int64_t kTuningBatchDivisor = 8;
int64_t tuning_batch(int64_t batch, int64_t positions_per_sample);

class AlgoCache {
 public:
  static constexpr const char* kFileName = "cudnn-algorithms.tsv";

  // dir "" disables the cache (get finds nothing, save writes nothing).  Reads the file if there is
  // one; a damaged or foreign one is ignored with one warning.
  explicit AlgoCache(std::string dir);

  bool enabled() const { return !dir_.empty(); }
  std::string path() const;
  std::optional<std::string> get(const std::string& key) const;
  void put(const std::string& key, const std::string& value);
  std::size_t size() const { return entries_.size(); }
  // The file was there but ignored (damaged or foreign); the next save rewrites it.
  bool discarded() const { return rewrite_; }
  // Writes the entries added since loading, merged with the file as it is now (no-op when nothing
  // is new, the file needs no rewrite, or the cache is disabled).  A failure to write is only a
  // warning: the cache is an optimization.
  void save();

 private:
  struct Loaded {
    std::map<std::string, std::string> entries;
    std::string problem;   // why the file was ignored ("" when it was read, or absent)
  };
  static Loaded read_file(const std::string& path);

  std::string dir_;
  std::map<std::string, std::string> entries_;
  std::map<std::string, std::string> added_;
  bool rewrite_ = false;
};

}  // namespace sluice::cuda
