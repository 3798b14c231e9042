#pragma once
// Passages from a file, one at a time, in order: JSONL (one object a line, the passage in one of
// its string fields) or plain text (one passage a line).
//
// JSONL: `\uD800`-style escapes of a lone surrogate read as U+FFFD, as do ill-formed UTF-8 bytes
// (of either format); a line that is not an object, lacks the field or holds no string there is an
// InputError naming the line.  Plain text: lines end at \n, a \r before it is dropped.
#include <cstddef>
#include <fstream>
#include <string>

namespace sluice::text {

enum class PassageFormat { Auto, Jsonl, Text };  // Auto: JSONL for .jsonl/.ndjson/.json, else text

class PassageReader {
 public:
  PassageReader(const std::string& path, PassageFormat format, std::string field = "text");
  // The next passage (valid UTF-8); false at the end.
  bool next(std::string& passage);
  std::size_t line() const { return line_; }  // of the passage last read, from 1
  bool jsonl() const { return jsonl_; }

 private:
  std::string path_, field_;
  std::ifstream in_;
  bool jsonl_ = false;
  std::size_t line_ = 0;
  std::string buf_;
};

// A JSON text with each lone-surrogate escape (\uD800..\uDFFF not in a pair) made \uFFFD, in place
// (the same length); nlohmann::json refuses them.
void replace_lone_surrogate_escapes(std::string& json_text);

}  // namespace sluice::text
