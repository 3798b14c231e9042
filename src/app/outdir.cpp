#include "app/outdir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace sluice {

std::string rank_file_path(const std::string& outdir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", rank);
  return outdir + "/" + name;
}

std::vector<std::string> list_rank_files(const std::string& outdir) {
  std::vector<std::string> files;
  DIR* d = opendir(outdir.c_str());
  if (!d) return files;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() == 13 && n.rfind("rank-", 0) == 0 && n.compare(10, 3, ".h5") == 0 &&
        std::all_of(n.begin() + 5, n.begin() + 10, ::isdigit))
      files.push_back(outdir + "/" + n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

std::string RunPlan::serialize() const {
  nlohmann::json j{{"attempt", attempt}, {"committed_before", committed_before}, {"pending", ranges_text(pending)},
                   {"resume_files", resume_files}};
  return j.dump();
}

RunPlan RunPlan::deserialize(const std::string& s) {
  const nlohmann::json j = nlohmann::json::parse(s);
  RunPlan p;
  p.attempt = j.at("attempt").get<int>();
  p.committed_before = j.at("committed_before").get<int64_t>();
  p.pending = parse_ranges(j.at("pending").get<std::string>());
  p.resume_files = j.at("resume_files").get<std::vector<std::string>>();
  return p;
}

namespace {

void make_dirs(const std::string& path) {
  std::string partial;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    partial += part;
    if (mkdir(partial.c_str(), 0775) != 0 && errno != EEXIST)
      throw InputError(str("cannot create the output folder ", path, ": ", std::strerror(errno)));
    partial += "/";
  }
  struct stat st{};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(str("the output path ", path, " exists and is not a folder"));
}

void check_writable(const std::string& dir) {
  const std::string probe = str(dir, "/.sluice-write-test-", getpid());
  const int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644);
  if (fd < 0) throw InputError(str("the output folder ", dir, " is not writable: ", std::strerror(errno)));
  close(fd);
  unlink(probe.c_str());
}

}  // namespace

RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking, const std::string& model_sha256,
                        const std::vector<DatasetSpec>& specs) {
  const std::string& dir = job.output;
  make_dirs(dir);
  check_writable(dir);

  RunPlan plan;
  const std::vector<Range> everything{{0, chunking.total}};
  std::vector<std::string> files = list_rank_files(dir);
  if (files.empty()) {
    if (job.resume) log_info("--resume: ", dir, " holds no rank files yet; starting a fresh run");
    plan.pending = everything;
    return plan;
  }
  if (job.sink == "null") {
    // Nothing is stored, so earlier outputs stay as they are and everything is pending.
    plan.pending = everything;
    return plan;
  }
  if (job.overwrite) {
    for (const auto& f : files) std::remove(f.c_str());
    std::remove((dir + "/outputs.h5").c_str());
    std::remove((dir + "/report.json").c_str());
    log_info("--overwrite: removed the ", files.size(), " rank file(s) of an earlier run in ", dir);
    plan.pending = everything;
    return plan;
  }
  if (!job.resume)
    throw InputError(str(dir, " already holds the outputs of a run (", files.size(),
                         " rank file(s)); pass --resume to finish it or --overwrite to replace it"));

  // Recovery and the pending ranges: every rank does its share, in plan_resume().
  plan.resume_files = files;
  return plan;
}

}  // namespace sluice
