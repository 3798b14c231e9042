#include "report/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"

namespace sluice {

namespace {

// Every rank's bucket use, summed per bucket (the ranks have the same buckets).
std::vector<BucketReport> job_buckets(const JobReport& r) {
  std::vector<BucketReport> all;
  for (const auto& rr : r.ranks)
    for (std::size_t b = 0; b < rr.buckets.size(); ++b) {
      if (all.size() <= b) all.push_back({rr.buckets[b].length, rr.buckets[b].cap, 0, 0});
      all[b].pieces += rr.buckets[b].pieces;
      all[b].rows += rr.buckets[b].rows;
    }
  return all;
}

}  // namespace

double RankReport::steady_images_per_s() const {
  // The first batch carries the warm-up (lazy initialization, first transfers); leave it out.
  if (stats.batches < 2 || stats.wall_s <= stats.first_batch_s) return images_per_s();
  const double per_batch = static_cast<double>(stats.samples) / static_cast<double>(stats.batches);
  return (static_cast<double>(stats.samples) - per_batch) / (stats.wall_s - stats.first_batch_s);
}

double RankReport::setup_other_s() const {
  const SetupParts& p = setup;
  const double named = p.input_s + p.model_load_s + p.share_s + p.engine_build_s + p.autotune_s + p.capture_s;
  return std::max(0.0, setup_s - named);
}

nlohmann::json RankReport::to_json() const {
  const auto& s = stats;
  const double w = s.wall_s > 0 ? s.wall_s : 1;
  nlohmann::json j;
  j["rank"] = rank;
  j["host"] = host;
  j["device"] = device;
  j["engine"] = engine;
  j["setup_s"] = setup_s;
  j["setup"] = {{"input_s", setup.input_s},
                {"model_load_s", setup.model_load_s},
                {"share_s", setup.share_s},
                {"engine_build_s", setup.engine_build_s},
                {"autotune_s", setup.autotune_s},
                {"graph_capture_s", setup.capture_s},
                {"other_s", setup_other_s()},
                {"algorithms_measured", setup.algos_measured},
                {"algorithms_cached", setup.algos_cached}};
  if (!setup.autotune.empty()) j["setup"]["autotune"] = setup.autotune;
  if (setup.engines != 1) {
    j["setup"]["engines"] = setup.engines;
    j["setup"]["buckets_prepare_s"] = setup.buckets_s;
  }
  if (tokens_real > 0 || tokens_computed > 0) {
    j["tokens"] = {{"real", tokens_real}, {"computed", tokens_computed}};
    nlohmann::json b = nlohmann::json::array();
    for (const auto& x : buckets) b.push_back({{"length", x.length}, {"cap", x.cap}, {"pieces", x.pieces}, {"rows", x.rows}});
    if (!buckets.empty()) j["tokens"]["buckets"] = b;
  }
  j["samples"] = s.samples;
  j["batches"] = s.batches;
  j["chunks"] = s.chunks;
  j["nonfinite_rows"] = s.nonfinite_rows;
  j["bad_samples"] = s.bad_samples;
  j["bad_files"] = s.bad_named;
  j["wall_s"] = s.wall_s;
  j["first_batch_s"] = s.first_batch_s;
  j["images_per_s"] = images_per_s();
  j["steady_images_per_s"] = steady_images_per_s();
  nlohmann::json seconds = nlohmann::json::object(), busy = nlohmann::json::object(),
                 stall = nlohmann::json::object();
  for (const auto& f : kTimedFields) {
    seconds[f.name] = s.*f.seconds;
    if (f.kind == TimedField::kStage) busy[f.name] = s.*f.seconds / w;
    if (f.kind == TimedField::kStall) stall[f.stall] = s.*f.seconds / w;
  }
  j["seconds"] = seconds;
  j["busy"] = busy;
  j["stall"] = stall;
  j["reader_threads"] = reader_threads;
  j["writer_threads"] = writer_threads;
  j["start_unix"] = start_unix;
  j["local_rank"] = local_rank;
  j["local_size"] = local_size;
  j["gpu"] = gpu;
  j["clock_offset_s"] = clock_offset_s;
  j["limit"] = limit();
  if (!series.is_null()) j["series"] = series;
  return j;
}

std::string RankReport::limit() const {
  const auto& s = stats;
  if (s.wall_s <= 0 || s.batches == 0) return "idle: no batch";
  const double w = s.wall_s;
  const double readers = std::max(1, reader_threads), writers = std::max(1, writer_threads);
  const auto threads = [](int n, const char* whose) { return str(" (", n, " ", whose, " thread", n == 1 ? "" : "s", ")"); };
  struct Stage {
    const TimedField* field;
    std::string what;
    double busy;
  };
  // CPU decoding runs on the reader threads, so it counts with read; decode's own stage is the
  // GPU's part.  Busy is per thread where a stage has several.
  const double cpu_decode = s.decode_cpu_s;
  std::vector<Stage> stages;
  for (const auto& f : kTimedFields) {
    if (f.kind != TimedField::kStage) continue;
    double seconds = s.*f.seconds;
    std::string what = f.name;
    if (f.seconds == &PipelineStats::read_s) {
      seconds += cpu_decode;
      if (cpu_decode > 0) what = "read + decode";
    }
    if (f.seconds == &PipelineStats::decode_s) {
      seconds -= cpu_decode;
      what = "GPU decode";
    }
    if (f.threads == TimedField::kReaders) {
      what += threads(reader_threads, "reader");
      seconds /= readers;
    }
    if (f.threads == TimedField::kWriters) {
      what += threads(writer_threads, "writer");
      seconds /= writers;
    }
    stages.push_back({&f, what, seconds / w});
  }
  const auto is = [](double PipelineStats::*field) { return [field](const Stage& st) { return st.field->seconds == field; }; };
  std::stable_partition(stages.begin(), stages.end(), is(&PipelineStats::compute_s));   // compute wins a tie
  const Stage& read = *std::find_if(stages.begin(), stages.end(), is(&PipelineStats::read_s));
  const Stage* top = &stages[0];
  for (const auto& st : stages)
    if (st.busy > top->busy) top = &st;
  char pct[32];
  // A driver that mostly waits names the side it waits for, even when no single stage looks busy
  // (the work is spread over several threads, or a thread is slowed by something else).
  const double st_in = s.stall_input_s / w, st_out = s.stall_output_s / w;
  if (top->busy < 0.9 && std::max(st_in, st_out) > 0.5) {
    std::snprintf(pct, sizeof pct, "%.0f %%", 100 * std::max(st_in, st_out));
    if (st_in >= st_out)
      return str("input-bound: the driver waited for input ", pct, " of the time (", read.what, " ",
                 static_cast<int>(100 * read.busy + 0.5), " % busy per thread)");
    return str("output-bound: the driver waited for a free output slot ", pct, " of the time (write ",
               static_cast<int>(100 * s.write_s / w + 0.5), " % busy)");
  }
  std::snprintf(pct, sizeof pct, "%.0f %%", 100 * top->busy);
  if (top->busy < 0.5)
    return str("latency-bound: no stage is busy (busiest: ", top->what, " ", pct,
               "); more batches in flight (--prefetch, larger --batch-size) or a longer run would help");
  return str(top->field->bound, ": ", top->what, " ", pct, " busy");
}

RankReport RankReport::from_json(const nlohmann::json& j) {
  RankReport r;
  r.rank = j.at("rank").get<int>();
  r.host = j.at("host").get<std::string>();
  r.device = j.at("device").get<std::string>();
  r.engine = j.at("engine").get<std::string>();
  r.setup_s = j.at("setup_s").get<double>();
  if (const auto it = j.find("setup"); it != j.end()) {   // older reports have the total alone
    const auto& p = *it;
    r.setup.input_s = p.value("input_s", 0.0);
    r.setup.model_load_s = p.value("model_load_s", 0.0);
    r.setup.share_s = p.value("share_s", 0.0);
    r.setup.engine_build_s = p.value("engine_build_s", 0.0);
    r.setup.autotune_s = p.value("autotune_s", 0.0);
    r.setup.capture_s = p.value("graph_capture_s", 0.0);
    r.setup.algos_measured = p.value("algorithms_measured", 0);
    r.setup.algos_cached = p.value("algorithms_cached", 0);
    r.setup.autotune = p.value("autotune", std::string());
    r.setup.engines = p.value("engines", 1);
    r.setup.buckets_s = p.value("buckets_prepare_s", 0.0);
  }
  if (const auto it = j.find("tokens"); it != j.end()) {
    r.tokens_real = it->value("real", int64_t{0});
    r.tokens_computed = it->value("computed", int64_t{0});
    if (const auto b = it->find("buckets"); b != it->end())
      for (const auto& x : *b)
        r.buckets.push_back({x.at("length").get<int64_t>(), x.at("cap").get<int64_t>(), x.at("pieces").get<int64_t>(),
                             x.at("rows").get<int64_t>()});
  }
  auto& s = r.stats;
  s.samples = j.at("samples").get<int64_t>();
  s.batches = j.at("batches").get<int64_t>();
  s.chunks = j.at("chunks").get<int64_t>();
  s.nonfinite_rows = j.value("nonfinite_rows", int64_t{0});
  s.bad_samples = j.value("bad_samples", int64_t{0});
  s.bad_named = j.value("bad_files", std::vector<std::string>{});
  s.wall_s = j.at("wall_s").get<double>();
  s.first_batch_s = j.at("first_batch_s").get<double>();
  const auto& sec = j.at("seconds");
  for (const auto& f : kTimedFields)
    s.*f.seconds = f.since_first_report ? sec.at(f.name).get<double>() : sec.value(f.name, 0.0);
  r.reader_threads = j.value("reader_threads", 1);
  r.writer_threads = j.value("writer_threads", 1);
  r.start_unix = j.value("start_unix", 0.0);
  r.local_rank = j.value("local_rank", 0);
  r.local_size = j.value("local_size", 1);
  r.gpu = j.value("gpu", -1);
  r.clock_offset_s = j.value("clock_offset_s", 0.0);
  if (j.contains("series")) r.series = j.at("series");
  return r;
}

int64_t JobReport::samples() const {
  int64_t n = 0;
  for (const auto& r : ranks) n += r.stats.samples;
  return n;
}

double JobReport::makespan_s() const {
  double m = 0;
  for (const auto& r : ranks) m = std::max(m, r.stats.wall_s);
  return m;
}

double JobReport::throughput() const {
  const double m = makespan_s();
  return m > 0 ? static_cast<double>(samples()) / m : 0;
}

const RankReport* JobReport::slowest() const {
  const RankReport* slow = nullptr;
  for (const auto& r : ranks)
    if (!slow || r.stats.wall_s > slow->stats.wall_s) slow = &r;
  return slow;
}

double JobReport::imbalance() const {
  if (ranks.empty()) return 1;
  double sum = 0, mx = 0;
  for (const auto& r : ranks) {
    sum += r.stats.wall_s;
    mx = std::max(mx, r.stats.wall_s);
  }
  const double mean = sum / static_cast<double>(ranks.size());
  return mean > 0 ? mx / mean : 1;
}

nlohmann::json JobReport::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["sluice_version"] = version;
  j["git_commit"] = commit;
  j["backend"] = backend;
  j["precision"] = precision;
  j["model"] = model;
  j["model_sha256"] = model_sha256;
  j["input"] = input;
  j["output_dir"] = output_dir;
  j["outputs"] = outputs;
  j["world_size"] = world_size;
  j["nodes"] = nodes;
  j["attempt"] = attempt;
  j["batch_size"] = batch_size;
  j["chunk_samples"] = chunk_samples;
  j["started"] = started;
  j["finished"] = finished;
  j["weights_broadcast"] = {{"transport", weights_transport}, {"mb", weights_mb}, {"seconds", weights_s}};
  j["model_load_s"] = model_load_s;
  if (!batch_note.empty()) j["batch_note"] = batch_note;
  if (max_tokens_per_batch > 0) j["max_tokens_per_batch"] = max_tokens_per_batch;
  {
    int64_t real = 0, computed = 0;
    for (const auto& rr : ranks) {
      real += rr.tokens_real;
      computed += rr.tokens_computed;
    }
    if (real > 0 || computed > 0) {
      const double t = makespan_s();
      j["tokens"] = {{"real", real}, {"computed", computed}, {"real_per_s", t > 0 ? static_cast<double>(real) / t : 0.0}};
      nlohmann::json b = nlohmann::json::array();
      for (const BucketReport& x : job_buckets(*this))
        b.push_back({{"length", x.length}, {"cap", x.cap}, {"pieces", x.pieces}, {"rows", x.rows}});
      if (!b.empty()) j["tokens"]["buckets"] = b;
    }
  }
  j["job_toml"] = job_text;
  nlohmann::json job;
  job["total_samples"] = total_samples;
  job["pending_samples"] = pending_samples;
  job["samples"] = samples();
  int64_t nonfinite = 0;
  for (const auto& r : ranks) nonfinite += r.stats.nonfinite_rows;
  job["nonfinite_rows"] = nonfinite;
  job["bad_samples"] = bad_samples();
  job["bad_files"] = bad_files();
  job["complete"] = complete;
  job["stopped"] = stopped;
  job["makespan_s"] = makespan_s();
  job["throughput"] = throughput();
  double mn = 0, mean = 0, mx = 0, smn = 0, smean = 0, smx = 0;
  if (!ranks.empty()) {
    mn = smn = 1e300;
    for (const auto& r : ranks) {
      const double t = r.images_per_s(), st = r.steady_images_per_s();
      mn = std::min(mn, t);
      mx = std::max(mx, t);
      mean += t;
      smn = std::min(smn, st);
      smx = std::max(smx, st);
      smean += st;
    }
    mean /= static_cast<double>(ranks.size());
    smean /= static_cast<double>(ranks.size());
  }
  job["rank_images_per_s"] = {{"min", mn}, {"mean", mean}, {"max", mx}};
  job["rank_steady_images_per_s"] = {{"min", smn}, {"mean", smean}, {"max", smx}};
  job["imbalance"] = imbalance();
  if (const RankReport* slow = slowest()) job["slowest"] = {{"rank", slow->rank}, {"host", slow->host}, {"limit", slow->limit()}};
  // Totals over every attempt on record (this one included).
  int64_t all_samples = 0;
  double all_seconds = 0;
  for (const auto& a : attempts) {
    all_samples += a.samples;
    if (a.finished_unix > a.started_unix) all_seconds += a.finished_unix - a.started_unix;
  }
  job["attempts"] = attempts.size();
  job["samples_all_attempts"] = all_samples;
  job["seconds_all_attempts"] = all_seconds;
  j["job"] = job;
  j["attempts"] = nlohmann::json::array();
  for (const auto& a : attempts) j["attempts"].push_back(a.to_json());
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : ranks) j["ranks"].push_back(r.to_json());
  return j;
}

