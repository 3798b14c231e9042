#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace sluice {

namespace {
// SLUICE_LOG_LEVEL=debug|info|warning|error sets the starting level (info when unset or unknown),
// so that an engine's debug lines (the attention paths' start-up timings, ...) can be seen.
int initial_level() {
  const char* v = std::getenv("SLUICE_LOG_LEVEL");
  if (!v) return static_cast<int>(LogLevel::Info);
  if (std::strcmp(v, "debug") == 0) return static_cast<int>(LogLevel::Debug);
  if (std::strcmp(v, "warning") == 0) return static_cast<int>(LogLevel::Warn);
  if (std::strcmp(v, "error") == 0) return static_cast<int>(LogLevel::Error);
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
