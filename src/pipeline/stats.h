#pragma once
// What a pipeline run counted and timed: the report's per-rank figures and time-series points.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// What one rank did.  Busy fractions are stage time over the rank's wall time; stalls are the time
// the driver waited for a filled in-slot (input) or a free out-slot (output).
constexpr std::size_t kNamedBadSamples = 20;   // bad files a rank names in the report
constexpr int64_t kWarnedBadSamples = 10;      // bad files a rank names in a warning line as it goes

struct PipelineStats {
  int64_t samples = 0, batches = 0, chunks = 0;   // chunks: commits (ledger records)
  int64_t nonfinite_rows = 0; // rows whose input held NaN or Inf (RowStatus kRowNonFinite)
  int64_t bad_samples = 0;    // image files that could not be read or decoded (zeros fed, status 1)
  std::vector<std::string> bad_named;  // the first kNamedBadSamples of them, "key: reason"
  double wall_s = 0;          // from the pipeline's start to the last commit
  double first_batch_s = 0;   // start until the first batch was written (warm-up, reported apart)
  double read_s = 0;          // reader busy time, summed over reader threads
  double h2d_s = 0, compute_s = 0, d2h_s = 0;   // device time of each stage (events)
  double decode_s = 0;        // decoding images: device time (events) plus CPU decoding in the readers
  double decode_cpu_s = 0;    // the CPU part of decode_s (summed over reader threads)
  double write_s = 0;         // writer busy time (storing rows and commits)
  double encode_s = 0;        // compression busy time, summed over encoder threads (0: not compressed)
  double stall_input_s = 0, stall_output_s = 0;
};

}  // namespace sluice
