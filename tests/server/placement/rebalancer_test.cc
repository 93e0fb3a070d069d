// The rebalancer against a fake placement switch: a placement computed from
// the load since the last rebalance (the hot expert replicated), handed to
// the switch and then to the stats; the placement in force kept when
// nothing new was routed; a failed switch reported and not recorded; and
// the automatic rebalance every K steps.
#include "server/placement/rebalancer.h"

#include <future>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

constexpr int64_t kExperts = 4;

class FakeSwitch : public PlacementTarget {
 public:
  std::shared_ptr<const ExpertPlacement> Current() override {
    absl::MutexLock lock(&mu_);
    return current_;
  }
  absl::Status Switch(std::shared_ptr<const ExpertPlacement> next,
                      std::chrono::steady_clock::time_point,
                      uint64_t* epoch) override {
    absl::MutexLock lock(&mu_);
    ++switches_;
    mu_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &held_));
    if (!fail_.ok()) return fail_;
    current_ = std::move(next);
    *epoch = ++epoch_;
    return absl::OkStatus();
  }
  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(s);
  }
  int switches() {
    absl::MutexLock lock(&mu_);
    return switches_;
  }
  // Switches wait while held.
  void Hold(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<const ExpertPlacement> current_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int switches_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
};

Rebalancer::Options Options(FakeSwitch* placements, ExpertStatsBook* stats) {
  Rebalancer::Options o;
  o.placements = placements;
  o.stats = stats;
  o.info.moe_layers = {0};
  o.info.layer.num_experts = kExperts;
  o.world = 2;
  o.redundant = 2;
  return o;
}

absl::StatusOr<RebalanceOutcome> RebalanceNow(Rebalancer& r) {
  std::promise<absl::StatusOr<RebalanceOutcome>> done;
  r.Request(
      [&](const absl::StatusOr<RebalanceOutcome>& o) { done.set_value(o); });
  return done.get_future().get();
}

int32_t Replicas(const std::shared_ptr<const ExpertPlacement>& p,
                 int32_t expert) {
  int32_t n = 0;
  for (const auto& worker : p->layers.at(0).workers) {
    for (int32_t e : worker) n += e == expert;
  }
  return n;
}

TEST(Rebalancer, ReplicatesTheHotExpertAndRecordsThePlacement) {
  FakeSwitch placements;
  ExpertStatsBook stats(kExperts);
  Rebalancer r(Options(&placements, &stats));
  stats.Record(0, std::vector<int64_t>{1, 1, 90, 1}, 93, 0);
  auto first = RebalanceNow(r);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->epoch, 1u);
  EXPECT_GE(first->seconds, 0);
  const auto p = placements.Current();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->redundant, 2);
  EXPECT_GE(Replicas(p, 2), 2);  // the hot one
  EXPECT_EQ(Replicas(p, 0), 1);
  // What GetExpertStats reports from now on.
  EXPECT_EQ(stats.Snapshot(0, false).placement, p->layers.at(0).workers);

  // Nothing routed since: the placement in force stays.
  auto second = RebalanceNow(r);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->epoch, 2u);
  EXPECT_EQ(placements.Current()->layers.at(0).workers,
            p->layers.at(0).workers);

  // Only the load since the last rebalance counts: now expert 0 is hot.
  stats.Record(0, std::vector<int64_t>{500, 1, 1, 1}, 503, 0);
  ASSERT_TRUE(RebalanceNow(r).ok());
  EXPECT_GE(Replicas(placements.Current(), 0), 2);
  EXPECT_EQ(Replicas(placements.Current(), 2), 1);
}

TEST(Rebalancer, AFailedSwitchIsReportedAndNotRecorded) {
  FakeSwitch placements;
  ExpertStatsBook stats(kExperts);
  Rebalancer r(Options(&placements, &stats));
  stats.Record(0, std::vector<int64_t>{1, 1, 90, 1}, 93, 0);
  placements.Fail(absl::UnavailableError("group regrouping"));
  auto o = RebalanceNow(r);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(stats.Snapshot(0, false).placement.empty());
}

TEST(Rebalancer, EveryKStepsUnasked) {
  FakeSwitch placements;
  ExpertStatsBook stats(kExperts);
  Rebalancer::Options o = Options(&placements, &stats);
  o.every_steps = 3;
  Rebalancer r(o);
  stats.Record(0, std::vector<int64_t>{1, 1, 9, 1}, 12, 0);
  stats.Record(0, std::vector<int64_t>{1, 1, 9, 1}, 12, 0);
  // Two steps: not yet (the loop polls every 50 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(placements.switches(), 0);
  stats.Record(0, std::vector<int64_t>{1, 1, 9, 1}, 12, 0);
  EXPECT_TRUE(testing::WaitFor([&] { return placements.switches() == 1; },
                               std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(placements.switches(), 1);  // not again until 3 more steps
}

// Asked rebalances wait behind the one running up to a bound; one more is
// refused at once, RESOURCE_EXHAUSTED, and the queued ones are all answered.
TEST(Rebalancer, AskedRebalancesQueueUpToABound) {
  FakeSwitch placements;
  ExpertStatsBook stats(kExperts);
  stats.Record(0, std::vector<int64_t>{1, 1, 90, 1}, 93, 0);
  Rebalancer r(Options(&placements, &stats));
  placements.Hold(true);
  // Let go before `r` joins its thread, also when an assertion returns.
  struct Release {
    FakeSwitch* s;
    ~Release() { s->Hold(false); }
  } release{&placements};
  absl::Mutex mu;
  std::vector<absl::Status> answers;
  auto ask = [&] {
    r.Request([&](const absl::StatusOr<RebalanceOutcome>& o) {
      absl::MutexLock lock(&mu);
      answers.push_back(o.status());
    });
  };
  ask();  // runs, held in the switch
  ASSERT_TRUE(testing::WaitFor([&] { return placements.switches() == 1; },
                               std::chrono::seconds(10)));
  for (size_t i = 0; i < Rebalancer::kMaxQueuedRequests; ++i) ask();
  ask();  // one too many: answered at once
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(answers.size(), 1u);
    EXPECT_EQ(answers[0].code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(answers[0].message().find("already wait"), std::string::npos)
        << answers[0];
  }
  placements.Hold(false);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        absl::MutexLock lock(&mu);
        return answers.size() == Rebalancer::kMaxQueuedRequests + 2;
      },
      std::chrono::seconds(10)));
  absl::MutexLock lock(&mu);
  for (size_t i = 1; i < answers.size(); ++i) EXPECT_TRUE(answers[i].ok()) << i;
}

}  // namespace
}  // namespace moe
