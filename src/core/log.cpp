#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/params.h"

namespace sluice {

namespace {
// SLUICE_LOG_LEVEL=debug|info|warning|error sets the starting level (info when unset or unknown),
// so that an engine's debug lines (the attention paths' start-up timings, ...) can be seen.  Read
// during static initialization, where an exception would end the process without a word: an
// unknown value is said on stderr and taken as info, as it always was.
int initial_level() {
  std::string v;
  try {
    v = param_string("SLUICE_LOG_LEVEL");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: %s; using info\n", e.what());
  }
  if (v == "debug") return static_cast<int>(LogLevel::Debug);
  if (v == "warning") return static_cast<int>(LogLevel::Warn);
  if (v == "error") return static_cast<int>(LogLevel::Error);
  return static_cast<int>(LogLevel::Info);
}
std::atomic<int> g_level{initial_level()};
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}

void log_line(LogLevel level, const std::string& message) {
  static const char* kTags[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string prefix = "sluice";
  if (g_world.load() > 1) prefix += str("[", g_rank.load(), "]");
  if (level == LogLevel::Info)
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), message.c_str());
  else
    std::fprintf(stderr, "%s: %s: %s\n", prefix.c_str(), kTags[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace sluice
