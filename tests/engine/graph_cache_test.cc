#include "engine/cuda/graph_cache.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

using Cache = GraphCache<int>;
using Action = Cache::Action;

// Graph handles are ints here; destroyed ones are recorded.
struct Fixture {
  std::vector<int> destroyed;
  Cache cache;
  explicit Fixture(int capacity)
      : cache(capacity, [this](int g) { destroyed.push_back(g); }) {}
};

TEST(GraphCache, CapturesOnTheSecondSightingAndReplaysAfter) {
  Fixture f(4);
  const Cache::Key a = {1, 2, 3}, b = {1, 2, 4};
  EXPECT_EQ(f.cache.Find(a).action, Action::kEager);  // first: remembered
  const Cache::Lookup second = f.cache.Find(a);
  EXPECT_EQ(second.action, Action::kCapture);
  EXPECT_GE(second.slot, 0);
  EXPECT_LT(second.slot, 4);
  f.cache.Insert(a, 100);
  const Cache::Lookup third = f.cache.Find(a);
  EXPECT_EQ(third.action, Action::kReplay);
  EXPECT_EQ(third.exec, 100);
  EXPECT_EQ(third.slot, second.slot);
  // Another count vector is another key.
  EXPECT_EQ(f.cache.Find(b).action, Action::kEager);
  EXPECT_NE(f.cache.Find(b).slot, second.slot);
  EXPECT_EQ(f.cache.stats().replays, 1);
  EXPECT_EQ(f.cache.stats().captures, 1);
  EXPECT_EQ(f.cache.graphs(), 1u);
}

TEST(GraphCache, BoundedLeastRecentlyUsedEvictionFreesSlotsAndGraphs) {
  Fixture f(3);
  auto key = [](uint64_t i) { return Cache::Key{7, i}; };
  for (uint64_t i = 0; i < 3; ++i) {
    f.cache.Find(key(i));
    ASSERT_EQ(f.cache.Find(key(i)).action, Action::kCapture);
    f.cache.Insert(key(i), static_cast<int>(10 + i));
  }
  std::set<int> slots;
  for (uint64_t i = 0; i < 3; ++i) slots.insert(f.cache.Find(key(i)).slot);
  EXPECT_EQ(slots.size(), 3u);  // each key its own slot
  f.cache.Find(key(0));         // 0 is now the most recently used; 1 the least
  EXPECT_EQ(f.cache.Find(key(9)).action, Action::kEager);  // evicts key 1
  EXPECT_EQ(f.destroyed, std::vector<int>{11});
  EXPECT_EQ(f.cache.size(), 3u);
  EXPECT_EQ(f.cache.stats().evictions, 1);
  EXPECT_EQ(f.cache.Find(key(0)).action, Action::kReplay);
  EXPECT_EQ(f.cache.Find(key(1)).action, Action::kEager);  // forgotten
  // Slots in use stay distinct after evictions.
  slots.clear();
  for (uint64_t i : {0, 1, 9}) {
    const int s = f.cache.Find(key(i)).slot;
    if (s >= 0) slots.insert(s);
  }
  for (int s : slots) EXPECT_LT(s, 3);
}

TEST(GraphCache, FailedCapturesRunEagerAndClearDestroysEverything) {
  Fixture f(2);
  const Cache::Key a = {1}, b = {2};
  f.cache.Find(a);
  ASSERT_EQ(f.cache.Find(a).action, Action::kCapture);
  f.cache.MarkFailed(a);
  EXPECT_EQ(f.cache.Find(a).action, Action::kEager);
  EXPECT_EQ(f.cache.Find(a).action, Action::kEager);
  f.cache.Find(b);
  ASSERT_EQ(f.cache.Find(b).action, Action::kCapture);
  f.cache.Insert(b, 42);
  f.cache.Clear();  // weights changed
  EXPECT_EQ(f.destroyed, std::vector<int>{42});
  EXPECT_EQ(f.cache.size(), 0u);
  EXPECT_EQ(f.cache.Find(b).action, Action::kEager);
  EXPECT_EQ(f.cache.Find(b).action, Action::kCapture);
  EXPECT_EQ(f.cache.stats().failures, 1);
}

TEST(GraphCache, ZeroCapacityNeverCaptures) {
  Fixture f(0);
  const Cache::Key a = {1};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.cache.Find(a).action, Action::kEager);
  EXPECT_EQ(f.cache.size(), 0u);
}

}  // namespace
}  // namespace moe
