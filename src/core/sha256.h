#pragma once
// SHA-256 of a file (FIPS 180-4), for provenance: the model's digest in every rank file and the
// report, and the export journal's check that a file it wrote is still the one it wrote.
#include <string>

namespace sluice {

// Lower-case hex digest of the file's bytes; InputError when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace sluice
