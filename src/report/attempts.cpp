#include "report/attempts.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/timer.h"

namespace sluice {

nlohmann::json AttemptRecord::to_json() const {
  nlohmann::json j;
  j["attempt"] = attempt;
  j["started"] = started;
  j["finished"] = finished;
  j["started_unix"] = started_unix;
  j["finished_unix"] = finished_unix;
  j["duration_s"] = finished_unix > started_unix ? finished_unix - started_unix : 0.0;
  j["world_size"] = world_size;
  j["nodes"] = nodes;
  j["hosts"] = hosts;
  j["committed_before"] = committed_before;
  j["samples"] = samples;
  j["ended"] = ended;
  j["message"] = message;
  if (!ranks.is_null()) j["ranks"] = ranks;
  return j;
}

AttemptRecord AttemptRecord::from_json(const nlohmann::json& j) {
  AttemptRecord a;
  a.attempt = j.value("attempt", 0);
  a.started = j.value("started", "");
  a.finished = j.value("finished", "");
  a.started_unix = j.value("started_unix", 0.0);
  a.finished_unix = j.value("finished_unix", 0.0);
  a.world_size = j.value("world_size", 0);
  a.nodes = j.value("nodes", 0);
  a.hosts = j.value("hosts", std::vector<std::string>{});
  a.committed_before = j.value("committed_before", int64_t{0});
  a.samples = j.value("samples", int64_t{0});
  a.ended = j.value("ended", "running");
  a.message = j.value("message", "");
  if (j.contains("ranks")) a.ranks = j.at("ranks");
  return a;
}

std::string attempts_path(const std::string& outdir) { return outdir + "/attempts.json"; }

namespace {

std::string failure_note_path(const std::string& outdir, int attempt, int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "/attempt-%d-rank-%05d.failed", attempt, rank);
  return outdir + name;
}

// The failure notes of `attempt` in rank order: "rank 2: message".
std::vector<std::string> take_failure_notes(const std::string& outdir, int attempt) {
  std::vector<std::string> notes;
  DIR* d = opendir(outdir.c_str());
  if (!d) return notes;
  const std::string prefix = str("attempt-", attempt, "-rank-");
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0 && n.size() > 7 && n.compare(n.size() - 7, 7, ".failed") == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::ifstream f(outdir + "/" + n);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const int rank = std::atoi(n.c_str() + prefix.size());
    notes.push_back(str("rank ", rank, ": ", text));
    unlink((outdir + "/" + n).c_str());
  }
  return notes;
}

std::vector<AttemptRecord> read_attempts(const std::string& outdir) {
  std::vector<AttemptRecord> out;
  std::ifstream f(attempts_path(outdir));
  if (!f) return out;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    for (const auto& a : j.at("attempts")) out.push_back(AttemptRecord::from_json(a));
  } catch (const std::exception& e) {
    log_warn("ignoring ", attempts_path(outdir), " (unreadable: ", e.what(), "); earlier attempts are not on record");
    out.clear();
  }
  return out;
}

void write_attempts(const std::string& outdir, const std::vector<AttemptRecord>& attempts) {
  nlohmann::json j;
  j["attempts"] = nlohmann::json::array();
  for (const auto& a : attempts) j["attempts"].push_back(a.to_json());
  const std::string path = attempts_path(outdir), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << dump_json(j, 1) << "\n";
    if (!f) throw Error(str("cannot write ", tmp, " (disk full?)"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(str("cannot rename ", tmp, " to ", path));
}

}  // namespace

std::vector<AttemptRecord> begin_attempt(const std::string& outdir, bool resume, const AttemptRecord& current,
                                         double last_commit_unix) {
  std::vector<AttemptRecord> attempts;
  if (resume) attempts = read_attempts(outdir);
  // Keep only attempts before this one (a rerun of the same attempt number replaces its entry).
  while (!attempts.empty() && attempts.back().attempt >= current.attempt) attempts.pop_back();
  for (auto& a : attempts) {
    if (a.ended != "running") continue;
    const std::vector<std::string> notes = take_failure_notes(outdir, a.attempt);
    if (!notes.empty()) {
      a.ended = "failed";
      for (const auto& n : notes) a.message += (a.message.empty() ? "" : "; ") + n;
    } else {
      a.ended = "killed";
      a.message = "ended without a word (kill -9, a lost node or a timeout); its committed chunks were kept";
    }
  }
  // Samples of settled attempts: what the next attempt found committed, minus what they found.
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const int64_t next = i + 1 < attempts.size() ? attempts[i + 1].committed_before : current.committed_before;
    if (attempts[i].ended == "killed" || attempts[i].ended == "failed") {
      attempts[i].samples = std::max<int64_t>(0, next - attempts[i].committed_before);
      // Its last commit is the latest in the ledgers (attempts after it have not run yet).
      if (i + 1 == attempts.size() && attempts[i].finished_unix <= 0 && last_commit_unix > attempts[i].started_unix) {
        attempts[i].finished_unix = last_commit_unix;
        attempts[i].finished = iso8601(last_commit_unix);
        attempts[i].message += " (its end time is its last commit's)";
      }
    }
  }
  // Failure notes of this very attempt number from an older run are stale.
  take_failure_notes(outdir, current.attempt);
  attempts.push_back(current);
  write_attempts(outdir, attempts);
  return attempts;
}

std::vector<AttemptRecord> end_attempt(const std::string& outdir, std::vector<AttemptRecord> attempts,
                                       const std::string& ended, const std::string& message, int64_t samples) {
  if (attempts.empty()) return attempts;
  AttemptRecord& a = attempts.back();
  a.finished_unix = unix_time_now();
  a.finished = iso8601(a.finished_unix);
  a.ended = ended;
  a.message = message;
  a.samples = samples;
  write_attempts(outdir, attempts);
  return attempts;
}

nlohmann::json thin_series(const nlohmann::json& series, std::size_t points) {
  if (!series.is_object() || !series.contains("t")) return series;
  const std::size_t n = series["t"].size();
  if (n <= points || points < 2) return series;
  std::vector<std::size_t> keep;
  for (std::size_t k = 0; k < points; ++k) keep.push_back(k * (n - 1) / (points - 1));
  // Every array of the series (t, samples, busy.*, stall.*) keeps the same points.
  auto pick = [&](const nlohmann::json& a) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i : keep) out.push_back(a[i]);
    return out;
  };
  nlohmann::json out = series;
  for (auto& [key, value] : out.items()) {
    if (value.is_array() && value.size() == n) value = pick(series[key]);
    if (value.is_object())
      for (auto& [k2, v2] : value.items())
        if (v2.is_array() && v2.size() == n) v2 = pick(series[key][k2]);
  }
  return out;
}

void note_attempt_failure(const std::string& outdir, int attempt, int rank, const std::string& message) {
  try {
    std::ofstream f(failure_note_path(outdir, attempt, rank));
    f << message << "\n";
  } catch (...) {
  }
}

}  // namespace sluice
