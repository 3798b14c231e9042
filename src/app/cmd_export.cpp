// `sluice export RUN_DIR`: the command.  Its options, the plan (what to export, from which stored
// output: by --what, or by what the run stored) and the summary line; the files are the exporter's
// (export/exporter.h: masks, classes, logits, detections, embeddings, dense), written through the
// export folder's manifest (export/journal.h), which makes a rerun finish an interrupted export and
// keeps the command from replacing files it did not write.  The run folder's lock
// (app/folder_lock.h) is held throughout, so no job changes the run while it is read.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "app/commands.h"
#include "app/folder_lock.h"
#include "app/job_file.h"
#include "cluster/launch.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/sha256.h"
#include "core/thread.h"
#include "export/exporter.h"
#include "export/journal.h"
#include "image/image.h"
#include "io/run_outputs.h"

namespace sluice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ExportOptions {
  std::string run_dir;
  std::string out;                  // default RUN_DIR/export
  std::string what = "auto";        // auto | masks | classes | logits | detections | embeddings | dense
  std::string output;               // the /outputs dataset (or topk prefix) to read; default by `what`
  bool original_size = false;       // masks: back to each image's size, undoing the run's geometry
  int64_t outside = 255;            // masks, --original-size: the class of pixels a center crop cut off
  std::string labels;               // classes: one name per line
  int top_k = 5;                    // classes from scores: how many
  std::string csv = "classes.csv";  // classes: the table's file name in the export folder
  bool keep_extension = false;      // name files <key>.png instead of replacing the key's extension
  bool draw = false;                // detections: draw/<key>.png previews, boxes over the photos
  std::string dtype;                // embeddings: float16 (the default, "") or float32
  bool overwrite = false;           // replace files the export did not write
  int threads = 0;                  // PNG encoding threads (0: the machine's cores)
  int64_t test_kill_after = -1;     // test only: SIGKILL in the middle of the file after this many
  bool test_stop_before_reading = false;  // test only: SIGSTOP itself (holding the run's lock) before reading rows
};

bool has(const RunOutputs& r, const std::string& name) { return r.output(name) != nullptr; }

// Scores [C] per row (extra axes of size 1 allowed, as [C,1,1]).
bool is_vector_row(const StoredOutput& o) { return !o.row_shape.empty() && shape_numel(o.row_shape) == o.row_shape[0]; }

// The job text in RUN_DIR/report.json ("" when there is none).
std::string job_text_of_report(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "report.json", std::ios::binary);
  if (!in) return "";
  const json j = json::parse(in, nullptr, false);
  return j.is_object() && j.contains("job_toml") && j["job_toml"].is_string() ? j["job_toml"].get<std::string>() : "";
}

// The string value of `option` in the job's TOML ("" when absent or unreadable).
std::string job_string(const std::string& toml, const std::string& option) {
  if (toml.empty()) return "";
  try {
    for (const JobEntry& e : parse_job_text(toml, "report.json's job"))
      if (e.key == option && !e.is_array && e.values.size() == 1 && e.values[0].kind == JobScalar::Kind::String)
        return e.values[0].text;
  } catch (const Error&) {
  }
  return "";
}

// Whether the job's TOML gives `option` a value other than false or "".
bool job_sets(const std::string& toml, const std::string& option) {
  std::istringstream lines(toml);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    auto trim = [](std::string& t) {
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t\r") + 1);
    };
    trim(k);
    trim(v);
    if (k == option) return !(v == "false" || v == "\"\"" || v.empty());
  }
  return false;
}

