// `sluice inspect DIR`: reads a run folder without changing it.  Rank files whose writer is still
// running, or was killed, are read as a SWMR reader (they stay untouched; `sluice run --resume`
// recovers them), so this is also a way to watch a running job's progress.
#include "app/cmd_inspect.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "app/commands.h"
#include "app/job_plan.h"
#include "app/outdir.h"
#include "core/error.h"
#include "core/json_text.h"
#include "io/hdf5_util.h"
#include "io/rank_file.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::size_t kListed = 8;  // gaps and duplicates shown in the table

struct FileEntry {
  std::string name;  // relative to the folder
  std::optional<RankFileInfo> info;
  std::string error;
  uintmax_t bytes = 0;
  std::size_t commits = 0;  // ledger records (info->chunks holds their merged runs)
};

struct OutputsCheck {
  bool present = false, ok = false;
  int64_t mappings = 0;  // of /sample_index
  std::string detail;
  json datasets = json::array();
};

// A few keys of the run (/sample_key), to show which samples the rows are.
struct KeysView {
  std::size_t width = 0;                 // 0: the rank files store no keys
  std::vector<std::string> first, last;  // of outputs.h5 (global order), else of one rank file's rows
  std::string from;
  int64_t bad = 0;                       // committed bad samples, all rank files
  std::vector<std::string> bad_named;    // the first of them: "key (sample N): reason"
};

struct Summary {
  std::string dir;
  KeysView keys;
  std::vector<FileEntry> files;
  int64_t total = 0;
  std::vector<std::string> problems;  // besides coverage: why the folder is not in order
  std::vector<DatasetSpec> datasets;
  Coverage coverage;
  OutputsCheck outputs;
  std::optional<json> report;
  std::string report_error;
  bool ok() const { return problems.empty() && coverage.complete() && (!outputs.present || outputs.ok); }
};

std::string layout_text(const std::vector<DatasetSpec>& specs) {
  std::string s;
  for (const DatasetSpec& d : specs) s += str(s.empty() ? "" : ", ", d.name, " ", dtype_name(d.dtype), shape_str(d.row_shape));
  return s;
}

// outputs.h5: every dataset [N, ...] with the rank files' types, and /sample_index reading back as
// 0..N-1 through the virtual mappings (which also proves the source files resolve).
OutputsCheck check_outputs(const std::string& path, const std::vector<DatasetSpec>& specs, int64_t total) {
  OutputsCheck c;
  std::error_code ec;
  c.present = fs::exists(path, ec);
  if (!c.present) return c;
  h5::quiet_errors();
  try {
    h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!f.valid()) throw Error(str("cannot open it: ", h5::error_stack_text()));
    std::vector<std::string> names{"/sample_index"};
    for (const DatasetSpec& s : specs) names.push_back("/outputs/" + s.name);
    for (const std::string& n : names) {
      if (!h5::exists(f, n)) throw Error(str("no dataset ", n));
      h5::Dataset d(H5_CHECK(H5Dopen2(f, n.c_str(), H5P_DEFAULT)));
      h5::Type t(H5_CHECK(H5Dget_type(d)));
      const std::vector<hsize_t> dims = h5::dims_of(d);
      Shape shape(dims.begin(), dims.end());
      c.datasets.push_back({{"name", n}, {"shape", shape}, {"dtype", h5::type_text(t)}});
      if (dims.empty() || static_cast<int64_t>(dims[0]) != total)
        throw Error(str(n, " has shape ", shape_str(shape), ", the job has ", total, " samples (stale: rerun or resume)"));
    }
    // The mappings of /sample_index must tile [0, N); reading both ends of each one proves that its
    // rank file resolves and holds the samples it should.  O(mappings), never O(N).
    h5::Dataset idx(H5_CHECK(H5Dopen2(f, "/sample_index", H5P_DEFAULT)));
    h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(idx)));
    if (H5_CHECK(H5Pget_layout(dcpl)) != H5D_VIRTUAL) throw Error("/sample_index is not a virtual dataset");
    std::size_t count = 0;
    H5_CHECK(H5Pget_virtual_count(dcpl, &count));
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [first, end) of each mapping
    for (std::size_t k = 0; k < count; ++k) {
      h5::Space vs(H5_CHECK(H5Pget_virtual_vspace(dcpl, k)));
      hsize_t start = 0, end = 0;
      H5_CHECK(H5Sget_select_bounds(vs, &start, &end));
      blocks.emplace_back(static_cast<int64_t>(start), static_cast<int64_t>(end) + 1);
    }
    std::sort(blocks.begin(), blocks.end());
    int64_t next = 0;
    auto value_at = [&](int64_t i) {
      int64_t v = -1;
      h5::Space fs(H5_CHECK(H5Dget_space(idx)));
      const hsize_t at = static_cast<hsize_t>(i), one = 1;
      H5_CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, nullptr, &one, nullptr));
      h5::Space ms(H5_CHECK(H5Screate_simple(1, &one, nullptr)));
      H5_CHECK(H5Dread(idx, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, &v));
      return v;
    };
    for (const auto& [first, end] : blocks) {
      if (first != next) throw Error(str("rows [", std::min(first, next), ", ", std::max(first, next), ") are ",
                                         first > next ? "not mapped" : "mapped twice"));
      for (int64_t i : {first, end - 1}) {
        const int64_t v = value_at(i);
        if (v != i) throw Error(str("row ", i, " maps sample ", v, v < 0 ? " (its source is missing)" : ""));
      }
      next = end;
    }
    if (next != total) throw Error(str("rows [", next, ", ", total, ") are not mapped"));
    c.mappings = static_cast<int64_t>(count);
    c.ok = true;
    c.detail = str("maps all ", total, " samples onto the rank files (", c.mappings, " mappings)");
  } catch (const Error& e) {
    c.detail = e.what();
  }
  return c;
}

