#include "core/thread.h"

#include <pthread.h>

#include <memory>

namespace sluice {

void set_thread_name(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

WorkerThread::WorkerThread(std::string name, std::function<void()> body, std::function<void()> on_error)
    : name_(std::move(name)), error_slot_(std::make_unique<std::exception_ptr>()) {
  std::exception_ptr* slot = error_slot_.get();
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
