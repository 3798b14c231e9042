#pragma once
// An export's files: what each is called and how it is put in place, written once for
// `sluice export` (export/exporter.h) and `sluice run --export` (export/live_export.h).
//
//   naming     a sample's key is its file's path in the export folder (export_path): the key's
//              folders kept, its extension replaced (or kept), each '..' part written as kUpPart;
//   collisions two samples whose keys name one file are refused, with what to do (FileNames,
//              key_clash);
//   writing    a file is written under a temporary name in its own folder (partial_path:
//              .<hash of the path>[.r<rank>].sluice-partial, short whatever the name's length) and
//              renamed into place, so a file under its final name is always whole; a kill leaves
//              temporaries at most (removed when the folder is opened again).  ExportFolder is that
//              protocol: done / begin / commit.  Its two folders: ExportJournal (export/journal.h,
//              `sluice export`'s folder and its manifest) and RunExportFolder (below, the run's own
//              --export folder).
#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

namespace sluice {

// "a/b/cat.jpg" -> "a/b/cat" + ext ("a/b/cat.jpg" + ext with keep_extension).  A key that starts
// above the input's folder (a list file's "../data/b.jpg") stays inside the export folder: each ".."
// part is written as kUpPart ("__/data/b.png"), and *went_up is set.  Throws InputError for a key
// that names nothing; '\\' and control characters become '_'.
inline constexpr char kUpPart[] = "__";
std::string export_path(const std::string& key, const std::string& ext, bool keep_extension, bool* went_up = nullptr);

// Two samples (rows) whose keys export_path maps to the one file `rel`: what is wrong (`what`, without
// the command's prefix) and what to do (`hint`).  The same key twice (or one path spelt two ways,
// "a/./b.jpg" and "a/b.jpg") is the same file listed twice in the input: fix the list.  Otherwise
// --keep-extension is offered only where `can_keep_extension` and it would name them apart; else
// rename one of the files.
struct KeyClash {
  std::string what, hint;
};
KeyClash key_clash(const std::string& first, int64_t first_row, const std::string& second, int64_t second_row,
                   const std::string& rel, const std::string& ext, bool keep_extension, bool can_keep_extension);

// The files of one export's samples, one per key: claim() names each and refuses a second sample on
// a file, InputError `prefix` + key_clash's line, with its hint.
class FileNames {
 public:
  FileNames(std::string prefix, std::string ext, bool keep_extension, bool can_keep_extension)
      : prefix_(std::move(prefix)), ext_(std::move(ext)), keep_extension_(keep_extension),
        can_keep_extension_(can_keep_extension) {}
  void reserve(std::size_t n) { owner_.reserve(n); }
  // The file of `key` (row `row`), relative to the folder.
  std::string claim(const std::string& key, int64_t row);
  // Keys with '..' parts, and the first of them with its file.
  int64_t went_up() const { return went_up_; }
  const std::pair<std::string, std::string>& first_up() const { return first_up_; }

 private:
  std::string prefix_, ext_;
  bool keep_extension_, can_keep_extension_;
  std::unordered_map<std::string, std::pair<std::string, int64_t>> owner_;  // file -> key, row
  int64_t went_up_ = 0;
  std::pair<std::string, std::string> first_up_;
};

// Temporaries end so.
inline constexpr char kPartial[] = ".sluice-partial";
bool is_partial(const std::string& file_name);
// The temporary of `rel` in `dir`: in rel's folder (the rename stays on one file system), named by
// a hash of `rel` that is the same on every run (a rerun finds the one a kill left), and the rank's
// own when `rank` >= 0 (ranks writing one folder never share one).
std::string partial_path(const std::string& dir, const std::string& rel, int rank = -1);

// Where an export's files go.  Each file: done(rel) (there already, whole: skipped), else
// begin(rel) (its temporary, folders created), the bytes written there, commit(rel, key) (renamed
// into place); write() does all three.
class ExportFolder {
 public:
  virtual ~ExportFolder() = default;
  // Why `rel` cannot be a file name here ("" when it can).
  virtual std::string name_problem(const std::string& rel) const { return ""; }
  virtual bool done(const std::string& rel) = 0;
  virtual std::string begin(const std::string& rel) = 0;
  virtual void commit(const std::string& rel, const std::string& key) = 0;
  // begin, `bytes` into the temporary, commit.  Error when the temporary cannot be written (it is
  // removed).
  void write(const std::string& rel, const std::string& key, const std::string& bytes);
  // Files committed (written, not skipped) so far.
  virtual int64_t written() const = 0;
};

// The folder of a run's own export (`sluice run --export`): a file under its final name is done
// (it was renamed there whole); each rank writes through temporaries of its own (partial_path with
// its rank).  Thread-safe: a rank's export threads share one.
class RunExportFolder final : public ExportFolder {
 public:
  RunExportFolder(std::string dir, int rank) : dir_(std::move(dir)), rank_(rank) {}
  bool done(const std::string& rel) override;
  std::string begin(const std::string& rel) override;             // InputError when its folder cannot be made
  void commit(const std::string& rel, const std::string& key) override;  // InputError when the rename fails
  int64_t written() const override { return written_; }

 private:
  std::string dir_;
  int rank_;
  std::atomic<int64_t> written_{0};
};

}  // namespace sluice
