// `sluice run --dry-run` (and `sluice explain-job FILE`): what a job would do, without doing it.
// The input is opened and the model loaded and prepared exactly as a run would (so every set-up
// error shows here too), but no engine is built, no folder is created and nothing is written.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "app/job_options.h"
#include "app/outdir.h"
#include "app/run_context.h"
#include "core/error.h"

namespace sluice {

namespace {

std::string human_bytes(double b) {
  const char* unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (b >= 1000 && u < 5) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return buf;
}

// What a run would find in the folder and do with it (no recovery, no change).
std::string folder_state(const JobConfig& job) {
  if (job.sink == "null" && !job.output_given) return "none: --sink null without --output writes nothing";
  struct stat st {};
  if (stat(job.output.c_str(), &st) != 0) return "a new folder (it does not exist yet)";
  if (!S_ISDIR(st.st_mode)) return "REFUSED: the path exists and is not a folder";
  const std::vector<std::string> files = list_rank_files(job.output);
  if (files.empty()) return "an existing folder without rank files: a fresh run";
  if (job.sink == "null") return str("it holds ", files.size(), " rank file(s), left alone (--sink null stores nothing)");
  const bool done = stat((job.output + "/outputs.h5").c_str(), &st) == 0;
  const std::string what = str("it holds ", files.size(), " rank file(s) of ", done ? "a complete run" : "an unfinished run");
  if (job.overwrite) return what + ": --overwrite replaces them once this job passes its checks";
  if (job.resume) return what + ": --resume checks they belong to this job and does only what no ledger holds";
  return what + ": REFUSED without --resume (finish it) or --overwrite (replace it)";
}

}  // namespace

std::string RunContext::explain(const std::vector<std::pair<std::string, std::string>>& origins) const {
  std::ostringstream os;
  os << "sluice run --dry-run: what this job would do (nothing was written)\n\n";
  os << "The job (key = value   [where the value comes from]   what it does):\n";
  for (const JobField& f : job_fields(job_)) {
    std::string from = "default";
    for (const auto& o : origins)
      if (o.first == f.key) from = o.second;
    os << "  " << f.key << " = " << f.value << "   [" << from << "]\n      " << f.help << "\n";
  }
  os << "\nInput: " << source_->describe() << " (" << chunking_.total << " samples)\n";
  os << "Model: " << job_.model << " (sha256 " << model_sha256_.substr(0, 12) << "...), prepared for batch "
     << job_.batch_size << ": input " << dtype_name(graph_.inputs.at(0).dtype) << shape_str(graph_.inputs.at(0).shape) << "\n";
  os << "Work: " << (chunking_.total + job_.batch_size - 1) / job_.batch_size << " batches of " << job_.batch_size
     << ", shared among the ranks by ranges (" << job_.sharding << "), committed every " << job_.chunk_batches
     << " batch(es) (" << chunking_.chunk_samples << " samples)\n";
  os << "\nOutput folder: " << absolute_path(job_.output) << "\n  " << folder_state(job_) << "\n";
  if (job_.sink == "hdf5") {
    double total = 0;
    os << "It would write:\n";
    os << "  rank-NNNNN.h5   one per rank (" << mpi_.world_size() << " in this launch), each holding its rows of:\n";
    for (const DatasetSpec& d : specs_) {
      Shape full = {chunking_.total};
      full.insert(full.end(), d.row_shape.begin(), d.row_shape.end());
      const double bytes = static_cast<double>(d.row_bytes()) * static_cast<double>(chunking_.total);
      total += bytes;
      os << "    /outputs/" << d.name << "  " << dtype_name(d.dtype) << shape_str(full) << "  " << human_bytes(bytes)
         << (d.deflate ? str(" before deflate level ", d.deflate) : std::string()) << "\n";
    }
    os << "    /sample_index, /sample_key, /sample_status   each row's global index, key and status\n";
    os << "    /ledger          the commits (one record per commit of consecutive samples)\n";
    os << "  outputs.h5      the same datasets [N, ...] in sample order, mapped onto the rank files (no copy)\n";
    os << "  report.json     the report (also printed); attempts.json: every attempt of the job\n";
    os << "  in all about " << human_bytes(total) << " of outputs\n";
  } else {
    os << "It would write: nothing but " << (job_.output_given ? "report.json" : "the printed report")
       << " (--sink null copies the outputs to host memory and drops them)\n";
  }
  return os.str();
}

}  // namespace sluice
