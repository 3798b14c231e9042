#pragma once
// What a pipeline run counted and timed: the report's per-rank figures and time-series points.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

constexpr std::size_t kNamedBadSamples = 20;   // bad files a rank names in the report
constexpr int64_t kWarnedBadSamples = 10;      // bad files a rank names in a warning line as it goes

// What one rank did.  Busy fractions are stage time over the rank's wall time; stalls are the time
// the driver waited for a filled in-slot (input) or a free out-slot (output).  Every timed field
// (the seconds below wall_s and first_batch_s) has its row in kTimedFields.
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

// One timed field of PipelineStats and how the report shows it.  This table alone lists the
// stages: the report's JSON (seconds, busy, stall), reading it back, the table printed at the end
// of a run, the time series and the limit line all walk it, so a new stage is one field above and
// one row below.
struct TimedField {
  enum Kind {
    kStage,   // a pipeline stage: a busy fraction, a series of busy seconds, a candidate for the limit
    kStall,   // the driver waiting: a stall fraction and a series under "stall"
    kPart,    // a share of another field's seconds (only under "seconds")
  };
  enum Threads { kOne, kReaders, kWriters };   // whose threads the seconds are summed over

  const char* name;                 // the key under "seconds" (and "busy" for a stage)
  double PipelineStats::*seconds;
  Kind kind;
  const char* stall = nullptr;      // a stall's key under "stall" (input, output)
  const char* column = nullptr;     // its column in the printed table, or none
  bool since_first_report = true;   // false: older reports lack it (read back as 0)
  const char* bound = nullptr;      // a stage's word in the limit line ("compute-bound", ...)
  Threads threads = kOne;
};

// In the table's column order.  The limit line names the busiest stage; on a tie compute wins,
// then the earlier row.
inline constexpr std::array<TimedField, 10> kTimedFields{{
    {"read", &PipelineStats::read_s, TimedField::kStage, nullptr, "read", true, "input-bound", TimedField::kReaders},
    {"decode_cpu", &PipelineStats::decode_cpu_s, TimedField::kPart, nullptr, nullptr, false},
    {"decode", &PipelineStats::decode_s, TimedField::kStage, nullptr, nullptr, false, "input-bound"},
    {"h2d", &PipelineStats::h2d_s, TimedField::kStage, nullptr, "h2d", true, "copy-bound"},
    {"compute", &PipelineStats::compute_s, TimedField::kStage, nullptr, "comp", true, "compute-bound"},
    {"d2h", &PipelineStats::d2h_s, TimedField::kStage, nullptr, "d2h", true, "copy-bound"},
    {"write", &PipelineStats::write_s, TimedField::kStage, nullptr, "write", true, "output-bound"},
    {"encode", &PipelineStats::encode_s, TimedField::kStage, nullptr, nullptr, false, "output-bound",
     TimedField::kWriters},
    {"stall_input", &PipelineStats::stall_input_s, TimedField::kStall, "input", "st.in"},
    {"stall_output", &PipelineStats::stall_output_s, TimedField::kStall, "output", "st.out"},
}};

// A double added to PipelineStats without its row above fails here.
static_assert(sizeof(PipelineStats) ==
                  5 * sizeof(int64_t) + sizeof(std::vector<std::string>) + (2 + kTimedFields.size()) * sizeof(double),
              "every timed field of PipelineStats needs its row in kTimedFields");

}  // namespace sluice