int64_t JobReport::bad_samples() const {
  int64_t n = 0;
  for (const auto& r : ranks) n += r.stats.bad_samples;
  return n;
}

std::vector<std::string> JobReport::bad_files() const {
  std::vector<std::string> named;
  for (const auto& r : ranks)
    for (const auto& b : r.stats.bad_named)
      if (named.size() < kNamedBadSamples) named.push_back(b);
  return named;
}

// The command that finishes a stopped run: the folder holds the job (OUTPUT/job.toml).
std::string resume_command(const JobReport& r) {
  std::string dir = r.output_dir;
  if (dir.find_first_of(" \t'\"$`\\!*?;&|<>()") != std::string::npos) {
    std::string q = "'";
    for (char c : dir) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    dir = q + "'";
  }
  std::string cmd = "sluice run --resume --output " + dir;
  if (r.world_size > 1) cmd += " (under mpirun or srun as before; any number of ranks)";
  return cmd;
}

std::string format_setup_line(const JobReport& r) {
  // The rank whose set-up took longest: the job's pipeline started when it was ready.
  const RankReport* rr = nullptr;
  for (const auto& x : r.ranks)
    if (!rr || x.setup_s > rr->setup_s) rr = &x;
  if (!rr) return "";
  const SetupParts& p = rr->setup;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "set-up: " << rr->setup_s << " s";
  if (r.ranks.size() > 1) os << " (rank " << rr->rank << ", the longest)";
  os << ": input " << p.input_s << " s, model load " << p.model_load_s << " s";
  if (r.world_size > 1) os << ", model to the ranks " << p.share_s << " s";
  os << ", engine build " << p.engine_build_s << " s";
  if (p.autotune_s > 0 || p.algos_measured + p.algos_cached > 0)
    os << ", autotune " << p.autotune_s << " s (" << (p.autotune.empty() ? "" : p.autotune + ": ") << p.algos_measured
       << (p.autotune == "off" ? " by cuDNN's first choice, " : " measured, ") << p.algos_cached << " cached)";
  if (p.capture_s > 0) os << ", graph capture " << p.capture_s << " s";
  os << ", other " << rr->setup_other_s() << " s; then the first batch " << rr->stats.first_batch_s << " s\n";
  if (p.engines != 1) {
    // Rank 0 prepared the model per bucket (inside its model load); every rank built the engines.
    const RankReport* r0 = nullptr;
    for (const auto& x : r.ranks)
      if (x.rank == 0) r0 = &x;
    os << "set-up by length: " << p.engines << " engines, one per length bucket, built, tuned and captured in "
       << p.engine_build_s + p.autotune_s + p.capture_s << " s; the model prepared per bucket in "
       << (r0 ? r0->setup.buckets_s : 0.0) << " s (rank 0, in its model load)\n";
  }
  if (!r.batch_note.empty()) os << "slow: " << r.batch_note << "\n";
  return os.str();
}