KeysView keys_view(const std::string& dir, const std::vector<RankFileInfo>& infos, bool outputs_ok, int64_t total) {
  constexpr int64_t kShown = 3;
  constexpr std::size_t kNamedBad = 20;
  KeysView k;
  for (const RankFileInfo& i : infos) {
    k.width = std::max(k.width, i.key_bytes);
    try {
      const auto bad = read_bad_samples(i);
      k.bad += static_cast<int64_t>(bad.size());
      for (const auto& [index, reason] : bad) {
        if (k.bad_named.size() >= kNamedBad) break;
        // The key is in the row the ledger put the sample in.
        std::string key;
        for (const ChunkRecord& r : i.chunks)
          if (index >= r.first_index && index < r.first_index + r.count && i.key_bytes > 0) {
            const auto keys = read_sample_keys(i.path, r.first_row + (index - r.first_index), 1);
            if (!keys.empty()) key = keys[0];
          }
        k.bad_named.push_back(str(key.empty() ? "" : "'" + key + "' ", "(sample ", index, "): ", reason));
      }
    } catch (const Error&) {
    }
  }
  if (k.width == 0) return k;
  try {
    if (outputs_ok) {
      const std::string path = (fs::path(dir) / "outputs.h5").string();
      k.first = read_sample_keys(path, 0, kShown);
      k.last = read_sample_keys(path, std::max<int64_t>(kShown, total - kShown), kShown);
      k.from = "outputs.h5";
    } else {
      for (const RankFileInfo& i : infos)
        if (!i.chunks.empty()) {
          k.first = read_sample_keys(i.path, i.chunks.front().first_row, std::min(kShown, i.chunks.front().count));
          k.from = fs::path(i.path).filename().string();
          break;
        }
    }
  } catch (const Error&) {
    k.from.clear();  // unreadable: the problems above say why
  }
  return k;
}

// The datasets under /outputs that the job in a rank file's `job` attribute asked for: those the
// head of each entry of `outputs` stores, named as the writer names them (head_datasets: topk and
// topk_probs as "<name>_values" and "<name>_indices", detections with "<name>_count").  Empty when
// the text names none.
std::vector<std::string> promised_outputs(const std::string& job_text) {
  JobConfig job;
  job.outputs.clear();
  std::istringstream is(job_text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.rfind("outputs = [", 0) != 0) continue;
    std::size_t at = 0;
    while ((at = line.find('"', at)) != std::string::npos) {
      const std::size_t end = line.find('"', at + 1);
      if (end == std::string::npos) break;
      job.outputs.push_back(line.substr(at + 1, end - at - 1));
      at = end + 1;
    }
  }
  std::vector<std::string> names;
  for (const OutputSpec& spec : output_specs(job))
    for (const std::string& name : head_datasets(spec)) names.push_back(name);
  return names;
}

