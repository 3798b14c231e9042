#include "app/ledgers.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "core/log.h"
#include "core/ranges.h"
#include "core/timer.h"
#include "io/file_identity.h"

namespace sluice {

namespace {

using nlohmann::json;

json summary_json(const RankFileInfo& f) {
  json runs = json::array();
  double last_commit = 0;
  for (const ChunkRecord& r : f.chunks) last_commit = std::max(last_commit, r.time);
  for (const ChunkRecord& r : merged_runs(f.chunks)) runs.push_back({r.first_index, r.count, r.first_row});
  json datasets = json::array();
  for (const DatasetSpec& d : f.datasets)
    datasets.push_back(
        {{"name", d.name}, {"dtype", dtype_name(d.dtype)}, {"shape", d.row_shape}, {"deflate", d.deflate}});
  return {{"path", f.path},
          {"rank", f.rank},
          {"world_size", f.world_size},
          {"format", f.format},
          {"attempt", f.attempt},
          {"model_sha256", f.model_sha256},
          {"input_fingerprint", f.input_fingerprint},
          {"job_text", f.job_text},
          {"total_samples", f.total_samples},
          {"chunk_samples", f.chunk_samples},
          {"chunk_rows", f.chunk_rows},
          {"committed_rows", f.committed_rows},
          {"file_rows", f.file_rows},
          {"closed_cleanly", f.closed_cleanly},
          {"commits", f.chunks.size()},
          {"datasets", datasets},
          {"row_datasets", f.row_datasets},
          {"last_commit", last_commit},
          {"runs", runs}};
}

RankFileInfo summary_from_json(const json& j) {
  RankFileInfo f;
  f.path = j.at("path").get<std::string>();
  f.rank = j.at("rank").get<int>();
  f.world_size = j.at("world_size").get<int>();
  f.format = j.at("format").get<int>();
  f.attempt = j.at("attempt").get<int>();
  f.model_sha256 = j.at("model_sha256").get<std::string>();
  f.input_fingerprint = j.value("input_fingerprint", std::string());
  f.job_text = j.value("job_text", std::string());
  f.total_samples = j.at("total_samples").get<int64_t>();
  f.chunk_samples = j.at("chunk_samples").get<int64_t>();
  f.chunk_rows = j.at("chunk_rows").get<int64_t>();
  f.committed_rows = j.at("committed_rows").get<int64_t>();
  f.file_rows = j.at("file_rows").get<int64_t>();
  f.closed_cleanly = j.at("closed_cleanly").get<bool>();
  for (const json& d : j.at("datasets")) {
    DatasetSpec s;
    s.name = d.at("name").get<std::string>();
    s.dtype = dtype_from_name(d.at("dtype").get<std::string>());
    s.row_shape = d.at("shape").get<Shape>();
    s.deflate = d.at("deflate").get<int>();
    f.datasets.push_back(s);
  }
  f.row_datasets = j.at("row_datasets").get<std::vector<std::string>>();
  const double last_commit = j.value("last_commit", 0.0);
  for (const json& r : j.at("runs"))
    f.chunks.push_back(ChunkRecord{-1, r.at(0).get<int64_t>(), r.at(1).get<int64_t>(), r.at(2).get<int64_t>(), last_commit});
  return f;
}

std::string spec_str(const std::vector<DatasetSpec>& specs) {
  std::string s;
  for (const auto& d : specs) s += str(d.name, ":", dtype_name(d.dtype), shape_str(d.row_shape), " ");
  return s;
}

// After a collective step: rank 0's `verdict` ("" = fine, else {"code", "message"}) reaches every
// rank, and every rank throws the same error.
void agree_on(const MpiContext& mpi, std::string verdict) {
  verdict = mpi.broadcast_string(verdict);
  if (verdict.empty()) return;
  const json v = json::parse(verdict);
  throw Error(v.at("message").get<std::string>(), v.at("code").get<int>(), v.value("hint", std::string()));
}

std::string verdict_of(const Error& e) {
  return dump_json(json{{"code", e.exit_code()}, {"message", e.what()}, {"hint", e.hint()}});
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
  std::vector<std::string> keys = {"input", "input-dataset", "batch-size", "scale", "mean", "std",
                                   "resize", "center-crop", "interpolation", "letterbox", "pad-value",
                                   "resize-shortest", "max-size", "size-multiple", "pad-mean",
                                   "precision"};
  if (job.input == "synthetic") keys.insert(keys.end(), {"sample-shape", "input-dtype", "seed"});
  keys.push_back("model-output");
  // Text inputs: what the passages become (the tokenizer by path and by its file's digest).
  keys.insert(keys.end(), {"text-field", "tokenizer", kTokenizerDigestKey, "max-length", "prompt", "pooling"});
  // A passage's padding follows its batch's cut, which changes the last bits of its vector.
  keys.push_back("max-tokens-per-batch");
  const auto asks = [&](const char* o) { return std::find(job.outputs.begin(), job.outputs.end(), o) != job.outputs.end(); };
  if (asks("embedding")) keys.push_back("normalize");
  if (asks("detections")) keys.insert(keys.end(), {"detection-format", "score-threshold", "iou-threshold"});
  return keys;
}

// Rank 0: the files must all belong to this job, or the folder would mix two computations.
void check_same_job(const std::vector<RankFileInfo>& files, const JobConfig& job, const Chunking& chunking,
                    const JobIdentity& id) {
  bool warned = false;  // --accept-changed-input: one warning, not one per rank file
  for (const RankFileInfo& f : files) {
    const std::string name = std::filesystem::path(f.path).filename().string();
    if (f.model_sha256 != id.model_sha256)
      throw InputError(str("--resume: ", name, " was written by another model (sha256 ", f.model_sha256.substr(0, 12),
                           "..., this job's model is ", id.model_sha256.substr(0, 12), "...)"),
                       "resume with the same model file, or start over with --overwrite");
    if (spec_str(f.datasets) != spec_str(id.specs))
      throw InputError(str("--resume: ", name, " stores ", spec_str(f.datasets), "but this job stores ", spec_str(id.specs)),
                       "keep --outputs, --output-dtype and --top-k of the earlier run");
    const auto before = job_keys(f.job_text), now = job_keys(id.job_toml);
    for (const std::string& k : keys_that_must_match(job)) {
      const auto b = before.find(k), n = now.find(k);
      if (b == before.end() || n == now.end() || b->second == n->second) continue;
      if (k == kTokenizerDigestKey)
        throw InputError(str("--resume: the tokenizer file changed since ", name, " was written (sha256 ",
                             b->second.substr(0, 13), "...\", now ", n->second.substr(0, 13),
                             "...\"); its committed rows were tokenized by the file as it was then"),
                         "restore the tokenizer file, or start over with --overwrite");
      throw InputError(str("--resume: ", name, " was written with ", k, " = ", b->second, " but this job has ", k, " = ",
                           n->second, "; the folder would mix two computations"),
                       "resume with the earlier value, or start over with --overwrite");
    }
    if (f.total_samples != chunking.total || f.chunk_rows != chunking.batch)
      throw InputError(str("--resume: ", name, " belongs to a job of ", f.total_samples, " samples in batches of ",
                           f.chunk_rows, "; this job has ", chunking.total, " samples in batches of ", chunking.batch),
                       "keep --samples and --batch-size of the earlier run");
    if (f.input_fingerprint.empty() || id.input_fingerprint.empty()) continue;
    const std::string changed = fingerprint_difference(f.input_fingerprint, id.input_fingerprint);
    if (changed.empty()) continue;
    if (!job.accept_changed_input)
      throw InputError(str("--resume: the input changed since ", name, " was written: ", changed,
                           "; its committed rows were computed from the input as it was then"),
                       "restore the input, or pass --accept-changed-input to keep those rows and compute the rest "
                       "from the input as it is now, or start over with --overwrite");
    if (!warned) log_warn("--resume --accept-changed-input: the input changed since ", name, " was written (", changed,
                          "); its committed rows are kept as they are");
    warned = true;
  }
}

}  // namespace

std::vector<RankFileInfo> read_ledgers(const MpiContext& mpi, const std::vector<std::string>& paths, bool recover) {
  const int rank = mpi.rank(), world = mpi.world_size();
  json mine = json::array();
  std::string failure;
  try {
    for (std::size_t i = static_cast<std::size_t>(rank); i < paths.size(); i += static_cast<std::size_t>(world)) {
      if (recover) {
        const std::string note = recover_rank_file(paths[i]);
        if (note.find("damaged") != std::string::npos || note.find("cannot be read") != std::string::npos)
          log_warn(note);
        else if (!note.empty())
          log_info(note);
        if (access(paths[i].c_str(), F_OK) != 0) continue;  // moved aside: its samples are redone
      }
      json s = summary_json(read_rank_file(paths[i]));
      s["index"] = i;
      mine.push_back(std::move(s));
    }
  } catch (const Error& e) {
    failure = verdict_of(e);
  } catch (const std::exception& e) {
    failure = verdict_of(Error(e.what()));
  }
  const std::vector<std::string> all = mpi.gather_strings(failure.empty() ? dump_json(mine) : "!" + failure);
  std::vector<RankFileInfo> infos;
  std::string verdict;
  if (rank == 0) {
    std::vector<std::pair<std::size_t, RankFileInfo>> indexed;
    for (const std::string& s : all) {
      if (!s.empty() && s[0] == '!') {
        if (verdict.empty()) verdict = s.substr(1);
        continue;
      }
      for (const json& j : json::parse(s)) indexed.emplace_back(j.at("index").get<std::size_t>(), summary_from_json(j));
    }
    std::sort(indexed.begin(), indexed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [i, info] : indexed) infos.push_back(std::move(info));
  }
  agree_on(mpi, verdict);
  return infos;
}

void plan_resume(const MpiContext& mpi, const JobConfig& job, const Chunking& chunking, const JobIdentity& id,
                 RunPlan& plan) {
  const auto t0 = Clock::now();
  const std::vector<RankFileInfo> files = read_ledgers(mpi, plan.resume_files, /*recover=*/true);
  std::string serialized, verdict;
  if (mpi.rank() == 0) {
    try {
      check_same_job(files, job, chunking, id);
      // The union of every file's runs; a sample committed in two files means the folder holds
      // files of two runs (a copy, a mix-up), which no resume can sort out by itself.
      std::vector<std::pair<Range, std::size_t>> runs;
      int64_t records = 0;
      for (std::size_t f = 0; f < files.size(); ++f) {
        plan.attempt = std::max(plan.attempt, files[f].attempt + 1);
        for (const ChunkRecord& r : files[f].chunks) runs.push_back({{r.first_index, r.first_index + r.count}, f});
        records += static_cast<int64_t>(files[f].chunks.size());
      }
      std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first.first < b.first.first; });
      for (std::size_t k = 1; k < runs.size(); ++k)
        if (runs[k].first.first < runs[k - 1].first.end)
          throw InputError(str("--resume: samples [", runs[k].first.first, ", ",
                               std::min(runs[k].first.end, runs[k - 1].first.end), ") are committed in both ",
                               files[runs[k - 1].second].path, " and ", files[runs[k].second].path,
                               ": the folder mixes two runs; move one of them away"));
      std::vector<Range> held;
      for (const auto& r : runs) held.push_back(r.first);
      held = merge_ranges(std::move(held));
      plan.committed_before = total_size(held);
      for (const RankFileInfo& f : files)
        for (const ChunkRecord& r : f.chunks) plan.last_commit_unix = std::max(plan.last_commit_unix, r.time);
      plan.pending = complement(held, chunking.total);
      plan.resume_files.clear();
      log_info("--resume: ", plan.committed_before, " of ", chunking.total, " samples already committed (",
               records, " runs in ", files.size(), " rank file(s)); ", total_size(plan.pending), " to do in ",
               plan.pending.size(), " range(s); planned in ", seconds_since(t0), " s");
      serialized = plan.serialize();
    } catch (const Error& e) {
      verdict = verdict_of(e);
    }
  }
  agree_on(mpi, verdict);
  plan = RunPlan::deserialize(mpi.broadcast_string(serialized));
}

}  // namespace sluice
