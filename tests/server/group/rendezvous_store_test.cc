// server/rendezvous_store: a rank sets only its own keys of its own
// generation; a Get parks until its keys are set, its deadline, a
// cancellation or the generation's end, and its waiter ends exactly once,
// outside the store's lock.
#include "server/group/rendezvous_store.h"

#include "gtest/gtest.h"
#include "tests/server/group/recording_store_waiter.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using Waiter = RecordingStoreWaiter;

Clock::time_point Later() { return Clock::now() + std::chrono::hours(1); }

TEST(RendezvousStore, ARankSetsOnlyItsOwnKeysOfItsGeneration) {
  RendezvousStore store(4);
  store.StartGeneration(2, {"t0", "t1"});
  EXPECT_TRUE(store.Set(2, "t0", "0", "a").ok());
  EXPECT_TRUE(store.Set(2, "t0", "nccl-unique-id", "id").ok());
  EXPECT_TRUE(store.Set(2, "t1", "rank_1", "b").ok());
  EXPECT_EQ(store.Set(2, "t1", "0", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Set(2, "t9", "0", "x").code(),
            absl::StatusCode::kPermissionDenied);
  const absl::Status old = store.Set(1, "t0", "0", "x");
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.message(),
            "StoreSet for generation 1 refused: generation 1 is over; the "
            "store serves generation 2");
  store.RevokeRank(1);
  EXPECT_EQ(store.Set(2, "t1", "1", "b").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(RendezvousStore, AGetIsAnsweredWhenItsKeysAreSetAndNotBefore) {
  RendezvousStore store(4);
  store.StartGeneration(1, {"t0", "t1"});
  ASSERT_TRUE(store.Set(1, "t0", "0", "zero").ok());
  Waiter w;
  ASSERT_TRUE(store.Get(1, "t1", {"0", "1/0"}, Later(), &w).ok());
  store.FinishEnded();
  EXPECT_EQ(w.ended, 0);
  EXPECT_EQ(store.waits(), 1u);
  // Set finishes the Gets it answers itself, before it returns: no caller
  // has to remember to.
  ASSERT_TRUE(store.Set(1, "t1", "1/0", "one").ok());
  EXPECT_EQ(w.ended, 1);
  EXPECT_TRUE(w.status.ok());
  EXPECT_EQ(w.values, (std::vector<std::string>{"zero", "one"}));
  EXPECT_EQ(store.waits(), 0u);
  // Already set: answered at once.
  Waiter now;
  ASSERT_TRUE(store.Get(1, "t0", {"1/0"}, Later(), &now).ok());
  EXPECT_EQ(now.values, (std::vector<std::string>{"one"}));
}

TEST(RendezvousStore, ParkedGetsEndWithTheirDeadlineCancelOrGeneration) {
  RendezvousStore store(8);
  store.StartGeneration(1, {"t0", "t1"});
  Waiter soon, later, cancelled, other;
  const auto t = Clock::now() + milliseconds(50);
  ASSERT_TRUE(store.Get(1, "t0", {"1"}, t, &soon).ok());
  ASSERT_TRUE(store.Get(1, "t0", {"1"}, Later(), &later).ok());
  ASSERT_TRUE(store.Get(1, "t1", {"0"}, Later(), &cancelled).ok());
  EXPECT_EQ(store.Expire(t - milliseconds(1)), t);
  store.FinishEnded();
  EXPECT_EQ(soon.ended, 0);
  EXPECT_NE(store.Expire(t), t);
  store.FinishEnded();
  EXPECT_EQ(soon.ended, 1);
  EXPECT_EQ(soon.status.code(), absl::StatusCode::kDeadlineExceeded);
  store.Cancel(&cancelled);
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  store.Cancel(&cancelled);  // already ended: not again
  EXPECT_EQ(cancelled.ended, 1);
  store.StartGeneration(2, {"n0"});
  store.FinishEnded();
  EXPECT_EQ(later.ended, 1);
  EXPECT_EQ(later.status.code(), absl::StatusCode::kFailedPrecondition);
  // The new generation starts empty, with its own tokens.
  EXPECT_EQ(store.Get(2, "t0", {"0"}, Later(), &other).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(store.Get(2, "n0", {"0"}, Later(), &other).ok());
  store.FinishEnded();
  EXPECT_EQ(other.ended, 0);
  store.Shutdown();
  store.FinishEnded();
  EXPECT_EQ(other.status.code(), absl::StatusCode::kUnavailable);
  Waiter refused;
  EXPECT_EQ(store.Get(2, "n0", {"0"}, Later(), &refused).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.ended, 0);
}

TEST(RendezvousStore, ANewGenerationStartsWithNoKeys) {
  RendezvousStore store(4);
  store.StartGeneration(1, {"t0"});
  ASSERT_TRUE(store.Set(1, "t0", "0", "old").ok());
  store.StartGeneration(2, {"t0"});
  Waiter w;
  ASSERT_TRUE(store.Get(2, "t0", {"0"}, Later(), &w).ok());
  store.FinishEnded();
  EXPECT_EQ(w.ended, 0) << "answered with the ended generation's key";
}

TEST(RendezvousStore, ParkedGetsAreCappedPerRank) {
  RendezvousStore store(2);
  store.StartGeneration(1, {"t0", "t1"});
  Waiter w[4];
  EXPECT_TRUE(store.Get(1, "t1", {"0"}, Later(), &w[0]).ok());
  EXPECT_TRUE(store.Get(1, "t1", {"0"}, Later(), &w[1]).ok());
  EXPECT_EQ(store.Get(1, "t1", {"0"}, Later(), &w[2]).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Get(1, "t0", {"1"}, Later(), &w[3]).ok());  // another rank
  store.EndWaits(absl::UnavailableError("rank 1 left"));
  store.FinishEnded();
  EXPECT_EQ(w[0].status.message(), "rank 1 left");
  EXPECT_EQ(w[3].ended, 1);
}

}  // namespace
}  // namespace moe
