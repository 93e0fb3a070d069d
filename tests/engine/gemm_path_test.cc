#include "engine/cuda/gemm_path.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(GemmPathTable, EveryBucketIsMeasuredOnceThenKeepsTheFasterPath) {
  GemmPathTable t(100);  // buckets 1 2 4 8 16 32 64 100
  EXPECT_EQ(t.choices().size(), 8u);
  EXPECT_EQ(t.For(37), GemmPath::kUnmeasured);
  EXPECT_EQ(t.Record(37, /*loop_us=*/50, /*grouped_us=*/20),
            GemmPath::kGrouped);
  // Every row count of bucket 64 (33..64) shares the choice; others do not.
  EXPECT_EQ(t.For(33), GemmPath::kGrouped);
  EXPECT_EQ(t.For(64), GemmPath::kGrouped);
  EXPECT_EQ(t.For(32), GemmPath::kUnmeasured);
  EXPECT_EQ(t.For(65), GemmPath::kUnmeasured);
  EXPECT_EQ(t.Record(100, 10, 30), GemmPath::kLoop);
  EXPECT_EQ(t.For(70), GemmPath::kLoop);
  // A tie keeps the loop (the path that needs no pointer arrays).
  EXPECT_EQ(t.Record(3, 10, 10), GemmPath::kLoop);
  const GemmPathChoice& c = t.choices()[6];
  EXPECT_EQ(c.bucket, 64);
  EXPECT_EQ(c.loop_us, 50);
  EXPECT_EQ(c.grouped_us, 20);
  EXPECT_EQ(c.chosen, GemmPath::kGrouped);
}

TEST(GemmPathTable, AFailedGroupedCallTurnsEveryBucketToTheLoop) {
  GemmPathTable t(64);
  EXPECT_EQ(t.Record(64, 50, 20), GemmPath::kGrouped);
  // grouped_us < 0: the grouped call failed while being measured.
  EXPECT_EQ(t.Record(5, 50, -1), GemmPath::kLoop);
  t.DisableGrouped();
  EXPECT_FALSE(t.grouped_enabled());
  EXPECT_EQ(t.For(64), GemmPath::kLoop);
  EXPECT_EQ(t.For(1), GemmPath::kLoop);  // unmeasured, but nothing to measure
}

TEST(GemmPathTable, ForcedModesAndRowsOutsideTheTable) {
  GemmPathTable t(16);
  EXPECT_EQ(t.For(0), GemmPath::kLoop);
  EXPECT_EQ(t.For(17), GemmPath::kLoop);  // beyond the workspaces
  t.set_mode(GemmPathTable::Mode::kGrouped);
  EXPECT_EQ(t.For(9), GemmPath::kGrouped);
  t.set_mode(GemmPathTable::Mode::kLoop);
  EXPECT_EQ(t.For(9), GemmPath::kLoop);
  t.set_mode(GemmPathTable::Mode::kAuto);
  EXPECT_EQ(t.For(9), GemmPath::kUnmeasured);
  EXPECT_EQ(GemmPathName(GemmPath::kGrouped), "grouped");
}

TEST(GemmPathTable, AMeasuredBucketKeepsItsFirstChoice) {
  GemmPathTable t(64);
  EXPECT_EQ(t.Record(20, /*loop_us=*/50, /*grouped_us=*/20),
            GemmPath::kGrouped);
  // A later, contrary measurement of the same bucket does not change it.
  EXPECT_EQ(t.Record(30, 10, 40), GemmPath::kGrouped);
  EXPECT_EQ(t.For(17), GemmPath::kGrouped);
  EXPECT_EQ(t.choices()[5].loop_us, 50);
}

// Each fork of a backend (one per step runner) creates its own expert pass
// with the same sizes on the same device: they get one table, so a bucket
// is measured once and every runner runs the same kernels for it.
TEST(SharedGemmPathTable, ForksOfOneDeviceAndShapeShareOneTable) {
  const SharedGemmPathTable::Key key{/*device=*/3,  /*max_rows=*/96,
                                     /*hidden=*/64, /*inter=*/32,
                                     /*experts=*/8, /*fp8=*/false};
  auto a = SharedGemmPathTable::For(key);
  auto b = SharedGemmPathTable::For(key);
  ASSERT_EQ(a, b);
  SharedGemmPathTable::Key other_device = key;
  other_device.device = 4;
  SharedGemmPathTable::Key other_shape = key;
  other_shape.inter = 48;
  EXPECT_NE(SharedGemmPathTable::For(other_device), a);
  EXPECT_NE(SharedGemmPathTable::For(other_shape), a);

  EXPECT_EQ(a->For(40), GemmPath::kUnmeasured);
  EXPECT_EQ(a->Record(40, /*loop_us=*/9, /*grouped_us=*/5), GemmPath::kGrouped);
  // The other fork sees it, and its own (contrary) timing does not win.
  EXPECT_EQ(b->For(60), GemmPath::kGrouped);
  EXPECT_EQ(b->Record(60, 5, 9), GemmPath::kGrouped);
  EXPECT_EQ(SharedGemmPathTable::For(other_device)->For(40),
            GemmPath::kUnmeasured);
  b->DisableGrouped();
  EXPECT_EQ(a->For(40), GemmPath::kLoop);
  EXPECT_FALSE(a->Snapshot().grouped_enabled());
}

// Step runners measure concurrently at their first step: whoever records a
// bucket first decides it, and every runner is told that one path.
TEST(SharedGemmPathTable, ConcurrentMeasurementsAgreeOnOnePathPerBucket) {
  for (int round = 0; round < 20; ++round) {
    SharedGemmPathTable t(256);
    std::vector<GemmPath> got(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&, i] {
        // Even threads time the grouped call faster, odd ones the loop.
        got[i] = i % 2 == 0 ? t.Record(100, 10, 5) : t.Record(100, 5, 10);
      });
    }
    for (std::thread& th : threads) th.join();
    for (int i = 1; i < 8; ++i) EXPECT_EQ(got[i], got[0]) << "thread " << i;
    EXPECT_EQ(t.For(128), got[0]);
  }
}

}  // namespace
}  // namespace moe