// Every dataset a rank file promises is there: the outputs its job asked for.
void check_promised(const RankFileInfo& info, std::vector<std::string>& problems) {
  const std::string file = fs::path(info.path).filename().string();
  for (const std::string& name : promised_outputs(info.job_text)) {
    bool found = false;
    for (const DatasetSpec& d : info.datasets) found = found || d.name == name;
    if (!found) problems.push_back(str(file, ": dataset /outputs/", name, " is missing (its job stores it)"));
  }
}

Summary summarize(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw InputError(str("inspect: ", dir, ": no such folder"));
  if (!fs::is_directory(dir, ec)) throw InputError(str("inspect: ", dir, ": not a folder"));
  const std::vector<std::string> paths = list_rank_files(dir);
  if (paths.empty()) throw InputError(str("inspect: ", dir, " holds no rank files (rank-NNNNN.h5)"));

  Summary s;
  s.dir = dir;
  std::vector<RankFileInfo> infos;
  for (const std::string& p : paths) {
    FileEntry e;
    e.name = fs::path(p).filename().string();
    const uintmax_t bytes = fs::file_size(p, ec);
    e.bytes = ec ? 0 : bytes;
    try {
      e.info = read_rank_file(p);
      // Only the runs are kept (a few per rank), so a folder of a billion samples costs memory
      // per rank file, not per commit.
      e.commits = e.info->chunks.size();
      e.info->chunks = merged_runs(e.info->chunks);
      infos.push_back(*e.info);
      check_promised(*e.info, s.problems);
    } catch (const Error& err) {
      e.error = err.what();
      s.problems.push_back(str(e.name, ": unreadable: ", err.what()));
    }
    s.files.push_back(std::move(e));
  }
  if (!infos.empty()) {
    s.total = infos.front().total_samples;
    s.datasets = infos.front().datasets;
    for (const RankFileInfo& i : infos) {
      if (i.total_samples != s.total)
        s.problems.push_back(str(fs::path(i.path).filename().string(), " belongs to a job of ", i.total_samples,
                                 " samples, ", fs::path(infos.front().path).filename().string(), " to one of ", s.total));
      if (layout_text(i.datasets) != layout_text(s.datasets))
        s.problems.push_back(str(fs::path(i.path).filename().string(), " stores {", layout_text(i.datasets), "}, not {",
                                 layout_text(s.datasets), "}"));
    }
  }
  s.coverage = check_coverage(infos, s.total);
  s.outputs = check_outputs((fs::path(dir) / "outputs.h5").string(), s.datasets, s.total);
  s.keys = keys_view(dir, infos, s.outputs.ok, s.total);
  if (s.coverage.complete() && s.problems.empty() && !s.outputs.present)
    s.problems.push_back(str("every sample is committed but outputs.h5 is missing (the run ended before writing it): "
                             "`sluice run --resume --output ", dir, "` writes it"));

  const fs::path report = fs::path(dir) / "report.json";
  if (fs::exists(report, ec)) {
    try {
      std::ifstream in(report);
      s.report = json::parse(in);
    } catch (const std::exception& e) {
      s.report_error = str("report.json does not parse: ", e.what());
    }
  }
  return s;
}