std::string format_report_table(const JobReport& r) {
  std::ostringstream os;
  char line[512];
  os << "\n";
  std::snprintf(line, sizeof line, "%4s %-14s %-22s %8s %6s %8s %9s %9s", "rank", "host", "device", "samples",
                "chunks", "wall s", "img/s", "steady/s");
  os << line;
  // A stage's column is a busy fraction, a stall's a stall fraction (one character wider).
  const auto width = [](const TimedField& f) { return f.kind == TimedField::kStall ? 7 : 6; };
  for (const auto& f : kTimedFields)
    if (f.column) {
      std::snprintf(line, sizeof line, " %*s", width(f), f.column);
      os << line;
    }
  os << "\n";
  for (const auto& rr : r.ranks) {
    const auto& s = rr.stats;
    const double w = s.wall_s > 0 ? s.wall_s : 1;
    std::snprintf(line, sizeof line, "%4d %-14.14s %-22.22s %8lld %6lld %8.2f %9.1f %9.1f", rr.rank, rr.host.c_str(),
                  rr.device.c_str(), static_cast<long long>(s.samples), static_cast<long long>(s.chunks), s.wall_s,
                  rr.images_per_s(), rr.steady_images_per_s());
    os << line;
    for (const auto& f : kTimedFields)
      if (f.column) {
        std::snprintf(line, sizeof line, " %*.0f%%", width(f) - 1, 100 * s.*f.seconds / w);
        os << line;
      }
    os << "\n";
  }
  const nlohmann::json j = r.to_json();
  const auto& job = j["job"];
  std::snprintf(line, sizeof line,
                "job: %lld samples on %d rank(s) in %.2f s: %.1f images/s  (rank min/mean/max %.1f/%.1f/%.1f, "
                "imbalance %.2f)\n",
                static_cast<long long>(r.samples()), r.world_size, r.makespan_s(), r.throughput(),
                job["rank_images_per_s"]["min"].get<double>(), job["rank_images_per_s"]["mean"].get<double>(),
                job["rank_images_per_s"]["max"].get<double>(), r.imbalance());
  std::string headline = line;
  if (r.attempts.size() > 1) {
    // A resumed job: the headline is the job's; this attempt's figures follow it.
    int64_t all = 0;
    for (const auto& a : r.attempts) all += a.samples;
    std::snprintf(line, sizeof line, "job: %lld of %lld samples committed over %zu attempts; this attempt (#%d): ",
                  static_cast<long long>(r.complete ? r.total_samples : all), static_cast<long long>(r.total_samples),
                  r.attempts.size(), r.attempt);
    headline = line + headline.substr(5);
  }
  os << headline;
  if (const RankReport* slow = r.slowest(); slow && r.ranks.size() > 1)
    os << "slowest: rank " << slow->rank << " on " << slow->host << ": " << slow->limit() << "\n";
  else if (slow)
    os << "limit: " << slow->limit() << "\n";
  os << format_setup_line(r);
  os << format_tokens_line(r);
  if (r.attempts.size() > 1) {
    os << "attempts:\n";
    for (const auto& a : r.attempts) {
      std::snprintf(line, sizeof line, "  #%d %s  %d rank(s) on %d node(s), %lld samples, %s%s%s\n", a.attempt,
                    a.started.c_str(), a.world_size, a.nodes, static_cast<long long>(a.samples), a.ended.c_str(),
                    a.message.empty() ? "" : ": ", a.message.substr(0, 160).c_str());
      os << line;
    }
  }
  int64_t nonfinite = 0;
  for (const auto& rr : r.ranks) nonfinite += rr.stats.nonfinite_rows;
  if (const int64_t bad = r.bad_samples(); bad > 0) {
    const std::vector<std::string> named = r.bad_files();
    os << "inputs: " << bad << " bad file(s) fed as zeros and marked bad (/sample_status 1): ";
    for (std::size_t i = 0; i < named.size() && i < 5; ++i) os << (i ? "; " : "") << named[i];
    if (bad > 5) os << "; ... (report.json names " << named.size() << ", sluice inspect " << r.output_dir << " all)";
    os << "\n";
  }
  if (nonfinite > 0)
    os << "inputs: " << nonfinite << " sample(s) held NaN or Inf values (computed as given; /sample_status 2)\n";
  if (r.complete)
    os << "status: complete: all " << r.total_samples << " samples committed\n";
  else
    os << "status: INCOMPLETE" << (r.stopped ? " (stopped by a signal)" : "") << ": to finish, run: " << resume_command(r)
       << "\n";
  return os.str();
}

