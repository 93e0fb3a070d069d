#include "engine/cuda/padded_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "engine/cuda/graph_cache.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> o = {0};
  for (int64_t c : counts) o.push_back(o.back() + c);
  return o;
}

TEST(PaddedPass, EveryRowOnceInItsExpertsGroupTheRestPadding) {
  const std::vector<int64_t> counts = {0, 3, 0, 1, 5, 0, 2};
  const auto offsets = Offsets(counts);
  PaddedPass p;
  ASSERT_TRUE(PlanPaddedPass(offsets, 1024, &p));
  EXPECT_EQ(p.groups, 4);      // 4 experts with rows
  EXPECT_EQ(p.group_rows, 8);  // the bucket of 5
  ASSERT_EQ(p.row.size(), 32u);
  EXPECT_EQ(p.expert, (std::vector<int32_t>{1, 3, 4, 6}));
  std::vector<int> seen(offsets.back(), 0);
  for (int64_t i = 0; i < p.groups; ++i) {
    const int32_t e = p.expert[i];
    for (int64_t j = 0; j < p.group_rows; ++j) {
      const int32_t r = p.row[i * p.group_rows + j];
      if (j < counts[e]) {
        EXPECT_EQ(r, offsets[e] + j) << "group " << i << " row " << j;
        ++seen[r];
      } else {
        EXPECT_EQ(r, -1) << "group " << i << " row " << j;
      }
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  // Groups past the experts with rows repeat the last one, padding only.
  ASSERT_TRUE(
      PlanPaddedPass(Offsets({2, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1}), 1024, &p));
  EXPECT_EQ(p.groups, 10);  // 9 experts with rows
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 1, 2, 4, 5, 6, 8, 9, 11, 11}));
  EXPECT_EQ(p.group_rows, 2);
  for (int64_t r = 18; r < 20; ++r) EXPECT_EQ(p.row[r], -1);
}

TEST(PaddedPass, GroupsRoundUpByAQuarterOfTheirPowerOfTwo) {
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {1, 1},   {2, 2},   {3, 3},   {4, 4},    {5, 5},   {7, 7},
      {9, 10},  {11, 12}, {16, 16}, {17, 20},  {33, 40}, {41, 48},
      {57, 64}, {63, 64}, {65, 80}, {200, 200}};
  for (const auto& [active, groups] : want) {
    EXPECT_EQ(GroupBucket(active, 200), groups) << active;
  }
  EXPECT_EQ(GroupBucket(0, 64), 0);
  for (int64_t a = 1; a <= 256; ++a) {
    EXPECT_GE(GroupBucket(a, 256), a);
    EXPECT_LE(GroupBucket(a, 256), a * 5 / 4 + 1) << a;
  }
}

TEST(PaddedPass, EmptyOrTooLargePassesRunUnpadded) {
  PaddedPass p;
  EXPECT_FALSE(PlanPaddedPass(Offsets({0, 0, 0}), 1024, &p));
  EXPECT_FALSE(PlanPaddedPass(Offsets({40, 1, 1}), 64, &p));  // 3 -> 3 x 64
  EXPECT_EQ(p.groups, 0);
  EXPECT_TRUE(PlanPaddedPass(Offsets({40, 1, 1}), 192, &p));
  EXPECT_EQ(p.rows(), 192);
}

TEST(PaddedPass, TheKeyHoldsTheBucketsAndBuffersNotTheCounts) {
  const uint64_t buffers[] = {0x1000, 0x2000};
  PaddedPass a, b, c;
  ASSERT_TRUE(PlanPaddedPass(Offsets({1, 0, 2, 1}), 1024, &a));
  ASSERT_TRUE(PlanPaddedPass(Offsets({0, 2, 1, 2}), 1024, &b));
  ASSERT_TRUE(PlanPaddedPass(Offsets({1, 0, 3, 1}), 1024, &c));
  EXPECT_EQ(PaddedGraphKey(a, 64, buffers), PaddedGraphKey(b, 64, buffers));
  EXPECT_NE(PaddedGraphKey(a, 64, buffers), PaddedGraphKey(c, 64, buffers));
  EXPECT_NE(PaddedGraphKey(a, 64, buffers), PaddedGraphKey(a, 32, buffers));
  const uint64_t other[] = {0x1000, 0x3000};
  EXPECT_NE(PaddedGraphKey(a, 64, buffers), PaddedGraphKey(a, 64, other));
}

