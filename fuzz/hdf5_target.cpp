// Fuzz target (c): an HDF5 file -> open_hdf5_source(file, "/images") -> read a few samples.  The
// input is written to a scratch file first (HDF5 opens files by name).  Opening must succeed or be
// an input error; a read may also fail with a runtime error (a corrupt chunk is only found when
// read), but never crash.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/source.h"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = (fuzz::scratch_dir() / "input.h5").string();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::unique_ptr<Source> src;
  try {
    src = open_hdf5_source(path, "/images");
  } catch (const Error& e) {
    fuzz::check_error_kind(e);
    return 0;
  } catch (const std::exception& e) {
    fuzz::finding("a std:: exception", e.what());
  }
  try {
    // A crafted file can declare samples of any size without storing them: read at most 1 MiB.
    const std::size_t bytes = src->sample_bytes();
    const int64_t count = std::min<int64_t>(src->size(), bytes ? static_cast<int64_t>((1 << 20) / bytes) : 0);
    const int64_t take = std::min<int64_t>(count, 4);
    if (take > 0) {
      std::vector<uint8_t> buf(static_cast<std::size_t>(take) * bytes);
      src->read(0, take, buf.data());
      src->read(src->size() - 1, 1, buf.data());  // the last row too: the far end of the dataset
    }
  } catch (const Error&) {
    // A read of a corrupt file fails at run time (exit 1): fine, it is a clear error.
  } catch (const std::exception& e) {
    fuzz::finding("a std:: exception", e.what());
  }
  return 0;
}
