#pragma once
// `sluice run --export masks|npy|classes|embeddings|detections`: the results as files while the job runs (docs/usage.md,
// "Results while the job runs"); the same files, names and bytes as `sluice export` of the
// finished run.
//
// LiveExport wraps a rank's file (it is a RankFile itself, between the pipeline's writer and the
// rank file): append() passes each batch on and keeps a copy of the exported output's rows with
// their keys and status; commit() passes the record on and, once the file has committed it, hands
// those rows to the export threads, which write each good row's file (export/exporter.h,
// write_row_file) under a temporary name in its folder and rename it into place (export/files.h,
// RunExportFolder).  The ledger is the truth: rows appended but never committed (a stop's last
// batches, a failure's) are dropped with their copy.
//
// Restartable with the run: a file already under its final name is not written again, and no file
// is ever under its final name half-written, so a kill at any moment leaves whole files and
// temporaries (removed when the export folder is opened again).  Rows committed before a kill
// whose files were not written yet are written by finish_live_export() when the job completes,
// from outputs.h5.  The one-table format (classes) works the same way, by lines: the export
// threads compute each committed row's line and append it to the rank's line file
// (.classes.rN.sluice-lines); finish_live_export() has the exporter put the table together in
// sample order, computing from outputs.h5 only the lines a kill kept from being written.  The
// whole-file formats (embeddings: embeddings.npy and embeddings.keys.txt; detections:
// detections.json, detections.csv and images.json) keep each committed row's stored bytes in such
// records instead (.<format>.rN.sluice-lines), and finish_live_export() has the exporter write the
// files from them, reading from outputs.h5 the blocks with a row a kill kept from being recorded.
// The files are the exporter's, as `sluice export` of the finished run writes them by default.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/rank_file.h"

namespace sluice {

// The stored output `format` exports, by `sluice export`'s choice among `outputs` (the job's
// dataset names; export/exporter.h default_source): masks argmax, softmax, logits; npy logits,
// softmax, else the first; classes topk_probs, softmax, logits, topk; embeddings embedding;
// detections detections.  UsageError naming what is there when none fits.
std::string live_export_source(const std::string& format, const std::vector<std::string>& outputs);

struct LiveExportOptions {
  std::string format;            // masks | npy | classes | embeddings | detections
  std::string dir;               // the export folder
  std::string run_dir;           // the run's output folder (never written into directly)
  int threads = 1;               // export threads of this rank
  bool resume = false;           // this attempt continues a run: files already there are kept
  int rank = 0;
  int top_k = 5;                 // classes: as sluice export's default
};

// Opens the export folder for one rank (every rank calls it, at set-up): creates it, checks that
// it can be written (a file is created and removed), that a fresh run finds it empty and a resume
// finds its own export there (.sluice-run-export.json), and that no two samples' keys name one
// file.  `keys`: every sample's key, in sample order.  Rank 0 writes the folder's marker.
// InputError saying what to do otherwise.
void open_live_export_dir(const LiveExportOptions& o, const std::vector<std::string>& keys);

// The rank file `inner` with the rows of output `source` (of `specs`) exported once committed.
// `key_bytes`: the width of the batches' keys.
std::unique_ptr<RankFile> make_live_export(std::unique_ptr<RankFile> inner, const LiveExportOptions& o,
                                           const std::vector<DatasetSpec>& specs, const std::string& source,
                                           std::size_t key_bytes);

// After the job completed and outputs.h5 was written (rank 0): every good row's file that is not
// there yet (committed before a kill but not exported), a table format's table, or a whole-file
// format's files.  Returns the number of files written.
int64_t finish_live_export(const LiveExportOptions& o);

}  // namespace sluice
