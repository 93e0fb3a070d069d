// The group's state delivered in order, read when it is delivered.
#include "server/group/state_notifier.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(StateNotifier, DeliversTheStateReadWhenItRuns) {
  StateNotifier notifier;
  int reads = 0;
  auto read = [&] {
    GroupState s;
    s.generation = ++reads;
    return s;
  };
  notifier.Deliver(read);
  EXPECT_EQ(reads, 0) << "no callback: nothing read";
  std::vector<uint64_t> seen;
  notifier.Set([&](const GroupState& s) { seen.push_back(s.generation); });
  notifier.Deliver(read);
  notifier.Deliver(read);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
}

// Deliveries racing from several threads never overlap, and the last one
// shows the latest state (each reads it inside the notifier's order).
TEST(StateNotifier, RacingDeliveriesRunOneAtATimeLatestLast) {
  StateNotifier notifier;
  std::atomic<uint64_t> version{0};
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  uint64_t last = 0;
  bool ordered = true;
  notifier.Set([&](const GroupState& s) {
    if (++inside > 1) overlapped = true;
    ordered = ordered && s.generation >= last;
    last = s.generation;
    std::this_thread::yield();
    --inside;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        ++version;
        notifier.Deliver([&] {
          GroupState s;
          s.generation = version.load();
          return s;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(overlapped);
  EXPECT_TRUE(ordered);
  EXPECT_EQ(last, 800u);
}

}  // namespace
}  // namespace moe
