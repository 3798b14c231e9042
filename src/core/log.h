#pragma once
// Logging to stderr.  Results go to stdout; progress, warnings and errors to stderr.  Lines carry a
// rank prefix in multi-rank jobs so interleaved output stays attributable.
#include <string>

#include "core/error.h"

namespace sluice {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Quiet = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_rank(int rank, int world_size);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_debug(const Args&... a) { if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, str(a...)); }
template <typename... Args>
void log_info(const Args&... a) { if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, str(a...)); }
template <typename... Args>
void log_warn(const Args&... a) { if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, str(a...)); }
template <typename... Args>
void log_error(const Args&... a) { log_line(LogLevel::Error, str(a...)); }

}  // namespace sluice
