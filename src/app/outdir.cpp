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
  nlohmann::json j{{"attempt", attempt}, {"committed_before", committed_before}, {"pending", ranges_text(pending)},
                   {"resume_files", resume_files}, {"set_aside", set_aside}, {"last_commit_unix", last_commit_unix},
                   {"keep_report", keep_report}};
  return j.dump();
}

RunPlan RunPlan::deserialize(const std::string& s) {
  const nlohmann::json j = nlohmann::json::parse(s);
  RunPlan p;
  p.attempt = j.at("attempt").get<int>();
  p.committed_before = j.at("committed_before").get<int64_t>();
  p.pending = parse_ranges(j.at("pending").get<std::string>());
  p.resume_files = j.at("resume_files").get<std::vector<std::string>>();
  p.set_aside = j.value("set_aside", std::string());
  p.last_commit_unix = j.value("last_commit_unix", 0.0);
  p.keep_report = j.value("keep_report", false);
  return p;
}

void prepare_output_dir(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw InputError(str("--output ", path, " names a file, not a folder; choose a folder (it is created if needed)"));
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec)
    throw InputError(str("cannot create the output folder ", path, ": ", ec.message()),
                     "check that its parent folder exists and is writable, or choose another --output");
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(str("the output path ", path, " exists and is not a folder"));
  const std::string probe = str(path, "/.sluice-write-test-", getpid());
  const int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
  if (fd < 0) throw InputError(str("the output folder ", path, " is not writable: ", std::strerror(errno)));
  close(fd);
  unlink(probe.c_str());
}

namespace {

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

bool ends_with_text(const std::string& s, const char* suffix) {
  const std::size_t k = std::strlen(suffix);
  return s.size() >= k && s.compare(s.size() - k, k, suffix) == 0;
}

// The run's other records: the attempts (report/attempts.h), the saved job, the failure notes a
// failing rank leaves, temporary files of an interrupted write, and the default export folder.
bool is_run_record(const std::string& dir, const std::string& n) {
  auto ends_with = [&](const char* suffix) {
    const std::size_t k = std::strlen(suffix);
    return n.size() >= k && n.compare(n.size() - k, k, suffix) == 0;
  };
  if (n == "attempts.json" || n == "attempts.json.tmp" || n == "report.json.tmp") return true;
  if (n.rfind("attempts.json.tmp-rank-", 0) == 0) return true;  // a failing rank's (report/attempts.h)
  if (n == "job.toml" || n == "job.toml.tmp") return true;  // the resolved job, for a bare --resume
  if (n.rfind("attempt-", 0) == 0 && (ends_with(".failed") || ends_with(".stopping"))) return true;
  // Recovery's own: a damaged rank file kept beside its salvage, one being recovered (io/recover.cpp).
  for (const char* suffix : {".damaged", ".recovering"}) {
    const std::size_t k = std::strlen(suffix);
    if (ends_with(suffix) && is_rank_file_name(n.substr(0, n.size() - k))) return true;
  }
  // `sluice export`'s default folder, or `sluice run --export`'s (export/live_export.h marks it).
  if (n == "export" && fs::exists(dir + "/export/.sluice-export.json")) return true;
  if (n == "export" && fs::exists(dir + "/export/.sluice-run-export.json")) return true;
  if (n == "export" && fs::is_directory(dir + "/export")) {
    // A run killed while it set up its export folder: nothing there yet but its temporaries.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir + "/export", ec))
      if (!ends_with_text(e.path().filename().string(), ".sluice-partial")) return false;
    return !ec;
  }
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

// Every sample pending (a fresh run).
void all_pending(RunPlan& plan, const Chunking& chunking) { plan.pending = {{0, chunking.total}}; }

}  // namespace

RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking) {
  const std::string& dir = job.output;
  const FolderContents c = look_into(dir);
  if (!c.foreign.empty() && !job.overwrite)
    throw InputError(str("the output folder ", dir, " holds files Sluice did not write (", listed(c.foreign),
                         "); choose a new or empty folder, or pass --overwrite to replace them"));

  RunPlan plan;
  if (job.overwrite) {
    // Sluice's file names only: other files of the folder stay where they are.
    std::vector<std::string> ours = c.rank_files;
    for (const char* n : {"outputs.h5", "report.json"})
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
  if (job.sink == "null" && job.resume && !c.rank_files.empty())
    throw UsageError(str("--resume --sink null cannot finish the run in ", dir, " (", c.rank_files.size(),
                         " rank file(s)): --sink null stores no outputs, so the samples it lacks would stay missing"),
                     "drop --sink null to finish the run, or drop --resume (and choose another --output) to benchmark "
                     "without storing");
  if (c.rank_files.empty() || job.sink == "null") {
    // Nothing to continue (a --sink null run stores nothing, so earlier outputs stay as they are,
    // and so does their report.json: this job's report is printed only).
    if (job.resume && c.rank_files.empty()) log_info("--resume: ", dir, " holds no rank files yet; starting a fresh run");
    if (!c.rank_files.empty()) {
      plan.keep_report = true;
      log_info("--sink null: ", dir, " holds the rank files of a run; they and its report.json stay as they are (this "
               "job's report is printed, not written)");
    }
    all_pending(plan, chunking);
    return plan;
  }
  if (!job.resume)
    throw InputError(str(dir, " already holds the outputs of a run (", c.rank_files.size(),
                         " rank file(s)); pass --resume to finish it or --overwrite to replace it"));
  // Recovery, the checks that the files belong to this job and the pending ranges: every rank does
  // its share, in plan_resume() (app/ledgers.h).
  for (const std::string& n : c.rank_files) plan.resume_files.push_back(dir + "/" + n);
  return plan;
}

}  // namespace sluice
