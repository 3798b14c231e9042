// Recovery of a rank file whose writer stopped without closing it, and salvage of a damaged one
// (rank_file.h, recover_rank_file).  Each rank recovers its own share of a run folder's files in
// parallel (app/ledgers.cpp); nothing here talks to other ranks.
//
// A killed writer's file is shrunk in place: it is reopened in SWMR write mode (its writer flag
// cleared first, as h5clear does), every row dataset is cut to the rows of its last commit and the
// ledger to its valid records, and it is closed cleanly.  No committed row is copied, so this costs
// milliseconds whatever the file's size (the copy it replaces took 4.7 s for 2.5 million rows of
// 1 byte, BENCHMARKS.md).  SWMR mode keeps the file readable at every moment while it shrinks, and
// shrinking to the same commit twice changes nothing, so a recovery that is itself killed just
// runs again.
//
// A damaged file (cut short, an impossible ledger record, rows that do not hold the samples the
// ledger names) cannot be trusted to take writes, so what can still be read is copied: the
// leading records whose rows are all inside the file and whose /sample_index agrees, into a fresh
// file built under <path>.recovering.  The damaged file is kept as <path>.damaged (a hard link
// made before the copy replaces it, so at every moment `path` names one of the two); the samples
// of the records left out are pending again, and the resume redoes them.
//
// A file can also read back whole and still fail when a writer takes it up again: its metadata
// damaged only where a writer looks (a chunk index block past the committed rows, which no reader
// and no recovery loads).  The resume's writer then salvages it the same way
// (salvage_for_writing), every committed record being readable, and writes on into the copy.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "core/ranges.h"
#include "io/rank_file_format.h"