// What to export and from which stored output (by --what and --output, or by what the run stored),
// checked against the run before anything is written.
ExportSpec make_plan(const RunOutputs& r, const ExportOptions& o) {
  ExportSpec p;
  p.what = o.what;
  auto topk_prefix = [&](const std::string& prefix) { return has(r, prefix + "_values") && has(r, prefix + "_indices"); };
  if (p.what == "auto") {
    if (!o.output.empty()) {
      const StoredOutput* s = r.output(o.output);
      p.what = topk_prefix(o.output) ? "classes" : !s ? "" : (s->dtype == DType::U8 || s->dtype == DType::I32) ? "masks"
               : is_vector_row(*s) ? "classes" : "masks";
    } else if (has(r, "detections") && has(r, "detections_count")) {
      p.what = "detections";
    } else if (has(r, "embedding")) {
      p.what = "embeddings";
    } else if (has(r, "argmax")) {
      p.what = "masks";
    } else if (topk_prefix("topk_probs") || topk_prefix("topk")) {
      p.what = "classes";
    } else {
      for (const char* n : {"softmax", "logits"})
        if (const StoredOutput* s = r.output(n)) {
          p.what = is_vector_row(*s) ? "classes" : "masks";
          break;
        }
    }
    if (p.what.empty())
      throw InputError(str("export: ", r.path(), ": cannot tell what to export; choose --what masks, classes or logits"));
  }
  std::vector<std::string> names;
  for (const auto& s : r.outputs()) names.push_back(s.name);
  p.source = o.output.empty() ? default_source(p.what, names) : o.output;
  if (p.source.empty() || (!has(r, p.source) && !topk_prefix(p.source))) {
    std::string listed;
    for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
    throw InputError(str("export: ", r.path(), " has no output to export as ", p.what,
                         o.output.empty() ? "" : " named '" + o.output + "'", " (it has: ", listed, ")"));
  }
  const std::string problem = shape_problem(p.what, p.source, [&](const std::string& n) { return r.output(n); });
  if (!problem.empty())
    throw InputError(str("export: ", problem,
                         p.what == "detections"   ? " (sluice run --outputs detections)"
                         : p.what == "embeddings" ? " (sluice run --outputs embedding)"
                                                  : ""));
  const bool resampled = p.what == "masks" || p.what == "dense";  // what --original-size applies to
  if (o.original_size && resampled && !r.has_sizes())
    throw InputError(str("export: --original-size needs /sample_size in ", r.path(),
                         " (written for image inputs); this run's input had no image sizes"));
  if (o.original_size && resampled && !r.preprocess()) {
    // A run from before the geometry was recorded: a plain resize is undone by a resize, but the
    // padding of --letterbox or the cut of --center-crop cannot be told from the file.
    const std::string job = job_text_of_report(o.run_dir);
    for (const char* option : {"letterbox", "center-crop"})
      if (job_sets(job, option))
        throw InputError(str("export: --original-size cannot undo --", option, " of this run: ", r.path(),
                             " does not record the image geometry (it was written by an older sluice); "
                             "rerun the job with this version (or export without --original-size)"));
  }
  if (p.what == "detections" && o.draw) {
    // The previews read the photos again from the run's input folder.
    p.photos = job_string(job_text_of_report(o.run_dir), "input");
    std::error_code ec;
    if (p.photos.empty() || !fs::is_directory(p.photos, ec))
      throw InputError(str("export --draw reads the photos from the run's input folder, and this run's input ('",
                           p.photos, "') is not a folder"),
                       "export without --draw");
    p.decode_photo = decode_image_rgb;
  }
  p.original_size = o.original_size;
  p.outside = o.outside;
  p.labels = o.labels;
  p.top_k = o.top_k;
  p.csv = o.csv;
  p.keep_extension = o.keep_extension;
  p.float32 = o.dtype == "float32";
  p.threads = o.threads;
  p.test_kill_after = o.test_kill_after;
  p.test_stop_before_reading = o.test_stop_before_reading;
  return p;
}

// What makes two exports the same: a rerun skips files only when this matches.
std::string header_of(const ExportOptions& o, const RunOutputs& r, const ExportSpec& p) {
  // outputs.h5 is written once, when a run completes: its size and time tell one run from the next.
  struct stat st {};
  ::stat(r.path().c_str(), &st);
  json h{{"run", fs::absolute(o.run_dir).lexically_normal().string()},
         {"outputs_h5", {{"bytes", static_cast<int64_t>(st.st_size)},
                         {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}}},
         {"what", p.what},
         {"source", p.source},
         {"keep_extension", o.keep_extension}};
  if (p.what == "masks" || p.what == "dense") h["original_size"] = o.original_size;
  if (p.what == "masks" && o.original_size) h["outside"] = o.outside;
  if (p.what == "detections") {
    h["labels_sha256"] = o.labels.empty() ? "" : sha256_file(o.labels);
    h["draw"] = o.draw;
    h["images"] = "images.json";  // written beside the results (and image ids unique) since this field
    if (o.draw) h["box_labels"] = true;  // the previews' boxes carry their class and score since this field
  }
  if (p.what == "embeddings") {
    h["dtype"] = o.dtype.empty() ? "float16" : o.dtype;
    h["keys"] = "escaped";  // embeddings.keys.txt: keys_file_line
  }
  if (p.what == "classes") {
    h["top_k"] = o.top_k;
    h["csv"] = o.csv;
    h["labels_sha256"] = o.labels.empty() ? "" : sha256_file(o.labels);
  }
  return dump_json(h);
}

