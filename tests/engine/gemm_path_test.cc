#include "engine/cuda/gemm_path.h"

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

}  // namespace
}  // namespace moe
