#pragma once
// A named worker thread that keeps its exception for whoever joins it.  The thread's name shows in
// top, gdb and Nsight Systems; the exception travels to join() so one failing stage fails the run
// with its own message instead of std::terminate.
#include <exception>
#include <functional>
#include <string>
#include <thread>

namespace sluice {

class WorkerThread {
 public:
  WorkerThread() = default;
  // `on_error` runs on the worker thread right after `body` throws (typically: close the queues so
  // the other stages stop waiting).
  WorkerThread(std::string name, std::function<void()> body, std::function<void()> on_error = {});
  WorkerThread(WorkerThread&&) noexcept = default;
  WorkerThread& operator=(WorkerThread&&) noexcept;
  ~WorkerThread();

  // Waits for the thread; rethrows its exception, if any.
  void join();
  // Waits for the thread and returns its exception (or nullptr) instead of throwing.
  std::exception_ptr join_noexcept();
  bool joinable() const { return thread_.joinable(); }
  const std::string& name() const { return name_; }

 private:
  void start(std::exception_ptr* slot, std::function<void()> body, std::function<void()> on_error);
  std::string name_;
  std::thread thread_;
  std::exception_ptr error_;
  std::unique_ptr<std::exception_ptr> error_slot_;
};

// The most threads one thread option (--cpu-threads, --reader-threads, --writer-threads, export
// --threads) may ask for: 4 per core of this machine, at least 8.  More only share the same cores
// and cost memory (a stack each, and a buffer each for the readers and encoders).
int max_threads_per_option();
// `requested` when it is at most max_threads_per_option(); otherwise a UsageError naming `option`
// and the bound.
int check_thread_count(const std::string& option, int requested);

// Names the calling thread (at most 15 characters are kept by Linux).
void set_thread_name(const std::string& name);

}  // namespace sluice
