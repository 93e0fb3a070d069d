#include "engine/cuda/row_bucket.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(RowBucket, NextPowerOfTwoCappedAtMaxRows) {
  EXPECT_EQ(RowBucket(0, 100), 0);
  EXPECT_EQ(RowBucket(1, 100), 1);
  EXPECT_EQ(RowBucket(2, 100), 2);
  EXPECT_EQ(RowBucket(3, 100), 4);
  EXPECT_EQ(RowBucket(37, 100), 64);
  EXPECT_EQ(RowBucket(64, 100), 64);
  EXPECT_EQ(RowBucket(65, 100), 100);  // the top bucket is max_rows
  EXPECT_EQ(RowBucket(100, 100), 100);
  EXPECT_EQ(RowBucket(101, 100), 128);  // beyond the workspaces: uncapped
  EXPECT_EQ(RowBucket(128, 128), 128);
  EXPECT_EQ(RowBucket(5000, 0), 8192);  // no cap
}

TEST(RowBucket, EveryRowCountHasItsBucketAndItsBucketCoversIt) {
  for (int64_t max_rows : {1, 2, 7, 64, 100, 1000}) {
    const std::vector<int64_t> buckets = RowBuckets(max_rows);
    ASSERT_FALSE(buckets.empty());
    EXPECT_EQ(buckets.back(), max_rows);
    for (size_t i = 1; i < buckets.size(); ++i) {
      EXPECT_LT(buckets[i - 1], buckets[i]);
    }
    for (int64_t m = 1; m <= max_rows; ++m) {
      const int64_t b = RowBucket(m, max_rows);
      EXPECT_GE(b, m);
      EXPECT_LE(b, max_rows);
      EXPECT_LE(RowBucketLow(b), m) << m << " in " << b;
      EXPECT_NE(std::find(buckets.begin(), buckets.end(), b), buckets.end());
    }
  }
  EXPECT_EQ(RowBuckets(100),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(RowBucketLow(1), 1);
  EXPECT_EQ(RowBucketLow(2), 2);
  EXPECT_EQ(RowBucketLow(64), 33);
  EXPECT_EQ(RowBucketLow(100), 65);
}

}  // namespace
}  // namespace moe
