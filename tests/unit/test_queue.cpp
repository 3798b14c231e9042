#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/queue.h"
#include "core/slot_pool.h"
#include "core/thread.h"

using namespace sluice;

TEST(BoundedQueue, KeepsFifoOrderAcrossThreads) {
  BoundedQueue<int> q(3);
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(q.push(i));
    q.close();
  });
  std::vector<int> got;
  while (auto v = q.pop()) got.push_back(*v);
  producer.join();
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[i], i);
}

TEST(BoundedQueue, NeverHoldsMoreThanItsCapacity) {
  BoundedQueue<int> q(2);
  EXPECT_TRUE(q.push(1));
  EXPECT_TRUE(q.push(2));
  std::atomic<bool> third_pushed{false};
  std::thread t([&] { q.push(3); third_pushed = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third_pushed.load());  // blocked: the queue is full
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(*q.pop(), 1);
  t.join();
  EXPECT_TRUE(third_pushed.load());
  EXPECT_EQ(*q.pop(), 2);
  EXPECT_EQ(*q.pop(), 3);
}

TEST(BoundedQueue, CloseDrainsThenEnds) {
  BoundedQueue<int> q(4);
  q.push(7);
  q.close();
  EXPECT_FALSE(q.push(8));
  EXPECT_EQ(*q.pop(), 7);
  EXPECT_FALSE(q.pop().has_value());
}

TEST(BoundedQueue, AbortWakesBlockedProducer) {
  BoundedQueue<int> q(1);
  q.push(1);
  std::thread t([&] { EXPECT_FALSE(q.push(2)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.abort();
  t.join();
  EXPECT_FALSE(q.pop().has_value());
}

TEST(SlotPool, HandsOutEachSlotOnceUntilReleased) {
  SlotPool pool(3);
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) got.push_back(*pool.acquire());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pool.available(), 0);
  pool.release(1);
  EXPECT_EQ(*pool.acquire(), 1);
}

TEST(WorkerThread, JoinRethrowsTheWorkersException) {
  bool on_error_ran = false;
  WorkerThread t("failing", [] { throw std::runtime_error("boom"); }, [&] { on_error_ran = true; });
  try {
    t.join();
    FAIL() << "join() should have thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom");
  }
  EXPECT_TRUE(on_error_ran);
}
