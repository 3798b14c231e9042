#include "core/thread.h"

#include <pthread.h>

#include <algorithm>
#include <memory>
#include <system_error>

#include "core/error.h"

namespace sluice {

void set_thread_name(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

int max_threads_per_option() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(8, 4 * cores);
}

int check_thread_count(const std::string& option, int requested) {
  const int bound = max_threads_per_option();
  if (requested > bound) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    throw UsageError(str(option, " ", requested, " is more threads than this machine can use: at most ", bound,
                         " (4 per core, ", cores, " core", cores == 1 ? "" : "s", ", at least 8)"),
                     str("lower ", option, " to ", bound, " or less"));
  }
  return requested;
}

WorkerThread::WorkerThread(std::string name, std::function<void()> body, std::function<void()> on_error)
    : name_(std::move(name)), error_slot_(std::make_unique<std::exception_ptr>()) {
  std::exception_ptr* slot = error_slot_.get();
  try {
    start(slot, std::move(body), std::move(on_error));
  } catch (const std::system_error& e) {
    throw Error(str("cannot start the ", name_, " thread: ", e.what()), kExitFailure,
                "the system refused another thread (memory, or the limit of `ulimit -u`): lower the thread options "
                "(--reader-threads, --writer-threads, --cpu-threads)");
  }
}

void WorkerThread::start(std::exception_ptr* slot, std::function<void()> body, std::function<void()> on_error) {
  thread_ = std::thread([name = name_, body = std::move(body), on_error = std::move(on_error), slot] {
    set_thread_name(name);
    try {
      body();
    } catch (...) {
      *slot = std::current_exception();
      if (on_error) {
        try {
          on_error();
        } catch (...) {
        }
      }
    }
  });
}

WorkerThread& WorkerThread::operator=(WorkerThread&& other) noexcept {
  if (this != &other) {
    if (thread_.joinable()) thread_.join();
    name_ = std::move(other.name_);
    thread_ = std::move(other.thread_);
    error_ = other.error_;
    error_slot_ = std::move(other.error_slot_);
  }
  return *this;
}

WorkerThread::~WorkerThread() {
  if (thread_.joinable()) thread_.join();
}

std::exception_ptr WorkerThread::join_noexcept() {
  if (thread_.joinable()) thread_.join();
  if (error_slot_ && *error_slot_) {
    error_ = *error_slot_;
    *error_slot_ = nullptr;
  }
  return error_;
}

void WorkerThread::join() {
  std::exception_ptr e = join_noexcept();
  if (e) std::rethrow_exception(e);
}

}  // namespace sluice
