#pragma once
// A fixed pool of buffer slots handed out by index.  The buffers themselves are owned elsewhere
// (pinned host memory allocated once at start-up); the pool only tracks which ones are free, so it
// is the pipeline's backpressure: a stage that cannot get a slot waits, and memory stays bounded.
#include <optional>

#include "core/queue.h"

namespace sluice {

class SlotPool {
 public:
  explicit SlotPool(int slots) : free_(static_cast<std::size_t>(slots)), size_(slots) {
    for (int i = 0; i < slots; ++i) free_.push(i);
  }
  // Blocks until a slot is free; nullopt once the pool is closed.
  std::optional<int> acquire() { return free_.pop(); }
  void release(int slot) { free_.push(slot); }
  void close() { free_.close(); }
  int size() const { return size_; }
  int available() const { return static_cast<int>(free_.size()); }

 private:
  BoundedQueue<int> free_;
  int size_;
};

}  // namespace sluice
