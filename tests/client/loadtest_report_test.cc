// moe-loadtest's arithmetic: token distributions, ranges, percentiles,
// status counts, histogram totals.
#include <cstring>
#include <set>

#include "client/loadtest/report.h"
#include "client/loadtest/request_source.h"
#include "gtest/gtest.h"

namespace moe::loadtest {
namespace {

TEST(TokenDistribution, Forms) {
  std::mt19937_64 rng(1);
  auto fixed = TokenDistribution::Parse("8");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->Sample(rng), 8);
  auto range = TokenDistribution::Parse("2:5");
  ASSERT_TRUE(range.ok());
  for (int i = 0; i < 100; ++i) {
    const int64_t v = range->Sample(rng);
    EXPECT_TRUE(v >= 2 && v <= 5);
  }
  auto list = TokenDistribution::Parse("1,64");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->max(), 64);
  for (const char* bad : {"", "x", "5:2", "-1", "1,,2", "1:2:3"}) {
    EXPECT_FALSE(TokenDistribution::Parse(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParseRange("1:7:3"), (std::vector<int>{1, 4, 7}));
  EXPECT_FALSE(ParseRange("0:4").ok());
}

TEST(Report, PercentilesAndCounts) {
  RunSpec spec;
  spec.concurrency = 4;
  RunResult run;
  run.seconds = 2;
  for (int i = 1; i <= 100; ++i) run.samples.push_back({double(i), 0, 10, {}});
  run.samples.push_back({500, 14, 10, {}});  // an UNAVAILABLE
  const Summary s = Summarize(run, spec);
  EXPECT_EQ(s.requests, 101);
  EXPECT_EQ(s.ok, 100);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.codes.at("OK"), 100);
  EXPECT_EQ(s.codes.at("UNAVAILABLE"), 1);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);  // of successful requests
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 500);
  int64_t total = 0;
  for (const auto& [b, c] : s.histogram) total += c;
  EXPECT_EQ(total, 100);
  EXPECT_EQ(CsvRow(s).substr(0, 2), "4,");
  EXPECT_NE(FormatText(s).find("UNAVAILABLE=1"), std::string::npos);
}

// Each request draws its own rows from the pool, as a function of the seed
// and its index only.
TEST(RequestSource, FreshRowsForEveryRequestReproducibly) {
  RunSpec spec;
  spec.hidden = 4;
  spec.layers = {0, 2};
  spec.tokens = *TokenDistribution::Parse("8");
  spec.seed = 3;
  // Row r holds r in every column, so a sent row names its source row.
  std::vector<float> rows(100 * 4);
  for (int r = 0; r < 100; ++r)
    for (int c = 0; c < 4; ++c) rows[r * 4 + c] = static_cast<float>(r);
  spec.rows = std::make_shared<const std::vector<float>>(rows);
  const RequestSource source(spec);
  EXPECT_EQ(source.pool_rows(), 100);
  moe::v1::ForwardRequest a, b;
  EXPECT_EQ(source.Make(7, &a), 8);
  source.Make(7, &b);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(RequestDigest(a), RequestDigest(b));
  EXPECT_EQ(a.layer(), 2);
  ASSERT_EQ(a.hidden_states().shape_size(), 2);
  EXPECT_EQ(a.hidden_states().shape(0), 8);
  EXPECT_EQ(a.hidden_states().shape(1), 4);
  std::set<std::string> inputs;
  std::set<int> used;
  for (uint64_t i = 0; i < 200; ++i) {
    source.Make(i, &a);
    const std::string& data = a.hidden_states().data();
    ASSERT_EQ(data.size(), 8u * 4 * sizeof(float));
    inputs.insert(data);
    for (int t = 0; t < 8; ++t) {
      float v[4];
      std::memcpy(v, data.data() + t * sizeof(v), sizeof(v));
      EXPECT_TRUE(v[0] == v[3] && v[0] >= 0 && v[0] < 100) << v[0];
      used.insert(static_cast<int>(v[0]));
    }
  }
  EXPECT_EQ(inputs.size(), 200u);  // no two requests alike
  EXPECT_GT(used.size(), 95u);     // 1,600 draws of 100 rows
  RunSpec other = spec;
  other.seed = 4;
  source.Make(7, &a);
  RequestSource(other).Make(7, &b);
  EXPECT_NE(RequestDigest(a), RequestDigest(b));
  // Synthetic rows: a pool of 1,024, in the wire dtype.
  spec.rows = nullptr;
  spec.dtype = moe::v1::BF16;
  const RequestSource synthetic(spec);
  EXPECT_EQ(synthetic.pool_rows(), RequestSource::kSyntheticRows);
  inputs.clear();
  for (uint64_t i = 0; i < 50; ++i) {
    synthetic.Make(i, &a);
    EXPECT_EQ(a.hidden_states().data().size(), 8u * 4 * 2);
    inputs.insert(a.hidden_states().data());
  }
  EXPECT_EQ(inputs.size(), 50u);
}

TEST(Report, OpenLoopSaysWhatItCouldNotSend) {
  RunSpec spec;
  spec.rps = 100;
  RunResult run;
  run.seconds = 1.5;
  run.scheduled = 100;
  run.sent = 60;
  run.never_sent = 40;
  run.late = 10;
  run.held_by_cap = 12;
  run.send_seconds = 1;
  for (int i = 0; i < 60; ++i) {
    Sample x{1.0, 0, 8, {}};
    x.send_delay_ms = i < 50 ? 0.0 : 100.0;
    run.samples.push_back(x);
  }
  Summary s = Summarize(run, spec);
  EXPECT_DOUBLE_EQ(s.achieved_rps, 60);
  EXPECT_EQ(s.latency_from, "scheduled");
  EXPECT_DOUBLE_EQ(s.max_ms, 101);  // from the scheduled time
  EXPECT_DOUBLE_EQ(s.send_delay_max_ms, 100);
  const std::string text = FormatText(s);
  EXPECT_EQ(text.rfind("open loop: offered 100.0 req/s, achieved 60.0 req/s: "
                       "BEHIND THE OFFERED RATE\n"
                       "sends      100 scheduled: 60 sent (10 late by more "
                       "than 1.0 ms), 40 never sent; 12 held back",
                       0),
            0u)
      << text;
  const auto j = ToJson(s);
  EXPECT_EQ(j["never_sent"], 40);
  EXPECT_EQ(j["latency_from"], "scheduled");
  spec.latency_from_scheduled = false;
  s = Summarize(run, spec);
  EXPECT_EQ(s.latency_from, "sent");
  EXPECT_DOUBLE_EQ(s.max_ms, 1);
  EXPECT_NE(FormatText(s).find("actual send"), std::string::npos);
}

}  // namespace
}  // namespace moe::loadtest
