#include "core/blocking_queue.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(BlockingQueue, ItemsComeOutInOrderAndNulloptOnceClosedAndDrained) {
  BlockingQueue<int> q(4);
  EXPECT_TRUE(q.Push(1));
  EXPECT_TRUE(q.Push(2));
  q.Close();
  EXPECT_FALSE(q.Push(3));
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), std::nullopt);
}

TEST(BlockingQueue, PushWaitsWhileFullUntilAPop) {
  BlockingQueue<int> q(2);
  ASSERT_TRUE(q.Push(1));
  ASSERT_TRUE(q.Push(2));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(q.Push(3));
    pushed = true;
  });
  // The third push is held at the bound (200 ms is ample for it to have
  // gone through were the queue unbounded).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(q.Pop(), 1);
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), 3);
}

TEST(BlockingQueue, CloseEndsAPushWaitingOnAFullQueue) {
  BlockingQueue<int> q(1);
  ASSERT_TRUE(q.Push(1));
  std::thread producer([&] { EXPECT_FALSE(q.Push(2)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  q.Close();
  producer.join();
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), std::nullopt);
}

TEST(BlockingQueue, CapacityZeroMeansOne) {
  BlockingQueue<int> q(0);
  EXPECT_EQ(q.capacity(), 1u);
  EXPECT_TRUE(q.Push(7));
  EXPECT_EQ(q.Pop(), 7);
}

}  // namespace
}  // namespace moe