// A value of report.json, or nullopt when it is missing or of another type.
template <typename T>
std::optional<T> field(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return std::nullopt;
    p = &(*p)[k];
  }
  try {
    return p->get<T>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

json to_json(const Summary& s) {
  json j;
  j["dir"] = s.dir;
  j["total_samples"] = s.total;
  j["rank_files"] = json::array();
  for (const FileEntry& e : s.files) {
    json f{{"file", e.name}, {"bytes", e.bytes}};
    if (e.info) {
      const RankFileInfo& i = *e.info;
      f.update({{"rank", i.rank}, {"world_size", i.world_size}, {"attempt", i.attempt}, {"rows", i.committed_rows},
                {"file_rows", i.file_rows}, {"chunks", e.commits}, {"closed_cleanly", i.closed_cleanly},
                {"finished", !i.end_time.empty()}, {"host", i.host}, {"device", i.device},
                {"start_time", i.start_time}, {"end_time", i.end_time}, {"model_sha256", i.model_sha256}});
    } else {
      f["error"] = e.error;
    }
    j["rank_files"].push_back(f);
  }
  j["datasets"] = json::array();
  int64_t rows = 0;
  for (const FileEntry& e : s.files)
    if (e.info) rows += e.info->committed_rows;
  for (const DatasetSpec& d : s.datasets)
    j["datasets"].push_back({{"name", "/outputs/" + d.name}, {"dtype", dtype_name(d.dtype)}, {"row_shape", d.row_shape},
                             {"rows", rows}, {"deflate", d.deflate}});
  const Coverage& c = s.coverage;
  j["keys"] = {{"width", s.keys.width}, {"first", s.keys.first}, {"last", s.keys.last}, {"from", s.keys.from}};
  j["bad_samples"] = s.keys.bad;
  j["bad_files"] = s.keys.bad_named;
  j["coverage"] = {{"total", c.total},   {"present", c.present},          {"complete", c.complete()},
                   {"gaps", c.gaps},     {"duplicates", c.duplicates},    {"duplicate_count", c.duplicate_count},
                   {"out_of_range", c.out_of_range}};
  j["outputs_h5"] = {{"present", s.outputs.present}, {"ok", s.outputs.ok}, {"detail", s.outputs.detail},
                     {"mappings", s.outputs.mappings}, {"datasets", s.outputs.datasets}};
  if (s.report) {
    const json& r = *s.report;
    j["report"] = {{"name", field<std::string>(r, {"name"}).value_or("")},
                   {"attempt", field<int>(r, {"attempt"}).value_or(0)},
                   {"world_size", field<int>(r, {"world_size"}).value_or(0)},
                   {"finished", field<std::string>(r, {"finished"}).value_or("")},
                   {"samples", field<int64_t>(r, {"job", "samples"}).value_or(0)},
                   {"makespan_s", field<double>(r, {"job", "makespan_s"}).value_or(0)},
                   {"throughput", field<double>(r, {"job", "throughput"}).value_or(0)},
                   {"imbalance", field<double>(r, {"job", "imbalance"}).value_or(0)},
                   {"complete", field<bool>(r, {"job", "complete"}).value_or(false)}};
  } else {
    j["report"] = nullptr;
  }
  if (!s.report_error.empty()) j["report_error"] = s.report_error;
  j["problems"] = s.problems;
  j["ok"] = s.ok();
  return j;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string state_text(const RankFileInfo& i) {
  if (!i.closed_cleanly) return "open: writing, or killed (--resume recovers it)";
  if (i.end_time.empty()) return "closed, unfinished";
  return "closed " + i.end_time;
}

void print_table(const Summary& s, std::ostream& out) {
  out << "run folder " << s.dir << ": " << s.files.size() << " rank file(s), " << s.total << " samples in the job\n\n";
  out << fmt("%-14s %5s %7s %10s %7s %10s  %s\n", "file", "rank", "attempt", "rows", "chunks", "MB", "state");
  for (const FileEntry& e : s.files) {
    if (!e.info) {
      out << fmt("%-14s %5s %7s %10s %7s %10.1f  ", e.name.c_str(), "-", "-", "-", "-", e.bytes / 1e6)
          << "UNREADABLE: " << e.error << "\n";
      continue;
    }
    const RankFileInfo& i = *e.info;
    out << fmt("%-14s %5d %7d %10lld %7zu %10.1f  ", e.name.c_str(), i.rank, i.attempt,
               static_cast<long long>(i.committed_rows), e.commits, e.bytes / 1e6)
        << state_text(i);
    if (i.file_rows > i.committed_rows) out << " (" << i.file_rows - i.committed_rows << " uncommitted rows)";
    out << "\n";
  }
  int64_t rows = 0;
  for (const FileEntry& e : s.files)
    if (e.info) rows += e.info->committed_rows;
  out << "\ndatasets (committed rows of all rank files; one row per sample):\n";
  // The name column as wide as the longest name (/outputs/detections_count is 25 characters).
  int w = 24;
  for (const DatasetSpec& d : s.datasets) w = std::max(w, static_cast<int>(("/outputs/" + d.name).size()));
  for (const DatasetSpec& d : s.datasets) {
    Shape full{rows};
    full.insert(full.end(), d.row_shape.begin(), d.row_shape.end());
    out << fmt("  %-*s %-9s %s", w, ("/outputs/" + d.name).c_str(), dtype_name(d.dtype), shape_str(full).c_str())
        << (d.deflate > 0 ? fmt("  deflate %d", d.deflate) : "") << "\n";
  }
  out << fmt("  %-*s %-9s [%lld]\n", w, "/sample_index", "int64", static_cast<long long>(rows));
  if (s.keys.width > 0) {
    out << fmt("  %-*s %-9s [%lld]\n", w, "/sample_key", str("S", s.keys.width).c_str(), static_cast<long long>(rows));
    std::string shown;
    for (const std::string& k : s.keys.first) shown += (shown.empty() ? "" : ", ") + k;
    if (!s.keys.last.empty()) shown += " ... ";
    for (std::size_t i = 0; i < s.keys.last.size(); ++i) shown += (i ? ", " : "") + s.keys.last[i];
    if (!s.keys.from.empty()) out << "  keys (" << s.keys.from << "): " << shown << "\n";
  }
  out << "  bad samples: " << s.keys.bad << (s.keys.bad > 0 ? " (/bad_samples: index, reason)" : "") << "\n";
  for (const std::string& b : s.keys.bad_named) out << "    " << b << "\n";
  if (s.keys.bad > static_cast<int64_t>(s.keys.bad_named.size()))
    out << "    ... " << s.keys.bad - static_cast<int64_t>(s.keys.bad_named.size()) << " more in /bad_samples\n";

  const Coverage& c = s.coverage;
  out << "\ncoverage: ";
  if (c.complete()) {
    out << "complete: each of the " << c.total << " samples once\n";
  } else {
    out << "INCOMPLETE: " << c.present << " of " << c.total << " samples present\n";
    if (!c.gaps.empty()) {
      out << "  missing:";
      for (std::size_t k = 0; k < c.gaps.size() && k < kListed; ++k)
        out << " [" << c.gaps[k].first << ", " << c.gaps[k].second << "]";
      if (c.gaps.size() > kListed) out << " ... (" << c.gaps.size() << " ranges)";
      out << "\n";
    }
    if (c.duplicate_count > 0) {
      out << "  duplicated: " << c.duplicate_count << " rows, indices";
      for (std::size_t k = 0; k < c.duplicates.size() && k < kListed; ++k) out << " " << c.duplicates[k];
      if (c.duplicates.size() > kListed) out << " ...";
      out << "\n";
    }
    if (c.out_of_range > 0) out << "  outside [0, " << c.total << "): " << c.out_of_range << " rows\n";
  }
  out << "outputs.h5: ";
  if (!s.outputs.present) out << "missing (written when a run completes)\n";
  else out << (s.outputs.ok ? "ok, " : "BROKEN: ") << s.outputs.detail << "\n";

  out << "report.json: ";
  if (s.report) {
    const json& r = *s.report;
    out << fmt("%s, attempt %d: %lld samples, makespan %.2f s, %.1f samples/s, imbalance %.2f%s\n",
               field<std::string>(r, {"name"}).value_or("?").c_str(), field<int>(r, {"attempt"}).value_or(0),
               static_cast<long long>(field<int64_t>(r, {"job", "samples"}).value_or(0)),
               field<double>(r, {"job", "makespan_s"}).value_or(0), field<double>(r, {"job", "throughput"}).value_or(0),
               field<double>(r, {"job", "imbalance"}).value_or(0),
               field<bool>(r, {"job", "complete"}).value_or(false) ? ", complete" : "");
  } else {
    out << (s.report_error.empty() ? "missing" : s.report_error) << "\n";
  }
  for (const std::string& p : s.problems) out << "problem: " << p << "\n";
  out << (s.ok() ? "OK\n" : "NOT OK\n");
}

}  // namespace

int inspect_run_folder(const std::string& dir, bool json_out, std::ostream& out) {
  const Summary s = summarize(dir);
  if (json_out) out << dump_json(to_json(s), 2) << "\n";
  else print_table(s, out);
  out.flush();
  return s.ok() ? kExitOk : kExitFailure;
}

void add_inspect_command(CLI::App& app) {
  struct Options {
    std::string dir;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("inspect", "Summarize a run folder: rank files, datasets, sample coverage, "
                                                "outputs.h5 and report.json (exit 1 when incomplete)");
  sub->add_option("DIR", opts->dir, "the run's output folder")->required();
  sub->add_flag("--json", opts->json, "print one JSON object instead of the table");
  sub->callback([opts] {
    const int status = inspect_run_folder(opts->dir, opts->json, std::cout);
    if (status != kExitOk) throw CLI::RuntimeError(status);
  });
}

}  // namespace sluice