std::string format_tokens_line(const JobReport& r) {
  int64_t real = 0, computed = 0;
  for (const auto& rr : r.ranks) {
    real += rr.tokens_real;
    computed += rr.tokens_computed;
  }
  if (real == 0 && computed == 0) return "";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  const double t = r.makespan_s();
  os << "tokens: " << real << " in the passages, " << computed << " computed with the padding ("
     << (computed > 0 ? 100.0 * static_cast<double>(real) / static_cast<double>(computed) : 0.0) << " % real); "
     << (t > 0 ? static_cast<double>(real) / t : 0.0) << " tokens/s\n";
  const std::vector<BucketReport> b = job_buckets(r);
  if (!b.empty()) {
    os << "buckets (--max-tokens-per-batch " << r.max_tokens_per_batch << "; length x rows: pieces, passages):";
    for (const BucketReport& x : b) os << " " << x.length << "x" << x.cap << ": " << x.pieces << ", " << x.rows << ";";
    os.seekp(-1, std::ios_base::end);
    os << "\n";
  }
  return os.str();
}

void write_report_json(const JobReport& r, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw Error(str("cannot write ", tmp));
    f << dump_json(r.to_json(), 2) << "\n";
    if (!f) throw Error(str("writing ", tmp, " failed (disk full?)"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(str("cannot rename ", tmp, " to ", path));
}

}  // namespace sluice
