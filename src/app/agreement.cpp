#include "app/agreement.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace sluice {

namespace {

// What a step ended with: 0 and no message when it succeeded.
struct Outcome {
  int code = 0;
  std::string message;
};

Outcome run_step(const std::function<void()>& step) {
  Outcome o;
  try {
    step();
  } catch (const Error& e) {
    o.code = e.exit_code();
    o.message = error_text(e);
  } catch (const std::bad_alloc&) {
    o.code = kExitFailure;
    o.message = "out of memory (std::bad_alloc) during set-up";
  } catch (const std::exception& e) {
    o.code = kExitFailure;
    o.message = e.what();
  }
  if (o.code == 0 && !o.message.empty()) o.code = kExitFailure;
  return o;
}

}  // namespace

void print_rank_error(const MpiContext& mpi, const std::string& message) {
  if (message.empty()) return;
  const std::string who = mpi.world_size() > 1 ? str("[rank ", mpi.rank(), "] ") : std::string();
  std::fprintf(stderr, "sluice: error: %s%s\n", who.c_str(), message.c_str());
  std::fflush(stderr);
}

void agreed(const MpiContext& mpi, const std::function<void()>& step) {
  const Outcome mine = run_step(step);
  const std::vector<int64_t> codes = mpi.allgather(mine.code);
  for (int r = 0; r < mpi.world_size(); ++r) {
    const int code = static_cast<int>(codes[static_cast<std::size_t>(r)]);
    if (code == 0) continue;
    if (r == mpi.rank()) print_rank_error(mpi, mine.message);
    throw Error("", code);  // already printed by rank r
  }
}

std::string agreed_on_root(const MpiContext& mpi, const std::function<std::string()>& step) {
  std::string result;
  Outcome mine;
  if (mpi.rank() == 0) mine = run_step([&] { result = step(); });
  if (mpi.world_size() > 1) {
    // {status, message length, message, result} in one broadcast.
    std::string packed;
    if (mpi.rank() == 0) packed = str(mine.code, " ", mine.message.size(), " ", mine.message, result);
    packed = mpi.broadcast_string(packed);
    std::istringstream is(packed);
    std::size_t len = 0;
    is >> mine.code >> len;
    is.get();
    const std::size_t at = static_cast<std::size_t>(is.tellg());
    if (mpi.rank() != 0) result = packed.substr(at + len);
  }
  if (mine.code != 0) {
    if (mpi.rank() == 0) print_rank_error(mpi, mine.message);
    throw Error("", mine.code);
  }
  return result;
}

void or_abort(const MpiContext& mpi, const std::function<void()>& step,
              const std::function<void(const std::string&)>& on_failure) {
  const Outcome o = run_step(step);
  if (o.code == 0) return;
  print_rank_error(mpi, o.message);
  if (on_failure) {
    try {
      on_failure(o.message);
    } catch (...) {
    }
  }
  // Alone, the error goes up the ordinary way (destructors close files); with peers, they may be
  // inside a collective this rank will never join, so the job ends here.
  if (mpi.world_size() > 1) mpi.abort(o.code);
  throw Error("", o.code);
}

}  // namespace sluice
