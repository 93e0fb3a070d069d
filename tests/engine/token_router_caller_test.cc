// TokenRouter's caller overrides (engine/caller_overrides.h) through the CPU
// backend on golden cases: a kRouting segment gets exactly the caller's
// slots (dispatched, counted, never dropped), a kLogits segment is scored
// from the caller's logits, the gate-routed segments keep their bits, the
// kept logits are the gate's (or the caller's, as sent), and routing on an
// expert-choice layer is refused.
#include <memory>
#include <vector>

#include "engine/expert_backend.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/golden_case.h"

namespace moe {
namespace {

struct Loaded {
  std::unique_ptr<LocalMoe> moe;
  testing::GoldenCase c;
};

Loaded Load(const char* name) {
  Loaded l;
  auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                   ".safetensors");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return l;
  l.c = *c;
  auto source = testing::MakeGoldenSource(l.c);
  auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1,
                              2 * l.c.tokens + 1);
  EXPECT_TRUE(moe.ok()) << moe.status();
  if (moe.ok()) l.moe = std::move(*moe);
  return l;
}

// x twice over: two requests of the case's rows.
std::vector<float> Twice(const std::vector<float>& x) {
  std::vector<float> two = x;
  two.insert(two.end(), x.begin(), x.end());
  return two;
}

TEST(TokenRouterCaller, RoutingSegmentTakesTheCallersSlotsOthersKeepTheirs) {
  for (const char* name : {"capacity_drop", "deepseek_v3_like"}) {
    SCOPED_TRACE(name);
    Loaded l = Load(name);
    ASSERT_NE(l.moe, nullptr);
    ExpertBackend& b = l.moe->backend();
    const int64_t n = l.c.tokens, k = l.c.config.top_k;
    Routing alone;
    ASSERT_TRUE(b.RouteTokens(0, l.c.x.data(), {.n = n}, &alone).ok());
    // The caller sends every slot of its rows to the experts in reverse.
    std::vector<int32_t> ids(2 * n * k);
    std::vector<float> weights(2 * n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      ids[i] = static_cast<int32_t>(l.c.config.num_experts - 1 - i % k);
      weights[i] = 0.25f + 0.01f * static_cast<float>(i);
    }
    const RouteSource route[] = {RouteSource::kRouting, RouteSource::kGate};
    CallerOverrides caller;
    caller.route = route;
    caller.expert = ids.data();
    caller.weight = weights.data();
    const std::vector<float> x = Twice(l.c.x);
    const int64_t ends[] = {n, 2 * n};
    Routing mixed;
    ASSERT_TRUE(
        b.RouteTokens(0, x.data(),
                      {.n = 2 * n, .segment_ends = ends, .caller = &caller},
                      &mixed)
            .ok());
    for (int64_t i = 0; i < n * k; ++i) {
      EXPECT_EQ(mixed.expert[i], ids[i]);
      EXPECT_EQ(mixed.weight[i], weights[i]);
      EXPECT_EQ(mixed.dispatched[i], 1);
      // The gate-routed request: the bits it gets alone.
      EXPECT_EQ(mixed.expert[n * k + i], alone.expert[i]);
      EXPECT_EQ(mixed.weight[n * k + i], alone.weight[i]);
      EXPECT_EQ(mixed.dispatched[n * k + i], alone.dispatched[i]);
    }
    EXPECT_EQ(mixed.dropped, alone.dropped);
    std::vector<int64_t> counts = alone.expert_counts;
    for (int64_t i = 0; i < n * k; ++i) ++counts[ids[i]];
    EXPECT_EQ(mixed.expert_counts, counts);
  }
}

TEST(TokenRouterCaller, LogitsSegmentScoresTheCallersLogitsAndKeepsThem) {
  Loaded l = Load("deepseek_v3_like");
  ASSERT_NE(l.moe, nullptr);
  ExpertBackend& b = l.moe->backend();
  const int64_t n = l.c.tokens, E = l.c.config.num_experts;
  CallerOverrides keep;
  keep.keep_logits = true;
  Routing gate;
  ASSERT_TRUE(
      b.RouteTokens(0, l.c.x.data(), {.n = n, .caller = &keep}, &gate).ok());
  ASSERT_EQ(gate.logits.size(), static_cast<size_t>(n * E));
  // The gate's own logits sent back for the first request, and logits
  // favouring expert 0 for the second: the first routes as the gate does.
  std::vector<float> logits = gate.logits;
  logits.resize(2 * n * E, -4.0f);
  for (int64_t t = n; t < 2 * n; ++t) logits[t * E] = 4.0f;
  const RouteSource route[] = {RouteSource::kLogits, RouteSource::kLogits};
  CallerOverrides caller;
  caller.route = route;
  caller.logits = logits.data();
  caller.keep_logits = true;
  const std::vector<float> x = Twice(l.c.x);
  const int64_t ends[] = {n, 2 * n};
  Routing sent;
  ASSERT_TRUE(b.RouteTokens(
                   0, x.data(),
                   {.n = 2 * n, .segment_ends = ends, .caller = &caller}, &sent)
                  .ok());
  const int64_t k = l.c.config.top_k;
  for (int64_t i = 0; i < n * k; ++i) {
    EXPECT_EQ(sent.expert[i], gate.expert[i]);
    EXPECT_EQ(sent.weight[i], gate.weight[i]);
  }
  for (int64_t t = n; t < 2 * n; ++t) EXPECT_EQ(sent.expert[t * k], 0);
  EXPECT_EQ(sent.logits, logits) << "kept logits are the caller's as sent";
}

TEST(TokenRouterCaller, RoutingOnExpertChoiceIsRefused) {
  Loaded l = Load("expert_choice");
  ASSERT_NE(l.moe, nullptr);
  const int64_t n = l.c.tokens;
  const RouteSource route[] = {RouteSource::kRouting};
  std::vector<int32_t> ids(n * l.c.config.top_k, 0);
  std::vector<float> weights(ids.size(), 1.0f);
  CallerOverrides caller;
  caller.route = route;
  caller.expert = ids.data();
  caller.weight = weights.data();
  Routing r;
  const absl::Status s = l.moe->backend().RouteTokens(
      0, l.c.x.data(), {.n = n, .caller = &caller}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace moe
