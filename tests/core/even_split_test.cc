#include "core/even_split.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(EvenSplit, PartsCoverTheCountInOrderAndDifferByAtMostOne) {
  for (int parts = 1; parts <= 7; ++parts) {
    for (int64_t count = 0; count <= 40; ++count) {
      EXPECT_EQ(SplitBegin(0, parts, count), 0);
      EXPECT_EQ(SplitBegin(parts, parts, count), count);
      for (int q = 0; q < parts; ++q) {
        const int64_t size =
            SplitBegin(q + 1, parts, count) - SplitBegin(q, parts, count);
        EXPECT_GE(size, count / parts);
        EXPECT_LE(size, count / parts + 1);
      }
    }
  }
}

TEST(EvenSplit, OwnerHoldsTheItem) {
  for (int parts = 1; parts <= 7; ++parts) {
    for (int64_t count = 1; count <= 40; ++count) {
      for (int64_t item = 0; item < count; ++item) {
        const int q = SplitOwner(item, parts, count);
        EXPECT_LE(SplitBegin(q, parts, count), item);
        EXPECT_LT(item, SplitBegin(q + 1, parts, count))
            << item << " of " << count << " over " << parts;
      }
    }
  }
}

}  // namespace
}  // namespace moe