// Under a launcher every rank meets the others once in the start-up verdict (cluster/launch.h),
// after rank 0's work or its error line (the command line's error path brings rank 0's status
// there): every rank then exits with rank 0's status.
void meet_the_other_ranks() {
  if (const int status = settle_at_start(0, "")) throw CLI::RuntimeError(status);
}

void export_command(const ExportOptions& o) {
  // Export is one process's work; under mpirun or srun the other ranks leave it to rank 0.
  if (launcher_rank() != 0) {
    meet_the_other_ranks();
    return;
  }
  if (o.top_k < 1) throw UsageError(str("--top-k must be at least 1, got ", o.top_k));
  if (o.threads < 0) throw UsageError(str("--threads must be 0 (all cores) or more, got ", o.threads));
  check_thread_count("--threads", o.threads);
  {
    // The table is a file of the export folder: never a path out of it (nor onto the run's files).
    const fs::path csv(o.csv);
    bool up = false;
    for (const auto& part : csv) up = up || part == "..";
    if (o.csv.empty() || csv.is_absolute() || up || !csv.has_filename())
      throw UsageError(str("--csv '", o.csv, "': the table is written inside the export folder; give a file name such "
                           "as classes.csv (a subfolder at most, no '..', not an absolute path), and choose the folder "
                           "with --out"));
  }
  ExportOptions opts = o;
  if (opts.threads == 0) opts.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The run folder's lock, held to the end: no `sluice run` (a resume, an --overwrite that moves the
  // files away and writes new rank files) can change what outputs.h5 maps while it is read.  A job
  // holding it is running: outputs.h5, if there, is not the final one (or is about to be replaced).
  std::error_code ec;
  if (!fs::is_directory(o.run_dir, ec)) throw InputError(str("export: ", o.run_dir, ": no such run folder"));
  std::string holder;
  const std::unique_ptr<FolderLock> lock = FolderLock::try_acquire(o.run_dir, "sluice export", &holder);
  if (!lock)
    throw InputError(str("export: the run folder ", o.run_dir, " is in use (", holder,
                         "): a job is still writing it, or another export reads it; wait for it to end, then export"),
                     str("`sluice inspect ", o.run_dir, "` shows how far the job is"));
  const RunOutputs r(o.run_dir);
  const ExportSpec p = make_plan(r, opts);
  if (p.what != "masks" && p.what != "dense" && o.original_size)
    throw UsageError("--original-size applies to masks and dense maps (--what dense) only");
  if (p.what != "detections" && o.draw) throw UsageError("--draw applies to detections only");
  if (p.what != "embeddings" && !o.dtype.empty()) throw UsageError("--dtype applies to embeddings only");
  if (p.what != "classes" && p.what != "detections" && !o.labels.empty())
    throw UsageError("--labels applies to classes and detections only");
  const std::string out = o.out.empty() ? (fs::path(o.run_dir) / "export").string() : o.out;
  ExportJournal journal(out, header_of(o, r, p), o.overwrite, o.run_dir);
  Exporter e(p, r, journal);
  e.run();

  const std::string unit = p.what == "classes" ? "table" : p.what == "masks" ? "masks" : "files";
  std::string line = str("export: ", p.what == "classes" ? out + "/" + o.csv : out, ": ", journal.written(), " ", unit,
                         " written, ", journal.skipped(), " already there");
  line += str(", ", r.size() - static_cast<int64_t>(e.bad().size()), " of ", r.size(), " samples from /outputs/",
              p.source, p.what == "classes" && !has(r, p.source) ? "_{values,indices}" : "");
  if (!e.bad().empty()) {
    const std::vector<std::string> all = r.keys(0, r.size());
    line += str("; ", e.bad().size(), " bad sample(s) skipped:");
    constexpr std::size_t kListed = 10;
    for (std::size_t i = 0; i < e.bad().size() && i < kListed; ++i) {
      const int64_t row = e.bad()[i];
      const std::string why = r.bad_reason(row);
      line += str(i ? ", " : " ", all[static_cast<std::size_t>(row)], why.empty() ? "" : " (" + why + ")");
    }
    if (e.bad().size() > kListed) line += str(", ... (", e.bad().size() - kListed, " more in /bad_samples)");
  }
  std::printf("%s\n", line.c_str());
  for (const std::string& note : e.notes()) std::printf("export: note: %s\n", note.c_str());
  if (e.went_up() > 0)
    std::printf("export: note: %lld key(s) start above the input's folder, as '%s' (a list file's '..' entries); "
                "each '..' part is written as '%s' inside %s, so it is %s/%s\n",
                static_cast<long long>(e.went_up()), e.first_up().first.c_str(), kUpPart, out.c_str(), out.c_str(),
                e.first_up().second.c_str());
  std::fflush(stdout);
  for (const std::string& warning : e.warnings()) std::fprintf(stderr, "export: warning: %s\n", warning.c_str());
  std::fflush(stderr);
  if (!e.unwritable().empty()) {
    std::string names;
    constexpr std::size_t kListed = 5;
    for (std::size_t i = 0; i < e.unwritable().size() && i < kListed; ++i) names += (i ? ", " : "") + e.unwritable()[i];
    if (e.unwritable().size() > kListed) names += str(", ... (", e.unwritable().size() - kListed, " more)");
    throw InputError(str("export: ", e.unwritable().size(), " sample(s) not exported, their file names cannot be ",
                         "written in ", out, ": ", names),
                     "shorten those file names in the input (or export to a file system that takes longer names)");
  }
  meet_the_other_ranks();
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand("export", "Write a finished run's outputs as files named after the samples' keys: "
                                               "PNG masks, a CSV of top-k classes, or .npy arrays");
  sub->add_option("RUN_DIR", o->run_dir, "the run's output folder (with outputs.h5)")->required();
  sub->add_option("--out", o->out, "the export folder (default RUN_DIR/export)");
  sub->add_option("--what", o->what,
                  "masks | classes | logits | detections (COCO JSON, CSV, images.json) | embeddings (.npy and keys) | "
                  "dense (float maps as 16-bit PNGs and their ranges) | auto (by the stored outputs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "masks", "classes", "logits", "detections", "embeddings", "dense"}));
  sub->add_option("--output", o->output, "the stored output to read (e.g. argmax, logits, topk_probs)");
  sub->add_flag("--original-size", o->original_size,
                "masks, dense: each mask or map at its image's original size, undoing the run's resize, center crop "
                "or letterbox (nearest neighbour, as PIL's NEAREST; a dense map's pixels the crop cut off are 0)");
  sub->add_option("--outside", o->outside,
                  "masks with --original-size: the class of the pixels a --center-crop cut off (the model never saw them)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--labels", o->labels,
                  "classes, detections: a text file with one class name per line (line i: class i); detections also "
                  "take \"ID NAME\" lines, ID being the COCO category_id of class i");
  sub->add_option("--top-k", o->top_k, "classes: how many classes per row (at most what a topk output holds)")
      ->capture_default_str();
  sub->add_option("--csv", o->csv, "classes: the table's file name in the export folder")->capture_default_str();
  sub->add_flag("--draw", o->draw,
                "detections: also draw/<key>.png, each photo (read again from the run's input folder) with its boxes, "
                "each labelled with its class (--labels' name, else its id) and score");
  sub->add_option("--dtype", o->dtype,
                  "embeddings: float16 (the default; a value beyond its range is refused) or float32 (as stored)")
      ->check(CLI::IsMember({"float16", "float32"}));
  sub->add_flag("--keep-extension", o->keep_extension, "name files <key>.png instead of replacing the key's extension");
  sub->add_flag("--overwrite", o->overwrite, "replace files in the export folder that this command did not write");
  sub->add_option("--threads", o->threads, "masks: PNG encoding threads (0: all cores; at most 4 per core, or 8)")
      ->capture_default_str();
  sub->add_option("--test-kill-after", o->test_kill_after, "")->group("");
  sub->add_flag("--test-stop-before-reading", o->test_stop_before_reading, "")->group("");
  sub->callback([o] { export_command(*o); });
}

}  // namespace sluice
