#include "kernels/cpu/dispatch.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe::kernels::cpu {
namespace {

TEST(Dispatch, SortIsStableAndSkipsUndispatched) {
  const int32_t experts[] = {2, 0, -1, 2, 0, 1};
  int64_t offsets[4];
  int64_t order[6];
  EXPECT_EQ(SortSlotsByExpert(experts, 6, 3, offsets, order), 5);
  EXPECT_EQ(std::vector<int64_t>(offsets, offsets + 4),
            (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(std::vector<int64_t>(order, order + 5),
            (std::vector<int64_t>{1, 4, 5, 0, 3}));
}

TEST(Dispatch, GatherScales) {
  const float src[] = {1, 2, 3, 4};
  const int64_t rows[] = {1, 0, 1};
  const float scale[] = {2, 1, -1};
  float dst[6];
  GatherRows(src, 2, rows, scale, 3, dst, 1);
  EXPECT_EQ(std::vector<float>(dst, dst + 6),
            (std::vector<float>{6, 8, 1, 2, -3, -4}));
}

TEST(Dispatch, CombineSumsSlotsInOrder) {
  const float out[] = {1, 10, 100};  // expert output rows of width 1
  const int64_t slot_row[] = {2, 0, -1, 1};
  const float w[] = {0.5f, 2.0f, 9.0f, 3.0f};
  float y[2];
  CombineSlots(2, 2, 1, w, slot_row, out, y, 1);
  EXPECT_EQ(y[0], 52.0f);
  EXPECT_EQ(y[1], 30.0f);
  CombineSlots(2, 2, 1, nullptr, slot_row, out, y, 1);
  EXPECT_EQ(y[0], 101.0f);
}

}  // namespace
}  // namespace moe::kernels::cpu
