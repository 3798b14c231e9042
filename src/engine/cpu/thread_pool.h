#pragma once
// A small fixed thread pool for the CPU engine.  forward() splits each op into tasks whose
// boundaries depend only on the tensor shapes, never on the number of threads, so which thread runs
// a task cannot change a result: the engine stays bit-deterministic at any thread count.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::cpu {

class ThreadPool {
 public:
  // `threads` counts the calling thread too: ThreadPool(1) starts no worker.  0 means all cores.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls f(task, thread) for every task in [0, n); `thread` in [0, size()) names the thread running
  // it (0: the caller), for per-thread scratch.  Returns when all tasks are done; rethrows the first
  // exception a task threw.  Not reentrant: tasks must not call parallel_for themselves.
  template <typename F>
  void parallel_for(int64_t n, F&& f) {
    if (n <= 0) return;
    if (n == 1 || size_ == 1) {
      for (int64_t i = 0; i < n; ++i) f(i, 0);
      return;
    }
    run(n, &f, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); });
  }

  static int hardware_threads();

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  void run(int64_t n, void* ctx, TaskFn fn);
  void work(int thread, int64_t n, void* ctx, TaskFn fn);
  void worker_loop(int thread);

  int size_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current job, written under mu_ before generation_ moves on.
  int64_t job_n_ = 0;
  void* job_ctx_ = nullptr;
  TaskFn job_fn_ = nullptr;
  int pending_workers_ = 0;          // workers that have not finished the current job yet
  std::atomic<int64_t> next_{0};     // next task index to hand out
  std::exception_ptr error_;
};

}  // namespace sluice::cpu
