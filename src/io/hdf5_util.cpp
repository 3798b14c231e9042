#include "io/hdf5_util.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "core/lock_holder.h"
#include "core/log.h"

namespace sluice::h5 {

namespace {

struct StackWalk {
  std::vector<std::string> messages;  // innermost first
};

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* walk = static_cast<StackWalk*>(data);
  if (e->desc && *e->desc) walk->messages.emplace_back(e->desc);
  return 0;
}

// HDF5's file driver reports a failed system call as one long line ("file write failed: time =
// ..., errno = 27, error message = 'File too large', buf = 0x..."); the errno is what a user needs.
std::string system_error_reason(const std::string& message) {
  const std::size_t at = message.find("errno = ");
  if (at == std::string::npos) return "";
  const int err = std::atoi(message.c_str() + at + 8);
  if (err == EFBIG) return "file size limit reached (ulimit -f)";
  if (err == ENOSPC) return "no space left on the device";
  if (err == EDQUOT) return "disk quota exceeded";
  return err > 0 ? std::strerror(err) : "";
}

}  // namespace

std::string error_stack_text() {
  StackWalk walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &walk);
  H5Eclear2(H5E_DEFAULT);
  if (walk.messages.empty()) return "HDF5 gave no reason";
  // The outermost message says what failed, the innermost why; the ones between repeat them.
  const std::string& outer = walk.messages.back();
  std::string inner = walk.messages.front();
  const std::string reason = system_error_reason(inner);
  if (!reason.empty()) return outer + " (" + inner.substr(0, inner.find(':')) + ": " + reason + ")";
  return walk.messages.size() == 1 || outer == inner ? outer : outer + " (" + inner + ")";
}

void quiet_errors() {
  thread_local bool quiet = false;
  if (quiet) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

int lock_errno(const std::string& error_text) {
  const std::size_t at = error_text.find("unable to lock file, errno = ");
  if (at == std::string::npos) return 0;
  return std::atoi(error_text.c_str() + at + std::strlen("unable to lock file, errno = "));
}

std::string lock_refusal_hint(const std::string& error_text) {
  const int err = lock_errno(error_text);
  if (err != ENOLCK && err != ENOSYS && err != EOPNOTSUPP) return "";
  return "this file system refuses the file locks HDF5 takes (NFS without its lock service, Lustre mounted "
         "without flock): set HDF5_USE_FILE_LOCKING=FALSE in the job's environment (mpirun -x "
         "HDF5_USE_FILE_LOCKING=FALSE, or export it before sbatch); the rank files then rely on sluice's "
         "own folder lock, which keeps a second job out of the folder where the file system allows it";
}

namespace {

// A process seen holding an exclusive lock may be in the instant between taking SIGKILL off its
// queue and marking itself exiting: look once more before calling it live.  True: not live after all.
bool recheck_live(const std::string& path, const LockHolder& first) {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const LockHolder again = lock_holder(path);
  return !again.found || again.pid != first.pid || again.exiting || again.shared;
}

}  // namespace

hid_t open_file(const std::string& path, unsigned flags, hid_t fapl, std::string& error) {
  const auto start = std::chrono::steady_clock::now();
  bool said = false;
  for (;;) {
    const hid_t id = H5Fopen(path.c_str(), flags, fapl);
    if (id >= 0) error.clear();
    else error = error_stack_text();
    const int err = id >= 0 ? 0 : lock_errno(error);
    if (err == 0) {
      if (said) log_info(path, ": the lock was released; going on");
      return id;
    }
    const std::string hint = lock_refusal_hint(error);
    if (!hint.empty()) throw InputError(str("cannot open ", path, ": ", error), hint);
    const LockHolder holder = lock_holder(path);
    if (holder.found && holder.pid > 0 && !holder.exiting && !holder.shared && !recheck_live(path, holder))
      throw LockedFile(str(path, " is locked by a live process, ", holder.describe(),
                           ": another job may still be writing it"),
                       "wait for that process to end, or stop it, then run again");
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= lock_wait_seconds())
      throw LockedFile(str(path, " is still locked after ", static_cast<int>(waited), " s of waiting (holder: ",
                           holder.describe(), ")"),
                       "a process of another node may hold it: make sure no job uses this folder, then run again");
    if (!said) {
      log_info(path, " is locked by ", holder.describe(), holder.shared ? " (a reader)" : " (a process of the stopped attempt on its way out)",
               ": waiting for it to let go of the file");
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// ---- types ---------------------------------------------------------------------------------------

namespace {

// A two-byte IEEE-style float: sign at bit 15, `ebits` exponent bits, the rest mantissa.
Type half_type(std::size_t ebits, std::size_t ebias) {
  Type t(H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  const std::size_t mbits = 15 - ebits;
  H5_CHECK(H5Tset_fields(t, 15, mbits, ebits, 0, mbits));
  H5_CHECK(H5Tset_size(t, 2));
  H5_CHECK(H5Tset_ebias(t, ebias));
  return t;
}

}  // namespace

Type file_type(DType t) {
  switch (t) {
    case DType::F32: return Type(H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
    case DType::F64: return Type(H5_CHECK(H5Tcopy(H5T_IEEE_F64LE)));
    case DType::F16: return half_type(5, 15);
    case DType::BF16: return half_type(8, 127);
    case DType::U8: case DType::Bool: return Type(H5_CHECK(H5Tcopy(H5T_STD_U8LE)));
    case DType::I8: return Type(H5_CHECK(H5Tcopy(H5T_STD_I8LE)));
    case DType::I32: return Type(H5_CHECK(H5Tcopy(H5T_STD_I32LE)));
    case DType::I64: return Type(H5_CHECK(H5Tcopy(H5T_STD_I64LE)));
    default: SLUICE_THROW("HDF5: no file type for data type ", dtype_name(t));
  }
}

Type memory_type(DType t) {
  switch (t) {
    case DType::F32: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_FLOAT)));
    case DType::F64: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_DOUBLE)));
    case DType::F16: case DType::BF16: return file_type(t);
    case DType::U8: case DType::Bool: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_UINT8)));
    case DType::I8: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_INT8)));
    case DType::I32: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_INT32)));
    case DType::I64: return Type(H5_CHECK(H5Tcopy(H5T_NATIVE_INT64)));
    default: SLUICE_THROW("HDF5: no memory type for data type ", dtype_name(t));
  }
}