namespace sluice {
namespace rankfile {

namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string folder_of(const std::string& path) { return std::filesystem::absolute(path).parent_path().string(); }

// A name beside `path` that is free: <path>.damaged, then <path>.damaged.2, ...
std::string damaged_name(const std::string& path) {
  std::error_code ec;
  std::string name = path + ".damaged";
  for (int k = 2; std::filesystem::exists(name, ec); ++k) name = str(path, ".damaged.", k);
  return name;
}

std::vector<hsize_t> dims_with_rows(hid_t dataset, int64_t rows) {
  std::vector<hsize_t> dims = h5::dims_of(dataset);
  dims.at(0) = static_cast<hsize_t>(rows);
  return dims;
}

// The entries of a list dataset (/bad_samples: a compound with an int64 member "index") that name
// samples in `held`, in file order, as raw bytes of the file's type; `type` gets that type.
std::vector<unsigned char> held_entries(hid_t list, const std::vector<Range>& held, h5::Type& type, int64_t* kept,
                                        int64_t* leading) {
  type = h5::Type(H5_CHECK(H5Dget_type(list)));
  const std::size_t size = H5Tget_size(type);
  const int member = H5Tget_member_index(type, "index");
  SLUICE_CHECK(member >= 0, "a list dataset without an 'index' member");
  const std::size_t offset = H5Tget_member_offset(type, static_cast<unsigned>(member));
  const int64_t n = static_cast<int64_t>(h5::dims_of(list).at(0));
  std::vector<unsigned char> all(static_cast<std::size_t>(n) * size), out;
  if (n > 0) H5_CHECK(H5Dread(list, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()));
  *kept = 0;
  *leading = 0;
  bool prefix = true;
  for (int64_t k = 0; k < n; ++k) {
    int64_t index = 0;
    std::memcpy(&index, all.data() + static_cast<std::size_t>(k) * size + offset, sizeof index);
    const auto it =
        std::upper_bound(held.begin(), held.end(), index, [](int64_t v, const Range& r) { return v < r.end; });
    const bool in = it != held.end() && it->first <= index;
    prefix = prefix && in;
    if (!in) continue;
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(k * static_cast<int64_t>(size)),
               all.begin() + static_cast<std::ptrdiff_t>((k + 1) * static_cast<int64_t>(size)));
    ++*kept;
    if (prefix) ++*leading;
  }
  return out;
}

std::vector<Range> samples_of(const std::vector<ChunkRecord>& records) {
  std::vector<Range> r;
  for (const ChunkRecord& c : records) r.push_back({c.first_index, c.first_index + c.count});
  return merge_ranges(std::move(r));
}

// ---- a killed writer's file: shrink in place ----------------------------------------------------

void shrink_in_place(const std::string& path, const RankFileInfo& info) {
  h5::Plist fapl = h5::file_access();
  hbool_t on = true;
  // The superblock still says a writer holds the file; this is h5clear's way past that.
  H5_CHECK(H5Pset(fapl, "clear_status_flags", &on));
  std::string error;
  h5::File f(h5::open_file(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl, error));
  if (!f.valid()) SLUICE_THROW("rank file ", path, ": cannot reopen it to recover it: ", error);
  // The killed writer allocated space after its last flush, past the end the superblock records,
  // and some of the chunk index entries pointing there may have reached the disk (for rows past the
  // extent, so no reader sees them).  Moving the recorded end to the file's real end keeps every
  // later allocation clear of those bytes: a resumed writer that extends over such an entry
  // writes into its space, which then belongs to the file, instead of into space HDF5 would
  // otherwise hand out again (or past the recorded end, which HDF5 refuses).
  H5_CHECK(H5Fincrement_filesize(f, 0));
  for (const std::string& name : info.row_datasets) {
    h5::Dataset d(H5_CHECK(H5Dopen2(f, name.c_str(), H5P_DEFAULT)));
    H5_CHECK(H5Dset_extent(d, dims_with_rows(d, info.committed_rows).data()));
  }
  if (h5::exists(f, kBadSamples)) {
    // Entries are appended with their rows, so the committed ones come first: keep that prefix.
    h5::Dataset list(H5_CHECK(H5Dopen2(f, kBadSamples, H5P_DEFAULT)));
    h5::Type type;
    int64_t kept = 0, leading = 0;
    held_entries(list, samples_of(info.chunks), type, &kept, &leading);
    H5_CHECK(H5Dset_extent(list, dims_with_rows(list, leading).data()));
  }
  h5::Dataset ledger(H5_CHECK(H5Dopen2(f, kLedger, H5P_DEFAULT)));
  const hsize_t records = info.chunks.size();
  H5_CHECK(H5Dset_extent(ledger, &records));
  ledger.close();
  f.close();  // closing cleanly clears the writer flag: plain readers (h5py, h5dump) open it now
}

// ---- a damaged file: copy what can be read -----------------------------------------------------

// How many leading records have every chunk of every row dataset inside the file (a file cut short
// reads zeros past its end instead of failing).
std::size_t records_inside(hid_t file, const RankFileInfo& info, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  const haddr_t eof = static_cast<haddr_t>(st.st_size);
  std::vector<h5::Dataset> sets;
  std::vector<int64_t> chunk_rows;
  for (const std::string& name : info.row_datasets) {
    sets.emplace_back(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(sets.back())));
    std::vector<hsize_t> chunk(h5::dims_of(sets.back()).size());
    H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()));
    chunk_rows.push_back(static_cast<int64_t>(std::max<hsize_t>(chunk.at(0), 1)));
  }
  for (std::size_t k = 0; k < info.chunks.size(); ++k) {
    const ChunkRecord& r = info.chunks[k];
    for (std::size_t d = 0; d < sets.size(); ++d) {
      std::vector<hsize_t> offset(h5::dims_of(sets[d]).size(), 0);
      for (int64_t c = r.first_row / chunk_rows[d]; c * chunk_rows[d] < r.first_row + r.count; ++c) {
        offset[0] = static_cast<hsize_t>(c * chunk_rows[d]);
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(sets[d], offset.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
            addr + size > eof) {
          h5::error_stack_text();
          return k;
        }
      }
    }
  }
  return info.chunks.size();
}

