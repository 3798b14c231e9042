#pragma once
// JSON text of data that may hold names which are not UTF-8.  JSON strings are UTF-8, but a file
// name on Linux is any bytes ("caf\xe9.jpg" from a Latin-1 system), and nlohmann::json refuses to
// write such a string.  Every JSON file Sluice writes (report.json, attempts.json, inspect --json,
// the export manifest) goes through dump_json, which writes a string that is not valid UTF-8 with
// each byte outside a UTF-8 character as \xHH (lower-case hex) and each backslash doubled; valid
// strings are written as they are.  unescape_utf8 turns an escaped string back into its bytes (the
// export manifest marks its escaped records, so it reads back the exact file names).
#include <string>

#include <nlohmann/json.hpp>

namespace sluice {

bool is_valid_utf8(const std::string& s);

// s itself when it is valid UTF-8, else the escaped form above.
std::string escape_utf8(const std::string& s);
// The bytes of an escaped string (the inverse of escape_utf8 for a string that was not valid).
std::string unescape_utf8(const std::string& s);

// j with every string (values and object keys) escaped where needed.
nlohmann::json escaped_json(const nlohmann::json& j);
// escaped_json(j).dump(indent): never throws for a string that is not UTF-8.
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace sluice