DType dtype_of(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) return DType::F32;
    if (size == 8) return DType::F64;
    if (size == 2) {
      std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return DType::Undefined;
      if (esize == 5 && msize == 10) return DType::F16;
      if (esize == 8 && msize == 7) return DType::BF16;
    }
    return DType::Undefined;
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 1) return is_signed ? DType::I8 : DType::U8;
    if (size == 4 && is_signed) return DType::I32;
    if (size == 8 && is_signed) return DType::I64;
  }
  return DType::Undefined;
}

std::string type_text(hid_t type) {
  const DType d = dtype_of(type);
  if (d != DType::Undefined) return dtype_name(d);
  const std::size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return str(H5Tget_sign(type) == H5T_SGN_2 ? "int" : "uint", bits);
    case H5T_FLOAT: return str("float", bits, " (non-IEEE layout)");
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "unknown type";
  }
}

// ---- dataspaces ----------------------------------------------------------------------------------

std::vector<hsize_t> dims_of(hid_t dataset) {
  Space space(H5_CHECK(H5Dget_space(dataset)));
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

Space select_rows(hid_t dataset, int64_t first, int64_t count) {
  Space space(H5_CHECK(H5Dget_space(dataset)));
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  std::vector<hsize_t> start(dims.size(), 0), size = dims;
  start[0] = static_cast<hsize_t>(first);
  size[0] = static_cast<hsize_t>(count);
  H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, size.data(), nullptr));
  return space;
}

Space row_block_space(int64_t count, const std::vector<hsize_t>& row_dims) {
  std::vector<hsize_t> dims{static_cast<hsize_t>(count)};
  dims.insert(dims.end(), row_dims.begin(), row_dims.end());
  return Space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

// ---- attributes ----------------------------------------------------------------------------------

bool has_attr(hid_t obj, const char* name) { return H5_CHECK(H5Aexists(obj, name)) > 0; }

namespace {

// Opens attribute `name` when it exists with a type `fits` accepts; otherwise deletes any old one
// and creates it with `type`.
template <typename Fits>
Attr open_or_create(hid_t obj, const char* name, hid_t type, Fits fits) {
  if (has_attr(obj, name)) {
    Attr a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
    Type old(H5_CHECK(H5Aget_type(a)));
    if (fits(old.get())) return a;
    a.reset();
    H5_CHECK(H5Adelete(obj, name));
  }
  Space scalar(H5_CHECK(H5Screate(H5S_SCALAR)));
  return Attr(H5_CHECK(H5Acreate2(obj, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT)));
}

Type fixed_string_type(std::size_t width) {
  Type t(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t, width));
  H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

}  // namespace

static Type variable_string_type() {
  Type t(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

void write_attr(hid_t obj, const char* name, const std::string& value, std::size_t width) {
  if (width == 0) {
    Type type = variable_string_type();
    Attr a = open_or_create(obj, name, type, [](hid_t old) {
      return H5Tget_class(old) == H5T_STRING && H5Tis_variable_str(old) > 0;
    });
    const char* p = value.c_str();
    H5_CHECK(H5Awrite(a, type, &p));
    return;
  }
  SLUICE_CHECK(value.size() <= width, "attribute ", name, " holds at most ", width, " bytes");
  Type type = fixed_string_type(width);
  Attr a = open_or_create(obj, name, type, [&](hid_t old) {
    return H5Tget_class(old) == H5T_STRING && H5Tis_variable_str(old) == 0 && H5Tget_size(old) >= value.size();
  });
  Type stored(H5_CHECK(H5Aget_type(a)));
  std::string buf = value;
  buf.resize(H5Tget_size(stored), '\0');
  Type mem = fixed_string_type(buf.size());
  H5_CHECK(H5Awrite(a, mem, buf.data()));
}

void write_attr(hid_t obj, const char* name, int64_t value) {
  Attr a = open_or_create(obj, name, H5T_STD_I64LE, [](hid_t old) { return H5Tget_class(old) == H5T_INTEGER; });
  H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &value));
}

void write_attr(hid_t obj, const char* name, double value) {
  Attr a = open_or_create(obj, name, H5T_IEEE_F64LE, [](hid_t old) { return H5Tget_class(old) == H5T_FLOAT; });
  H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &value));
}

