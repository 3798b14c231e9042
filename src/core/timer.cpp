#include "core/timer.h"

#include <cmath>
#include <cstdlib>
#include <ctime>

#include "core/params.h"

namespace sluice {

namespace {

double skew_from_environment() {
  return param_double("SLUICE_CLOCK_SKEW_S");
}

std::atomic<double> g_offset{0.0};

}  // namespace

double unix_time_now() {
  static const double skew = skew_from_environment();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + skew -
         g_offset.load(std::memory_order_relaxed);
}

void set_clock_offset(double seconds) { g_offset.store(seconds, std::memory_order_relaxed); }

double clock_offset() { return g_offset.load(std::memory_order_relaxed); }

std::string iso8601(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace sluice
