#include "app/outdir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

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
  std::ostringstream os;
  os << attempt << " " << committed_before << " " << pending.size();
  for (int64_t id : pending) os << " " << id;
  return os.str();
}

RunPlan RunPlan::deserialize(const std::string& s) {
  std::istringstream is(s);
  RunPlan p;
  std::size_t n = 0;
  is >> p.attempt >> p.committed_before >> n;
  p.pending.resize(n);
  for (auto& id : p.pending) is >> id;
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

std::string spec_str(const std::vector<DatasetSpec>& specs) {
  std::string s;
  for (const auto& d : specs) s += str(d.name, ":", dtype_name(d.dtype), shape_str(d.row_shape), " ");
  return s;
}

}  // namespace

RunPlan plan_output_dir(const JobConfig& job, const Chunking& chunking, const std::string& model_sha256,
                        const std::vector<DatasetSpec>& specs) {
  const std::string& dir = job.output;
  make_dirs(dir);
  check_writable(dir);

  RunPlan plan;
  std::vector<std::string> files = list_rank_files(dir);
  if (files.empty()) {
    if (job.resume) log_info("--resume: ", dir, " holds no rank files yet; starting a fresh run");
    for (int64_t c = 0; c < chunking.chunks(); ++c) plan.pending.push_back(c);
    return plan;
  }
  if (job.sink == "null") {
    // Nothing is stored, so earlier outputs stay as they are and everything is pending.
    for (int64_t c = 0; c < chunking.chunks(); ++c) plan.pending.push_back(c);
    return plan;
  }
  if (job.overwrite) {
    for (const auto& f : files) std::remove(f.c_str());
    std::remove((dir + "/outputs.h5").c_str());
    std::remove((dir + "/report.json").c_str());
    log_info("--overwrite: removed the ", files.size(), " rank file(s) of an earlier run in ", dir);
    for (int64_t c = 0; c < chunking.chunks(); ++c) plan.pending.push_back(c);
    return plan;
  }
  if (!job.resume)
    throw InputError(str(dir, " already holds the outputs of a run (", files.size(),
                         " rank file(s)); pass --resume to finish it or --overwrite to replace it"));

  std::set<int64_t> done;
  for (const auto& f : files) {
    RankFileInfo info = read_rank_file(f);
    if (!info.closed_cleanly) {
      log_info("recovering ", f, " (its writer stopped without closing it)");
      recover_rank_file(f);
      info = read_rank_file(f);
    }
    if (info.model_sha256 != model_sha256)
      throw InputError(str("--resume: ", f, " was written by another model (sha256 ", info.model_sha256.substr(0, 12),
                           "..., this job's model is ", model_sha256.substr(0, 12), "...)"));
    if (info.total_samples != chunking.total || info.chunk_samples != chunking.chunk_samples)
      throw InputError(str("--resume: ", f, " belongs to a job of ", info.total_samples, " samples in chunks of ",
                           info.chunk_samples, "; this job has ", chunking.total, " samples in chunks of ",
                           chunking.chunk_samples, " (keep --samples, --batch-size and --chunk-batches)"));
    if (spec_str(info.datasets) != spec_str(specs))
      throw InputError(str("--resume: ", f, " stores ", spec_str(info.datasets), "but this job stores ", spec_str(specs),
                           "(keep --outputs and --output-dtype)"));
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

}  // namespace sluice
