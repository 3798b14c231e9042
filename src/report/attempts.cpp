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
  j["rank_hosts"] = rank_hosts;
  if (!silent_hosts.empty() || !silent_ranks.empty()) {
    j["silent_hosts"] = silent_hosts;
    j["silent_ranks"] = silent_ranks;
  }
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
  a.rank_hosts = j.value("rank_hosts", std::vector<int>{});
  a.silent_hosts = j.value("silent_hosts", std::vector<std::string>{});
  a.silent_ranks = j.value("silent_ranks", std::vector<int>{});
  a.committed_before = j.value("committed_before", int64_t{0});
  a.samples = j.value("samples", int64_t{0});
  a.ended = j.value("ended", "running");
  a.message = j.value("message", "");
  if (j.contains("ranks")) a.ranks = j.at("ranks");
  return a;
}

std::string attempts_path(const std::string& outdir) { return outdir + "/attempts.json"; }

namespace {

std::string note_path(const std::string& outdir, int attempt, int rank, const char* kind) {
  char name[80];
  std::snprintf(name, sizeof name, "/attempt-%d-rank-%05d.%s", attempt, rank, kind);
  return outdir + name;
}

struct Note {
  int rank;
  std::string text;
};

// The notes of one kind ("failed", "stopping") that ranks left for `attempt`, in rank order; the
// files are removed.
std::vector<Note> take_notes(const std::string& outdir, int attempt, const std::string& kind) {
  std::vector<Note> notes;
  DIR* d = opendir(outdir.c_str());
  if (!d) return notes;
  const std::string prefix = str("attempt-", attempt, "-rank-"), suffix = "." + kind;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0 && n.size() > prefix.size() + suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::ifstream f(outdir + "/" + n);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    notes.push_back({std::atoi(n.c_str() + prefix.size()), text});
    unlink((outdir + "/" + n).c_str());
  }
  return notes;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Which ranks of a settled attempt left no word (neither a failure nor a stop note), and the nodes
// all of whose ranks are among them: what the record says went silent.
void find_silent(AttemptRecord& a, const std::vector<Note>& failed, const std::vector<Note>& stopping) {
  std::vector<bool> heard(static_cast<std::size_t>(std::max(0, a.world_size)), false);
  for (const auto* notes : {&failed, &stopping})
    for (const Note& n : *notes)
      if (n.rank >= 0 && n.rank < a.world_size) heard[static_cast<std::size_t>(n.rank)] = true;
  a.silent_ranks.clear();
  a.silent_hosts.clear();
  for (int r = 0; r < a.world_size; ++r)
    if (!heard[static_cast<std::size_t>(r)]) a.silent_ranks.push_back(r);
  // An older record has no per-rank hosts; an edited one may name hosts it does not list.
  if (a.rank_hosts.size() != static_cast<std::size_t>(a.world_size)) return;
  for (int h : a.rank_hosts)
    if (h < 0 || h >= static_cast<int>(a.hosts.size())) return;
  for (std::size_t h = 0; h < a.hosts.size(); ++h) {
    bool any = false, all_silent = true;
    for (int r = 0; r < a.world_size; ++r)
      if (a.rank_hosts[static_cast<std::size_t>(r)] == static_cast<int>(h)) {
        any = true;
        all_silent = all_silent && !heard[static_cast<std::size_t>(r)];
      }
    if (any && all_silent) a.silent_hosts.push_back(a.hosts[h]);
  }
}

// The sentence on what went silent, for a settled attempt's message ("" when every rank was heard
// or every rank went silent, which the message already says).
std::string silent_sentence(const AttemptRecord& a, const std::vector<Note>& stopping) {
  if (a.silent_ranks.empty() || static_cast<int>(a.silent_ranks.size()) == a.world_size) return "";
  std::string s;
  if (!a.silent_hosts.empty()) {
    for (std::size_t i = 0; i < a.silent_hosts.size(); ++i) {
      std::vector<int> ranks;
      for (int r : a.silent_ranks)
        if (a.hosts[static_cast<std::size_t>(a.rank_hosts[static_cast<std::size_t>(r)])] == a.silent_hosts[i]) ranks.push_back(r);
      s += str(i ? ", " : "", "node ", a.silent_hosts[i], " (rank", ranks.size() > 1 ? "s " : " ", rank_list(ranks), ")");
    }
    s += a.silent_hosts.size() > 1 ? " went silent (lost nodes, or their ranks killed)"
                                   : " went silent (a lost node, or its ranks killed)";
    // Ranks silent on nodes that were otherwise heard.
    std::vector<int> others;
    for (int r : a.silent_ranks) {
      const std::string& h = a.hosts[static_cast<std::size_t>(a.rank_hosts[static_cast<std::size_t>(r)])];
      if (std::find(a.silent_hosts.begin(), a.silent_hosts.end(), h) == a.silent_hosts.end()) others.push_back(r);
    }
    if (!others.empty()) s += str("; also silent: rank", others.size() > 1 ? "s " : " ", rank_list(others));
  } else {
    s = str("rank", a.silent_ranks.size() > 1 ? "s " : " ", rank_list(a.silent_ranks), " went silent");
  }
  if (!stopping.empty()) s += str("; the other ranks were stopped ", stopping.front().text);
  return s;
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

// `tmp_suffix`: the temporary file's ending (a failing rank writes its own, so that two of them
// never write one temporary file).
void write_attempts(const std::string& outdir, const std::vector<AttemptRecord>& attempts,
                    const std::string& tmp_suffix = ".tmp") {
  nlohmann::json j;
  j["attempts"] = nlohmann::json::array();
  for (const auto& a : attempts) j["attempts"].push_back(a.to_json());
  const std::string path = attempts_path(outdir), tmp = path + tmp_suffix;
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
    const std::vector<Note> stopping = take_notes(outdir, a.attempt, "stopping");
    // "failed" with its notes still there: marked by a failing rank (record_attempt_failure),
    // settled here from every rank's note.
    if (a.ended != "running" && a.ended != "failed") continue;
    const std::vector<Note> failed = take_notes(outdir, a.attempt, "failed");
    if (a.ended == "failed" && failed.empty()) continue;  // settled before
    a.message.clear();
    find_silent(a, failed, stopping);
    const std::string silent = silent_sentence(a, stopping);
    if (!failed.empty()) {
      a.ended = "failed";
      for (const auto& n : failed) a.message += str(a.message.empty() ? "" : "; ", "rank ", n.rank, ": ", n.text);
      if (!silent.empty()) a.message += "; " + silent;
    } else if (!silent.empty()) {
      a.ended = "killed";
      a.message = silent + "; its committed chunks were kept";
    } else if (a.silent_ranks.empty()) {
      a.ended = "killed";
      a.message = "every rank was told to stop, but the attempt ended before it could say so (killed after the stop "
                  "began); its committed chunks were kept";
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
  // Notes of this very attempt number from an older run are stale.
  take_notes(outdir, current.attempt, "failed");
  take_notes(outdir, current.attempt, "stopping");
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
  take_notes(outdir, a.attempt, "stopping");  // the attempt said how it ended: the stop notes are moot
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
    std::ofstream f(note_path(outdir, attempt, rank, "failed"));
    f << message << "\n";
  } catch (...) {
  }
}

void record_attempt_failure(const std::string& outdir, int attempt, int rank, const std::string& message) {
  note_attempt_failure(outdir, attempt, rank, message);
  try {
    std::vector<AttemptRecord> attempts = read_attempts(outdir);
    auto a = std::find_if(attempts.begin(), attempts.end(), [&](const AttemptRecord& r) { return r.attempt == attempt; });
    if (a == attempts.end()) return;  // not on record: a set-up failure is no attempt
    const std::string mine = str("rank ", rank, ": ", message);
    if (a->ended == "failed") {
      if (a->message.find(mine) == std::string::npos) a->message += "; " + mine;  // another rank failed too
    } else {
      a->ended = "failed";  // also over an end written just before the failure (report.json's, say)
      a->message = mine;
    }
    a->finished_unix = unix_time_now();
    a->finished = iso8601(a->finished_unix);
    write_attempts(outdir, attempts, str(".tmp-rank-", rank));
  } catch (...) {
  }
}

void note_attempt_stopping(const std::string& outdir, int attempt, int rank, const std::string& how) {
  try {
    std::ofstream f(note_path(outdir, attempt, rank, "stopping"));
    f << how << "\n";
  } catch (...) {
  }
}

}  // namespace sluice
