#pragma once
// HDF5 plumbing shared by the io/ files: the H5_CHECK macro, move-only RAII owners for every kind of
// hid_t, and small helpers for types, attributes and hyperslabs.  Only io/*.cpp and app/cmd_inspect
// include this; the rest of the code sees rank_file.h and source.h.
//
// HDF5 prints its error stack to stderr by default.  quiet_errors() turns that off for the calling
// thread (Debian's build is thread-safe, so the setting is per thread) and H5_CHECK puts the stack's
// messages into the exception instead, so a failure is one line.
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace sluice::h5 {

// The innermost HDF5 error messages of the calling thread's stack, "; "-separated (empty if none).
std::string error_stack_text();
// Stops HDF5 from printing errors on this thread; every entry point of io/ calls it (the first call
// per thread does the work, the rest return at once).
void quiet_errors();

// The errno of a failed file lock named in HDF5's error text ("unable to lock file, errno = 11"),
// 0 when the text names none.
int lock_errno(const std::string& error_text);

// The hint for a file system that refuses locks (ENOLCK, ENOSYS, EOPNOTSUPP: NFS without its lock
// daemon, Lustre mounted without flock), "" for any other error text.
std::string lock_refusal_hint(const std::string& error_text);

// A file that another process holds locked: not damage (recovery must not move such a file aside),
// but a refusal to touch it.
struct LockedFile : InputError {
  using InputError::InputError;
};

// H5Fopen that outlasts the lock of a process on its way out (core/lock_holder.h): while the open
// fails on the file's lock and no live process of this host holds it, it retries every 50 ms for up
// to lock_wait_seconds(), saying once whom it waits for.  A live holder ends in a LockedFile naming
// it at once (it may be a job still writing the file); so does a lock that outlasts the wait.  A file
// system that refuses locks ends in an InputError with lock_refusal_hint().  Any other failure
// returns an invalid id with HDF5's reason in `error`.
hid_t open_file(const std::string& path, unsigned flags, hid_t fapl, std::string& error);

// Owns one hid_t and closes it with the matching H5?close.  Closing at destruction ignores errors
// (it may run during unwinding); call close() to have a failure thrown.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: HDF5 calls take the id directly
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }
  void close();  // like reset(), but throws when HDF5 reports a failure

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Dataset = Handle<H5Dclose>;
using Space = Handle<H5Sclose>;
using Type = Handle<H5Tclose>;
using Plist = Handle<H5Pclose>;
using Attr = Handle<H5Aclose>;
using Group = Handle<H5Gclose>;

}  // namespace sluice::h5

// Evaluates an HDF5 call and returns its value; a negative result (every HDF5 failure: hid_t,
// herr_t and htri_t alike) throws sluice::Error naming the call, file:line and HDF5's own reason.
#define H5_CHECK(call)                                                                           \
  ([&]() {                                                                                       \
    auto h5_check_result_ = (call);                                                              \
    if (h5_check_result_ < 0)                                                                    \
      throw ::sluice::Error(                                                                     \
          ::sluice::format_failure(#call, __FILE__, __LINE__, ::sluice::h5::error_stack_text())); \
    return h5_check_result_;                                                                     \
  }())

namespace sluice::h5 {

template <herr_t (*Close)(hid_t)>
void Handle<Close>::close() {
  if (id_ < 0) return;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  H5_CHECK(Close(id));
}

// ---- types ---------------------------------------------------------------------------------------
// The HDF5 type that stores `t` in a file.  float16 and bfloat16 are IEEE-style float types HDF5
// 1.10 has no predefined name for; h5py reads the float16 one as numpy float16.  The same type
// serves as the in-memory type, because our buffers hold those bits little-endian.
Type file_type(DType t);
// The in-memory type for reading or writing a buffer of `t` (native types; F16/BF16 as above).
Type memory_type(DType t);
// Maps a dataset's type back to a DType; Undefined when it is none of ours.
DType dtype_of(hid_t type);
// "float32", "int16", "compound", ... for messages.
std::string type_text(hid_t type);

// ---- dataspaces ----------------------------------------------------------------------------------
std::vector<hsize_t> dims_of(hid_t dataset);
// A file space of `dataset` with rows [first, first + count) selected (all of the other dimensions).
Space select_rows(hid_t dataset, int64_t first, int64_t count);
// A simple memory space [count, row_dims...].
Space row_block_space(int64_t count, const std::vector<hsize_t>& row_dims);

// ---- attributes ----------------------------------------------------------------------------------
// Creates (or overwrites, when it exists with the same type) attribute `name` on `obj`.  Strings
// are variable-length UTF-8 (h5py reads them as str) or, with `width`, fixed-length UTF-8 of that
// many bytes, NUL-padded (h5py: bytes): only those can be rewritten while the file is in SWMR
// mode, where no attribute may be created and the global heap of variable-length data must not
// change.
void write_attr(hid_t obj, const char* name, const std::string& value, std::size_t width = 0);
void write_attr(hid_t obj, const char* name, int64_t value);
void write_attr(hid_t obj, const char* name, double value);
bool has_attr(hid_t obj, const char* name);
// Read back; nullopt if the attribute is missing or not convertible (strings: fixed or variable).
std::optional<std::string> read_attr_string(hid_t obj, const char* name);
std::optional<int64_t> read_attr_int(hid_t obj, const char* name);
std::optional<double> read_attr_double(hid_t obj, const char* name);
// Copies every attribute of `src` onto `dst` (same names, types and values).
void copy_attrs(hid_t src, hid_t dst);

// ---- files ---------------------------------------------------------------------------------------
// File access properties for our files: latest format (needed for SWMR), and a metadata read
// retry count small enough that a reader of a half-written file fails fast instead of spinning.
Plist file_access();
bool exists(hid_t loc, const std::string& path);  // every link on the way exists

}  // namespace sluice::h5
