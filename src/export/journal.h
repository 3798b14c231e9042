#pragma once
// The export folder's manifest, OUT/.sluice-export.json: what `sluice export` wrote there, so a rerun
// skips what is done and nothing it did not write is ever replaced.
//
// The file is JSON Lines (one JSON object per line; `jq` reads it as a stream), appended to and
// never rewritten, so an export killed at any moment leaves at most a torn last line:
//   {"export": {...}}                              one per run of the command: what it exports and how
//   {"begin": "a/b/cat.png"}                       before the file is created (under a temporary name)
//   {"file": "a/b/cat.png", "key": "a/b/cat.jpg", "bytes": 1234, "sha256": "..."}   once it is in place
// A file is written under a short temporary name in its folder, .<hash of the path>.sluice-partial
// (a name of any legal length keeps the temporary one legal; export/files.h), and renamed into place.
// A path is the manifest's once a "begin" names it.  A rerun with the same "export" object skips the
// files whose last record is a "file" line written under it and whose size and sha256 still match;
// everything else of the manifest's is written again.  A file at a target path the manifest does not
// name is someone else's: an error, unless `overwrite`.  Except in the folder of the run's own
// `sluice run --export` (its .sluice-run-export.json names the run being exported): a file there
// that already holds exactly the bytes this export would write is taken into the manifest and
// counted as already there; one that differs (another format, --original-size, labels) is an
// error that says so, unless `overwrite`.
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "export/files.h"

namespace sluice {

class ExportJournal final : public ExportFolder {
 public:
  static constexpr const char* kName = ".sluice-export.json";
  // The marker `sluice run --export` leaves in its folder (export/live_export.h).
  static constexpr const char* kLiveMarker = ".sluice-run-export.json";

  // Creates `out_dir` when needed and reads its manifest.  `header` is a JSON object (dumped) that
  // says what this export writes and how; `overwrite` allows replacing foreign files.  Nothing is
  // ever written directly into `protected_dir` (the run folder, whose files are not the export's):
  // InputError when `out_dir` is that folder, or when a path would lead there.
  // Symbolic links inside `out_dir` are never followed: the manifest, a folder on a file's way or the
  // file itself being one is an InputError (`out_dir` itself may be one).
  ExportJournal(const std::string& out_dir, const std::string& header, bool overwrite,
                const std::string& protected_dir = "");
  ~ExportJournal() override;
  ExportJournal(const ExportJournal&) = delete;
  ExportJournal& operator=(const ExportJournal&) = delete;

  // Why `rel` cannot be a file name here ("" when it can): a part longer than the file system takes.
  std::string name_problem(const std::string& rel) const override;

  // True when an earlier run of the same export wrote `rel` and it is still intact.
  bool done(const std::string& rel) override;

  // Claims `rel` (relative to the folder; creates its parent folders) and returns the temporary path
  // to write it to.  Throws InputError when a file the manifest does not name is in the way.
  std::string begin(const std::string& rel) override;
  // Moves the temporary file into place and records it (in the run's live export folder, a file
  // already there with the same bytes is kept and recorded instead; one that differs is an
  // InputError unless `overwrite`).
  void commit(const std::string& rel, const std::string& key) override;

  int64_t skipped() const { return skipped_; }
  int64_t written() const override { return written_; }
  std::string path(const std::string& rel) const;

 private:
  struct Entry {
    bool claimed = false;  // a "begin" names it: the manifest's file
    bool live = false;     // begun over a file of the run's live export: recorded only at commit
    bool complete = false; // the last record is a "file" line under the current header
    int64_t bytes = -1;
    std::string sha256;
  };
  void append(const std::string& line);
  std::string partial_path(const std::string& rel) const;
  void check_no_links(const std::string& rel);

  std::string dir_;
  bool overwrite_;
  std::string real_dir_, protected_;  // canonical paths ("" protected: none)
  std::string live_format_;           // the run's `--export` format when this is its folder, else ""
  std::set<std::string> checked_dirs_;  // folders of the export already seen to be no links
  long name_max_ = 255;
  std::map<std::string, Entry> entries_;
  std::FILE* log_ = nullptr;
  int64_t skipped_ = 0, written_ = 0;
};

}  // namespace sluice
