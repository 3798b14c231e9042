#include "app/outdir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/folder_lock.h"
#include "core/error.h"
#include "core/log.h"

namespace sluice {

namespace fs = std::filesystem;

std::string rank_file_path(const std::string& outdir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", rank);
  return outdir + "/" + name;
}

namespace {

bool is_rank_file_name(const std::string& n) {
  return n.size() == 13 && n.rfind("rank-", 0) == 0 && n.compare(10, 3, ".h5") == 0 &&
         std::all_of(n.begin() + 5, n.begin() + 10, ::isdigit);
}

}  // namespace

std::vector<std::string> list_rank_files(const std::string& outdir) {
  std::vector<std::string> files;
  DIR* d = opendir(outdir.c_str());
  if (!d) return files;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (is_rank_file_name(n)) files.push_back(outdir + "/" + n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

std::string RunPlan::serialize() const {
  std::ostringstream os;
  os << attempt << " " << committed_before << " " << pending.size();
  for (int64_t id : pending) os << " " << id;
  os << " " << set_aside;
  return os.str();
}

RunPlan RunPlan::deserialize(const std::string& s) {
  std::istringstream is(s);
  RunPlan p;
  std::size_t n = 0;
  is >> p.attempt >> p.committed_before >> n;
  p.pending.resize(n);
  for (auto& id : p.pending) is >> id;
  is >> std::ws;
  std::getline(is, p.set_aside);
  return p;
}

void prepare_output_dir(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw InputError(str("--output ", path, " names a file, not a folder; choose a folder (it is created if needed)"));
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw InputError(str("cannot create the output folder ", path, ": ", ec.message()));
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(str("the output path ", path, " exists and is not a folder"));
  const std::string probe = str(path, "/.sluice-write-test-", getpid());
  const int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
  if (fd < 0) throw InputError(str("the output folder ", path, " is not writable: ", std::strerror(errno)));
  close(fd);
  unlink(probe.c_str());
}

namespace {

std::string spec_str(const std::vector<DatasetSpec>& specs) {
  std::string s;
  for (const auto& d : specs) s += str(d.name, ":", dtype_name(d.dtype), shape_str(d.row_shape), " ");
  return s;
}

// A report.json Sluice wrote (a --sink null run leaves one without rank files).
bool is_sluice_report(const std::string& path) {
  try {
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    return j.is_object() && j.contains("sluice_version") && j.contains("ranks") && j.contains("job");
  } catch (const std::exception&) {
    return false;
  }
}

struct FolderContents {
  std::vector<std::string> rank_files;  // names
  std::vector<std::string> run_files;   // outputs.h5 and report.json, when present
  std::vector<std::string> foreign;     // what Sluice did not write
  std::vector<std::string> records;     // attempts.json, failure notes, an export of the run: Sluice's
};

// The run's other records: the attempts (report/attempts.h), the failure notes a failing rank
// leaves, temporary files of an interrupted write, and `sluice export`'s default folder.
bool is_run_record(const std::string& dir, const std::string& n) {
  auto ends_with = [&](const char* suffix) {
    const std::size_t k = std::strlen(suffix);
    return n.size() >= k && n.compare(n.size() - k, k, suffix) == 0;
  };
  if (n == "attempts.json" || n == "attempts.json.tmp" || n == "report.json.tmp") return true;
  if (n.rfind("attempt-", 0) == 0 && ends_with(".failed")) return true;
  if (n == "export" && fs::exists(dir + "/export/.sluice-export.json")) return true;
  return false;
}

FolderContents look_into(const std::string& dir) {
  FolderContents c;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (is_rank_file_name(n)) c.rank_files.push_back(n);
    else if (n == "outputs.h5" || n == "report.json") c.run_files.push_back(n);
    else if (n == kLockFile || n.rfind(kSetAsidePrefix, 0) == 0 || n.rfind(".sluice-write-test-", 0) == 0) continue;
    else if (is_run_record(dir, n)) c.records.push_back(n);
    else c.foreign.push_back(n);
  }
  // Without rank files, an outputs.h5 cannot be ours, and a report.json only if it reads as one.
  if (c.rank_files.empty())
    for (const std::string& n : c.run_files)
      if (n == "outputs.h5" || !is_sluice_report(dir + "/" + n)) c.foreign.push_back(n);
  std::sort(c.rank_files.begin(), c.rank_files.end());
  std::sort(c.foreign.begin(), c.foreign.end());
  return c;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += str(i ? ", " : "", names[i]);
  if (names.size() > 5) s += str(", ... (", names.size(), " in all)");
  return s;
}

// `key = value` lines of a job's TOML text.
std::map<std::string, std::string> job_keys(const std::string& toml) {
  std::map<std::string, std::string> m;
  std::istringstream is(toml);
  std::string line;
  while (std::getline(is, line)) {
    const std::size_t eq = line.find(" = ");
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return m;
}

// The job keys whose change would mix two different computations in one run folder.
std::vector<std::string> keys_that_must_match(const JobConfig& job) {
  std::vector<std::string> keys = {"input", "input-dataset", "batch-size", "scale", "mean", "std"};
  if (job.input == "synthetic") keys.insert(keys.end(), {"sample-shape", "input-dtype", "seed"});
  return keys;
}

// --resume: the earlier run in `f` must be this job, or the folder would mix two.
void check_same_job(const std::string& f, const RankFileInfo& info, const JobConfig& job, const Chunking& chunking,
                    const JobIdentity& id) {
  const std::string name = fs::path(f).filename().string();
  if (info.model_sha256 != id.model_sha256)
    throw InputError(str("--resume: ", name, " was written by another model (sha256 ", info.model_sha256.substr(0, 12),
                         "..., this job's model is ", id.model_sha256.substr(0, 12), "...)"));
  if (info.total_samples != chunking.total || info.chunk_samples != chunking.chunk_samples)
    throw InputError(str("--resume: ", name, " belongs to a job of ", info.total_samples, " samples in chunks of ",
                         info.chunk_samples, "; this job has ", chunking.total, " samples in chunks of ",
                         chunking.chunk_samples, " (keep --samples, --batch-size and --chunk-batches)"));
  if (spec_str(info.datasets) != spec_str(id.specs))
    throw InputError(str("--resume: ", name, " stores ", spec_str(info.datasets), "but this job stores ",
                         spec_str(id.specs), "(keep --outputs, --output-dtype and --top-k)"));
  const auto before = job_keys(info.job_text), now = job_keys(id.job_toml);
  for (const std::string& k : keys_that_must_match(job)) {
    const auto b = before.find(k), n = now.find(k);
    if (b == before.end() || n == now.end() || b->second == n->second) continue;
    throw InputError(str("--resume: ", name, " was written with ", k, " = ", b->second, " but this job has ", k, " = ",
                         n->second, "; the folder would mix two computations (resume with the earlier value, or ",
                         "start over with --overwrite)"));
  }
  if (!info.input_fingerprint.empty() && !id.input_fingerprint.empty() && info.input_fingerprint != id.input_fingerprint)
    throw InputError(str("--resume: the input changed since ", name, " was written (it read ", info.input_fingerprint,
                         "; now ", id.input_fingerprint, "); resume only over the same input, or start over with --overwrite"));
}

// The chunks no ledger holds (every chunk of a fresh run).
void all_pending(RunPlan& plan, const Chunking& chunking) {
  plan.pending.clear();
  for (int64_t c = 0; c < chunking.chunks(); ++c) plan.pending.push_back(c);
}

RunPlan plan_resume(const std::string& dir, const std::vector<std::string>& names, const JobConfig& job,
                    const Chunking& chunking, const JobIdentity& id) {
  RunPlan plan;
  std::set<int64_t> done;
  for (const auto& n : names) {
    const std::string f = dir + "/" + n;
    RankFileInfo info = read_rank_file(f);
    // The folder's lock is held, so no writer of this folder is alive: a file left open was killed.
    if (!info.closed_cleanly) {
      log_info("recovering ", f, " (its writer stopped without closing it)");
      recover_rank_file(f);
      info = read_rank_file(f);
    }
    check_same_job(f, info, job, chunking, id);
    for (const auto& c : info.chunks) {
      if (!done.insert(c.chunk_id).second)
        throw InputError(str("--resume: chunk ", c.chunk_id, " is committed twice (in ", f, " and another rank file)"));
      plan.committed_before += c.count;
    }
    plan.attempt = std::max(plan.attempt, info.attempt + 1);
  }
  for (int64_t c = 0; c < chunking.chunks(); ++c)
    if (!done.count(c)) plan.pending.push_back(c);
  log_info("--resume: ", done.size(), " of ", chunking.chunks(), " chunks already committed; ", plan.pending.size(),
           " to do");
  return plan;
}

}  // namespace

RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking, const JobIdentity& identity) {
  const std::string& dir = job.output;
  const FolderContents c = look_into(dir);
  if (!c.foreign.empty() && !job.overwrite)
    throw InputError(str("the output folder ", dir, " holds files Sluice did not write (", listed(c.foreign),
                         "); choose a new or empty folder, or pass --overwrite to replace them"));

  RunPlan plan;
  if (job.overwrite) {
    // Sluice's file names only: other files of the folder stay where they are.
    std::vector<std::string> ours = c.rank_files;
    for (const std::string& n : {"outputs.h5", "report.json"})
      if (fs::exists(dir + "/" + n)) ours.push_back(n);
    ours.insert(ours.end(), c.records.begin(), c.records.end());
    if (!ours.empty()) {
      plan.set_aside = set_aside(dir, ours);
      log_info("--overwrite: moved the ", ours.size(), " file(s) of the earlier run into ", plan.set_aside,
               "; they are deleted once this run commits its first chunk");
    }
    all_pending(plan, chunking);
    return plan;
  }
  if (c.rank_files.empty() || job.sink == "null") {
    // Nothing to continue (a --sink null run stores nothing, so earlier outputs stay as they are).
    if (job.resume && c.rank_files.empty()) log_info("--resume: ", dir, " holds no rank files yet; starting a fresh run");
    all_pending(plan, chunking);
    return plan;
  }
  if (!job.resume)
    throw InputError(str(dir, " already holds the outputs of a run (", c.rank_files.size(),
                         " rank file(s)); pass --resume to finish it or --overwrite to replace it"));
  return plan_resume(dir, c.rank_files, job, chunking, identity);
}

}  // namespace sluice
