#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"

#include "core/thread.h"

namespace sluice::cpu {

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) : size_(threads <= 0 ? hardware_threads() : threads) {
  workers_.reserve(static_cast<std::size_t>(size_ - 1));
  try {
    for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
  } catch (const std::exception& e) {  // std::system_error, or std::bad_alloc for the thread's state
    // Joinable threads must not be destroyed (std::terminate): stop and join the ones started.
    const std::size_t started = workers_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    throw Error(str("cpu engine: cannot start thread ", started + 2, " of ", size_, ": ", e.what()), kExitFailure,
                "the system refused another thread (memory, or the limit of `ulimit -u`): lower --cpu-threads");
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work(int thread, int64_t n, void* ctx, TaskFn fn) {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) return;
    try {
      fn(ctx, i, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n, std::memory_order_relaxed);  // the others stop after their current task
    }
  }
}

void ThreadPool::run(int64_t n, void* ctx, TaskFn fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_n_ = n;
    job_ctx_ = ctx;
    job_fn_ = fn;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    // Every worker acknowledges every job, so none can wake late and run a finished job's tasks.
    pending_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  work(0, n, ctx, fn);
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_workers_ == 0; });
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

void ThreadPool::worker_loop(int thread) {
  set_thread_name("sluice-cpu-" + std::to_string(thread));
  uint64_t seen = 0;
  for (;;) {
    int64_t n;
    void* ctx;
    TaskFn fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      n = job_n_;
      ctx = job_ctx_;
      fn = job_fn_;
    }
    work(thread, n, ctx, fn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_workers_ == 0) done_.notify_one();
    }
  }
}

}  // namespace sluice::cpu
