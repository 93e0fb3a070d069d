#include "tests/testutil/caller_routing.h"

#include <algorithm>
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {

std::vector<float> GateLogits(const GoldenCase& c) {
  const std::vector<double> d = ReferenceGateLogits(c);
  return std::vector<float>(d.begin(), d.end());
}

ForwardOptions ReplayOptions(const GoldenCase& c) {
  ForwardOptions fo;
  fo.token_ids = c.token_ids;
  fo.routing_slots = static_cast<int32_t>(c.config.top_k);
  fo.routing_expert_ids.assign(c.top_idx.begin(), c.top_idx.end());
  fo.routing_weights = c.top_w;
  return fo;
}

ForwardOptions LogitsOptions(const GoldenCase& c) {
  ForwardOptions fo;
  fo.token_ids = c.token_ids;
  fo.router_logits = GateLogits(c);
  fo.router_logits_experts = c.config.router_rows();
  return fo;
}

void ExpectServesCase(LocalCluster& cluster, const GoldenCase& c,
                      int32_t layer) {
  SCOPED_TRACE(c.name);
  ForwardOptions fo;
  fo.routing = true;
  auto r = cluster.client().Forward(layer, c.x.data(), c.tokens,
                                    c.config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_EQ(r->slots, c.config.top_k);
  EXPECT_TRUE(AllClose(r->y, c.y, kF32Tol));
  EXPECT_TRUE(SameTokenRouting(c.top_idx, c.top_w, r->expert_ids, r->weights,
                               c.tokens, c.config.top_k, r->slots));
}

void ExpectCallerRoutingMatches(LocalCluster& cluster, const GoldenCase& c,
                                int32_t layer) {
  MoeClient& client = cluster.client();
  const int64_t n = c.tokens, H = c.config.hidden;
  // A layer with vision experts (ERNIE-4.5-VL) takes caller routing for
  // text rows: every row is sent as text.
  auto info = client.GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const bool modal = info->vision_layers().count(layer) > 0;
  auto forward = [&](ForwardOptions fo) {
    if (modal) fo.token_types.assign(n, 0);
    return client.Forward(layer, c.x.data(), n, H, fo);
  };
  if (c.config.routing == RoutingMode::kTokenChoice) {
    SCOPED_TRACE("routing replay");
    ForwardOptions fo = ReplayOptions(c);
    fo.routing = true;
    auto r = forward(fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(AllClose(r->y, c.y, kF32Tol));
    // The answer's routing is exactly what was sent.
    EXPECT_EQ(r->expert_ids, fo.routing_expert_ids);
    EXPECT_EQ(r->weights, fo.routing_weights);
  }
  if (c.config.routing == RoutingMode::kTokenChoice &&
      !c.config.score_before_experts && !c.config.has_expert_frame()) {
    // Routing other than the gate's is dispatched as sent: every id moved
    // to the next expert, and the routed part linear in the weights (the
    // experts' outputs are summed with them, nothing after), so doubling
    // them doubles the answer of SHARED_SKIP.
    SCOPED_TRACE("routing of the caller's own");
    ForwardOptions fo = ReplayOptions(c);
    // Over the router's rows: a zero expert's id (>= E) moves too, and a
    // rotation keeps a row's ids distinct.
    for (int32_t& e : fo.routing_expert_ids) {
      e = static_cast<int32_t>((e + 1) % c.config.router_rows());
    }
    fo.routing = true;
    fo.shared = moe::v1::SHARED_SKIP;
    auto once = forward(fo);
    ASSERT_TRUE(once.ok()) << once.status() << "\n" << cluster.Logs();
    EXPECT_EQ(once->expert_ids, fo.routing_expert_ids);
    for (float& w : fo.routing_weights) w *= 2.0f;
    auto twice = forward(fo);
    ASSERT_TRUE(twice.ok()) << twice.status() << "\n" << cluster.Logs();
    // The output bias is added once, whatever the weights.
    std::vector<float> doubled = once->y;
    for (size_t i = 0; i < doubled.size(); ++i) {
      const float b =
          c.config.output_bias ? c.output_bias[i % c.config.hidden] : 0.0f;
      doubled[i] = 2.0f * (doubled[i] - b) + b;
    }
    EXPECT_TRUE(AllClose(twice->y, doubled, kF32Tol));
    fo.routing_weights = c.top_w;
    fo.shared = moe::v1::SHARED_ADD;
    auto moved = forward(fo);
    ASSERT_TRUE(moved.ok()) << moved.status();
    EXPECT_FALSE(AllClose(moved->y, c.y, kF32Tol))
        << "moving every slot to another expert left y as it was";
  }
  if (!c.config.hash_routed()) {
    SCOPED_TRACE("router logits");
    ForwardOptions fo = LogitsOptions(c);
    fo.return_router_logits = true;
    auto r = forward(fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(AllClose(r->y, c.y, kF32Tol));
    // Returned as sent.
    EXPECT_EQ(r->router_logits, fo.router_logits);
  } else {
    // Hash layers choose by token id, which logits do not carry: the
    // service refuses them (BadInput below).
    std::printf("%s: hash-routed, no router_logits\n", c.name.c_str());
  }
  {
    SCOPED_TRACE("the service's logits");
    ForwardOptions fo;
    fo.token_ids = c.token_ids;
    fo.return_router_logits = true;
    auto r = forward(fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(AllClose(r->y, c.y, kF32Tol));
    EXPECT_TRUE(AllClose(r->router_logits, GateLogits(c), kF32Tol));
  }
  SCOPED_TRACE("shared apart");
  ForwardOptions fo;
  fo.token_ids = c.token_ids;
  fo.shared = moe::v1::SHARED_SEPARATE;
  auto apart = forward(fo);
  ASSERT_TRUE(apart.ok()) << apart.status() << "\n" << cluster.Logs();
  ASSERT_EQ(apart->shared_output.size(), c.y.size());
  std::vector<float> sum(c.y.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = apart->y[i] + apart->shared_output[i];
  }
  EXPECT_TRUE(AllClose(sum, c.y, kF32Tol));
  const bool has_shared = c.config.has_shared();
  EXPECT_EQ(has_shared, std::any_of(apart->shared_output.begin(),
                                    apart->shared_output.end(),
                                    [](float v) { return v != 0.0f; }))
      << "shared_output is zeros exactly when the layer has no shared experts";
  fo.shared = moe::v1::SHARED_SKIP;
  auto skipped = forward(fo);
  ASSERT_TRUE(skipped.ok()) << skipped.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(skipped->shared_output.empty());
  // y - shared: the routed part, the same bits as SHARED_SEPARATE's.
  EXPECT_EQ(skipped->y, apart->y);
}

}  // namespace moe::testing