std::optional<std::string> read_attr_string(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  Attr a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  Type type(H5_CHECK(H5Aget_type(a)));
  if (H5Tget_class(type) != H5T_STRING) return std::nullopt;
  if (H5_CHECK(H5Tis_variable_str(type)) > 0) {
    Type mem(H5_CHECK(H5Tcopy(H5T_C_S1)));
    H5_CHECK(H5Tset_size(mem, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mem, H5Tget_cset(type)));  // HDF5 does not convert between character sets
    char* p = nullptr;
    H5_CHECK(H5Aread(a, mem, &p));
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  std::string buf(H5Tget_size(type), '\0');
  Type mem = fixed_string_type(buf.size());
  H5_CHECK(H5Tset_cset(mem, H5Tget_cset(type)));
  H5_CHECK(H5Aread(a, mem, buf.data()));
  buf.resize(std::strlen(buf.c_str()));  // drop the NUL padding
  return buf;
}

std::optional<int64_t> read_attr_int(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  Attr a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  Type type(H5_CHECK(H5Aget_type(a)));
  if (H5Tget_class(type) != H5T_INTEGER) return std::nullopt;
  int64_t v = 0;
  H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &v));
  return v;
}

std::optional<double> read_attr_double(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  Attr a(H5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  Type type(H5_CHECK(H5Aget_type(a)));
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) return std::nullopt;
  double v = 0;
  H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
  return v;
}

namespace {

struct CopyState {
  hid_t dst;
  std::exception_ptr error;
};

// H5Aiterate2 calls this per attribute; exceptions must not cross the C library, so they are kept.
herr_t copy_one_attr(hid_t src, const char* name, const H5A_info_t*, void* data) {
  auto* st = static_cast<CopyState*>(data);
  try {
    Attr a(H5_CHECK(H5Aopen(src, name, H5P_DEFAULT)));
    Type type(H5_CHECK(H5Aget_type(a)));
    Space space(H5_CHECK(H5Aget_space(a)));
    const hssize_t n = H5_CHECK(H5Sget_simple_extent_npoints(space));
    std::vector<unsigned char> buf(static_cast<std::size_t>(n) * H5Tget_size(type) + 1);
    H5_CHECK(H5Aread(a, type, buf.data()));
    if (H5_CHECK(H5Aexists(st->dst, name)) > 0) H5_CHECK(H5Adelete(st->dst, name));
    Attr b(H5_CHECK(H5Acreate2(st->dst, name, type, space, H5P_DEFAULT, H5P_DEFAULT)));
    const herr_t written = H5Awrite(b, type, buf.data());
    if (H5_CHECK(H5Tdetect_class(type, H5T_VLEN)) > 0 || H5_CHECK(H5Tis_variable_str(type)) > 0)
      H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf.data());
    H5_CHECK(written);
    return 0;
  } catch (...) {
    st->error = std::current_exception();
    return -1;
  }
}

}  // namespace

void copy_attrs(hid_t src, hid_t dst) {
  CopyState st{dst, nullptr};
  const herr_t r = H5Aiterate2(src, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, copy_one_attr, &st);
  if (st.error) std::rethrow_exception(st.error);
  H5_CHECK(r);
}

// ---- files ---------------------------------------------------------------------------------------

Plist file_access() {
  Plist fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST));
  // A SWMR reader retries a metadata read whose checksum fails (100 times by default), expecting
  // the writer to finish the entry; a killed writer never will, so give up sooner.
  H5_CHECK(H5Pset_metadata_read_attempts(fapl, 8));
  return fapl;
}

bool exists(hid_t loc, const std::string& path) {
  std::size_t pos = 0;
  while (pos < path.size()) {
    std::size_t next = path.find('/', pos + 1);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/") {
      if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    pos = next;
  }
  return true;
}

}  // namespace sluice::h5
