#pragma once
// Job files: the subset of TOML that a flat list of options needs, read by hand.
//
//   # comment
//   key = "basic string with \"escapes\""   |  'literal string'
//   key = 42  |  -1_000  |  0x2A  |  0.5  |  1e-3  |  inf  |  nan
//   key = true | false
//   key = [1, 2, 3]  (one level, one line or several, trailing comma and comments allowed)
//
// Keys are bare (letters, digits, '-', '_') and set once.  Tables ([section], [[array]], inline
// {..}), dotted or quoted keys, nested arrays, multi-line strings and dates are refused: a job
// file is the options of `sluice run`, nothing else.  The reader is a loop over characters with no
// recursion on the input, so no line length or nesting depth can exhaust the stack.  Every error
// is a UsageError "job file NAME line L, column C: ...".
#include <string>
#include <vector>

namespace sluice {

struct JobScalar {
  enum class Kind { String, Integer, Float, Bool };
  Kind kind = Kind::String;
  // String: the decoded text.  Integer: the value in decimal (-2^63 to 2^64 - 1).  Float: the literal without '_'
  // ("1e-3", "-inf").  Bool: "true" or "false".
  std::string text;
  int line = 0, column = 0;   // where the value starts (1-based)
};

struct JobEntry {
  std::string key;
  bool is_array = false;
  std::vector<JobScalar> values;  // one value, or an array's elements (possibly none)
  int line = 0, column = 0;       // of the key
};

// Kind names for messages: "a string", "an integer", "a number", "true or false".
const char* job_kind_text(JobScalar::Kind kind);

// Parses job-file text; `name` (the path) prefixes every error.
std::vector<JobEntry> parse_job_text(const std::string& text, const std::string& name);

// Reads and parses the job file at `path`: UsageError when it is missing, a folder, unreadable,
// over 1 MiB, or malformed.
std::vector<JobEntry> read_job_file(const std::string& path);

}  // namespace sluice
