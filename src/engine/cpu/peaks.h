#pragma once
// The host's ceilings for the CPU engine's profile: a memcpy rate and an sgemm rate, both on the
// engine's own thread pool, so that a step's achieved rate compares with what those threads can do.
#include "engine/cpu/thread_pool.h"
#include "engine/profile.h"

namespace sluice::cpu {

DevicePeaks measure_host_peaks(ThreadPool& pool);

}  // namespace sluice::cpu