// How many leading records have rows that read back in every row dataset (a chunk index block that
// fails its checksum makes the rows it indexes unreadable).  Reads every committed row: only for a
// file already found damaged.
std::size_t records_readable(hid_t file, const RankFileInfo& info) {
  std::vector<unsigned char> buf;
  std::vector<h5::Dataset> sets;
  for (const std::string& name : info.row_datasets) sets.emplace_back(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  for (std::size_t k = 0; k < info.chunks.size(); ++k) {
    const ChunkRecord& r = info.chunks[k];
    for (const h5::Dataset& d : sets) {
      h5::Type type(H5_CHECK(H5Dget_type(d)));
      const std::vector<hsize_t> dims = h5::dims_of(d);
      const std::vector<hsize_t> row_dims(dims.begin() + 1, dims.end());
      std::size_t row_bytes = H5Tget_size(type);
      for (hsize_t n : row_dims) row_bytes *= n;
      buf.resize(static_cast<std::size_t>(r.count) * row_bytes);
      h5::Space mspace = h5::row_block_space(r.count, row_dims);
      h5::Space fspace = h5::select_rows(d, r.first_row, r.count);
      if (H5Dread(d, type, mspace, fspace, H5P_DEFAULT, buf.data()) < 0) {
        h5::error_stack_text();
        return k;
      }
    }
  }
  return info.chunks.size();
}

// Creates `name` in `dst` like it is in `src` (type, chunking, filters, fill value, attributes),
// with no rows yet.
h5::Dataset create_like(hid_t src_file, hid_t dst_file, const std::string& name, h5::Dataset& src) {
  src = h5::Dataset(H5_CHECK(H5Dopen2(src_file, name.c_str(), H5P_DEFAULT)));
  h5::Type type(H5_CHECK(H5Dget_type(src)));
  h5::Plist dcpl(H5_CHECK(H5Dget_create_plist(src)));
  std::vector<hsize_t> dims = h5::dims_of(src), maxdims = dims;
  dims[0] = 0;
  maxdims[0] = H5S_UNLIMITED;
  h5::Space space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data())));
  h5::Dataset dst(H5_CHECK(H5Dcreate2(dst_file, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  h5::copy_attrs(src, dst);
  return dst;
}

// Appends rows [first, first + count) of `src` to `dst` (which has `at` rows), in blocks.
void copy_rows(hid_t src, hid_t dst, int64_t first, int64_t count, int64_t at, std::vector<unsigned char>& buf) {
  h5::Type type(H5_CHECK(H5Dget_type(src)));
  std::vector<hsize_t> dims = h5::dims_of(src);
  const std::vector<hsize_t> row_dims(dims.begin() + 1, dims.end());
  std::size_t row_bytes = H5Tget_size(type);
  for (hsize_t d : row_dims) row_bytes *= d;
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((16u << 20) / std::max<std::size_t>(row_bytes, 1)));
  H5_CHECK(H5Dset_extent(dst, dims_with_rows(dst, at + count).data()));
  for (int64_t done = 0; done < count; done += block) {
    const int64_t n = std::min(block, count - done);
    buf.resize(static_cast<std::size_t>(n) * row_bytes);
    h5::Space mspace = h5::row_block_space(n, row_dims);
    h5::Space sspace = h5::select_rows(src, first + done, n);
    h5::Space dspace = h5::select_rows(dst, at + done, n);
    H5_CHECK(H5Dread(src, type, mspace, sspace, H5P_DEFAULT, buf.data()));
    H5_CHECK(H5Dwrite(dst, type, mspace, dspace, H5P_DEFAULT, buf.data()));
  }
}

void write_salvaged(hid_t src, const RankFileInfo& info, const std::string& tmp) {
  h5::Plist fapl = h5::file_access();
  h5::File dst(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl));
  if (!dst.valid())
    SLUICE_THROW("rank file ", info.path, ": cannot create ", tmp, " to salvage it: ", h5::error_stack_text());
  h5::copy_attrs(src, dst);
  h5::Plist gcpl(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE)));
  H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  h5::Group outputs(H5_CHECK(H5Gcreate2(dst, kOutputsGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT)));
  outputs.close();

  // The kept records' rows, packed one after the other (so the records' first_row change).
  std::vector<ChunkRecord> kept;
  std::vector<unsigned char> buf;
  for (const std::string& name : info.row_datasets) {
    h5::Dataset s;
    h5::Dataset d = create_like(src, dst, name, s);
    int64_t at = 0;
    for (const ChunkRecord& r : merged_runs(info.chunks)) {
      copy_rows(s, d, r.first_row, r.count, at, buf);
      at += r.count;
    }
  }
  int64_t row = 0;
  for (const ChunkRecord& r : info.chunks) {
    kept.push_back(ChunkRecord{static_cast<int64_t>(kept.size()), r.first_index, r.count, row});
    row += r.count;
  }
  if (h5::exists(src, kBadSamples)) {
    h5::Dataset s;
    h5::Dataset d = create_like(src, dst, kBadSamples, s);
    h5::Type type;
    int64_t n = 0, leading = 0;
    const std::vector<unsigned char> entries = held_entries(s, samples_of(info.chunks), type, &n, &leading);
    H5_CHECK(H5Dset_extent(d, dims_with_rows(d, n).data()));
    if (n > 0) H5_CHECK(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, entries.data()));
  }
  // The ledger in this format, whatever the damaged file's was.
  const hsize_t n = kept.size(), unlimited = H5S_UNLIMITED, chunk = kLedgerChunk;
  h5::Space space(H5_CHECK(H5Screate_simple(1, &n, &unlimited)));
  h5::Plist dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_chunk(dcpl, 1, &chunk));
  const ChunkRecord blank = ledger_fill();
  h5::Type file_type = ledger_file_type(), mem_type = ledger_memory_type();
  H5_CHECK(H5Pset_fill_value(dcpl, mem_type, &blank));
  h5::Dataset ledger(H5_CHECK(H5Dcreate2(dst, kLedger, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (n > 0) {
    H5_CHECK(H5Dwrite(ledger, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, kept.data()));
  }
  h5::write_attr(dst, attr::kFormat, kFormatVersion);
  ledger.close();
  dst.close();
}

std::string salvage(hid_t src, RankFileInfo info, std::size_t keep, const std::string& why) {
  const std::string& path = info.path;
  const int64_t before = total_size(samples_of(info.chunks));
  info.chunks.resize(keep);
  const std::string tmp = path + ".recovering";
  const std::string aside = damaged_name(path);
  std::error_code ec;
  std::filesystem::remove(tmp, ec);  // left by a salvage that was itself killed
  try {
    write_salvaged(src, info, tmp);
    fsync_path(tmp, false);
    if (::link(path.c_str(), aside.c_str()) != 0)
      SLUICE_THROW("rank file ", path, ": cannot keep the damaged file as ", aside, ": ", std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      SLUICE_THROW("rank file ", path, ": cannot replace it with its salvaged copy: ", std::strerror(errno));
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  fsync_path(folder_of(path), true);
  const int64_t saved = total_size(samples_of(info.chunks));
  return str("rank file ", path, " is damaged (", why, "): salvaged ", keep, " commit(s) holding ", saved,
             " samples; ", before - saved,
             " committed samples could not be read and will be redone; the damaged file is kept as ", aside);
}

std::string move_aside(const std::string& path, const std::string& why) {
  const std::string aside = damaged_name(path);
  if (std::rename(path.c_str(), aside.c_str()) != 0)
    SLUICE_THROW("rank file ", path, " cannot be read (", why, ") nor moved aside: ", std::strerror(errno));
  fsync_path(folder_of(path), true);
  return str("rank file ", path, " cannot be read as a rank file (", why, "): moved aside to ", aside,
             "; its samples will be redone");
}

}  // namespace

std::string recover_if_needed(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(str("rank file ", path, ": no such file"));
  ReadHandle h;
  RankFileInfo info;
  try {
    h = open_for_reading(path, /*salvage=*/true);
    info = read_info(h.file, path);
  } catch (const h5::LockedFile&) {
    throw;  // another process holds it: not damage, and not ours to move
  } catch (const Error& e) {
    h.file.reset();
    return move_aside(path, e.what());
  }
  std::size_t keep = info.chunks.size();
  std::string why = info.damage;
  try {
    if (h.truncated) {
      keep = std::min(keep, records_inside(h.file, info, path));
      why = "cut short: the file is smaller than its superblock says";
    }
    const std::size_t sound = sound_records(h.file, info);
    if (sound < keep) {
      keep = sound;
      why = str("ledger record ", sound, " names samples its rows do not hold");
    }
    // A kill -9 can cut a write() between two pages of memory: a metadata block rewritten in place
    // that straddles a 4 KiB page boundary is then left half new, half old, and fails its checksum.
    // The rows it indexes no longer read, and a resume that adds an entry to it fails at its first
    // flush (and every later one would).  Every chunk index is walked whole to find such a block.
    const std::string torn = chunk_index_failure(h.file, info);
    if (!torn.empty()) {
      keep = std::min(keep, records_readable(h.file, info));
      why = str("a chunk index block fails its checksum, a write the kill cut short (", torn, ")");
    }
    if (h.truncated || !info.damage.empty() || keep < info.chunks.size() || !torn.empty())
      return salvage(h.file, info, keep, why);
  } catch (const h5::LockedFile&) {
    throw;
  } catch (const Error& e) {
    h.file.reset();
    return move_aside(path, str(why.empty() ? "" : why + "; ", e.what()));
  }

  const bool tidy =
      info.file_rows == info.committed_rows && info.ledger_slots == static_cast<int64_t>(info.chunks.size());
  if (h.clean && tidy) return "";
  h.file.close();
  shrink_in_place(path, info);
  return str("rank file ", path, ": recovered ", info.chunks.size(), " commit(s) (", info.committed_rows,
             " rows) in place; dropped ", info.file_rows - info.committed_rows, " uncommitted rows");
}

std::string chunk_index_failure(hid_t file, const RankFileInfo& info) {
  std::vector<std::string> names = info.row_datasets;
  names.push_back(kLedger);
  if (h5::exists(file, kBadSamples)) names.push_back(kBadSamples);
  for (const std::string& name : names) {
    h5::Dataset d(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    h5::Space space(H5_CHECK(H5Dget_space(d)));  // HDF5 1.10.8 refuses H5S_ALL here
    hsize_t chunks = 0;
    if (H5Dget_num_chunks(d, space, &chunks) < 0) return str(name, ": ", h5::error_stack_text());
  }
  return "";
}

std::string salvage_for_writing(const std::string& path, const std::string& why) {
  ReadHandle h;
  RankFileInfo info;
  try {
    h = open_for_reading(path, /*salvage=*/true);
    info = read_info(h.file, path);
  } catch (const h5::LockedFile&) {
    throw;
  } catch (const Error& e) {
    h.file.reset();
    return move_aside(path, str(why, "; ", e.what()));
  }
  try {
    std::size_t keep = info.chunks.size();
    if (h.truncated) keep = std::min(keep, records_inside(h.file, info, path));
    keep = std::min(keep, sound_records(h.file, info));
    if (!chunk_index_failure(h.file, info).empty()) keep = std::min(keep, records_readable(h.file, info));
    return salvage(h.file, info, keep, why);
  } catch (const h5::LockedFile&) {
    throw;
  } catch (const Error& e) {
    h.file.reset();
    return move_aside(path, str(why, "; ", e.what()));
  }
}

}  // namespace rankfile

std::string recover_rank_file(const std::string& path) {
  h5::quiet_errors();
  return rankfile::recover_if_needed(path);
}

}  // namespace sluice