// Decode traffic replayed through the graph cache as CudaExperts uses it
// (64 graphs, captured at a key's second sighting): a batch of 1 to 16
// tokens that drifts as requests join and leave, each token routed to 6 of
// 64 experts with a skewed popularity. With the padded key nearly every pass
// replays a graph; with every expert's exact count in the key (the key
// before) almost none does.
TEST(PaddedPass, ADecodeRoutingTraceReplaysGraphs) {
  constexpr int kExperts = 64, kTopK = 6, kSteps = 3000;
  std::mt19937 rng(2026);
  std::vector<double> popularity(kExperts);
  for (int e = 0; e < kExperts; ++e) popularity[e] = 1.0 / (1 + e % 17);
  std::shuffle(popularity.begin(), popularity.end(), rng);
  const uint64_t buffers[] = {0x7f0000001000, 0x7f0000002000, 0x7f00000f0000};
  int tokens = 4;
  GraphCache<int> padded(64, [](int) {}), exact(64, [](int) {});
  int64_t rows_total = 0, padded_total = 0, unpadded = 0;
  int64_t active_total = 0, groups_total = 0;
  for (int step = 0; step < kSteps; ++step) {
    tokens = std::clamp(tokens + static_cast<int>(rng() % 3) - 1, 1, 16);
    std::vector<int64_t> counts(kExperts, 0);
    for (int t = 0; t < tokens; ++t) {
      std::vector<double> w = popularity;
      for (int k = 0; k < kTopK; ++k) {
        std::discrete_distribution<int> pick(w.begin(), w.end());
        const int e = pick(rng);
        ++counts[e];
        w[e] = 0;  // distinct experts per token
      }
    }
    const auto offsets = Offsets(counts);
    PaddedPass p;
    if (!PlanPaddedPass(offsets, 1024, &p)) {
      ++unpadded;
      continue;
    }
    rows_total += offsets.back();
    padded_total += p.rows();
    groups_total += p.groups;
    for (int64_t c : counts) active_total += c > 0;
    const auto key = PaddedGraphKey(p, 1408, buffers);
    if (padded.Find(key).action == GraphCache<int>::Action::kCapture) {
      padded.Insert(key, step);
    }
    std::vector<uint64_t> old_key(counts.begin(), counts.end());
    if (exact.Find(old_key).action == GraphCache<int>::Action::kCapture) {
      exact.Insert(old_key, step);
    }
  }
  const double hit = static_cast<double>(padded.stats().replays) / kSteps;
  const double old_hit = static_cast<double>(exact.stats().replays) / kSteps;
  std::printf(
      "decode trace, %d steps of 1..16 tokens, top-%d of %d experts: graph "
      "replays %.1f%% with the bucketed key (%lld graphs captured, %lld "
      "evicted), %.1f%% with exact counts; padded rows %.2fx the real ones, "
      "groups (weights read) %.2fx the experts with rows\n",
      kSteps, kTopK, kExperts, 100 * hit,
      static_cast<long long>(padded.stats().captures),
      static_cast<long long>(padded.stats().evictions), 100 * old_hit,
      static_cast<double>(padded_total) / rows_total,
      static_cast<double>(groups_total) / active_total);
  EXPECT_EQ(unpadded, 0);
  EXPECT_GE(hit, 0.95);
  EXPECT_EQ(padded.stats().evictions, 0);
  EXPECT_LT(old_hit, 0.05);  // what the exact counts gave
  EXPECT_LT(static_cast<double>(groups_total) / active_total, 1.25);
}

}  // namespace
}  // namespace moe
