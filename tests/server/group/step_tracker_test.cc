// server/step_tracker: a step ends when every rank it was sent to answers,
// with the first worker error as its status; the group is intact only when
// every rank refused before its collectives (or the step was direct); a
// missing rank is named at the deadline, and a stalled rank is blamed over
// its peers' errors.
#include "server/group/step_tracker.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A reply whose step_us stands for its rows, and whose owner says whose it
// is.
StepReply Result(uint64_t id, uint64_t generation, int64_t rows,
                 int error_code = 0, bool broken = false) {
  StepReply r;
  r.step_id = id;
  r.generation = generation;
  r.times.step_us = static_cast<double>(rows);
  r.error_code = error_code;
  if (error_code != 0) r.error_message = "too big";
  r.collectives_broken = broken;
  r.owner = std::make_shared<int64_t>(rows);
  return r;
}

std::string Who() { return "test worker"; }

TEST(StepTracker, EveryRankSentAnswersAndTheResultsComeBackByRank) {
  StepTracker t;
  const uint64_t id = t.Open(/*generation=*/3, {false, true, false}, false);
  auto r2 = Result(id, 3, 22);
  auto stale = Result(id, 2, 99);  // another generation's
  t.Answer(2, Who, r2);
  t.Answer(0, Who, stale);
  std::thread rank0([&] {
    std::this_thread::sleep_for(milliseconds(20));
    auto r0 = Result(id, 3, 10);
    t.Answer(0, Who, r0);
    auto again = Result(id, 3, 77);
    t.Answer(0, Who, again);  // a second answer: ignored
  });
  std::vector<StepReply> results;
  const auto out = t.Wait(id, Clock::now() + milliseconds(5000), &results);
  rank0.join();
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.generation, 3u);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].times.step_us, 10);
  EXPECT_EQ(results[1].times.step_us, 0);  // skipped: empty
  EXPECT_EQ(results[1].owner, nullptr);
  EXPECT_EQ(results[2].times.step_us, 22);
  // The reply's owner came along: its rows stay where they arrived.
  ASSERT_NE(results[2].owner, nullptr);
  EXPECT_EQ(*static_cast<const int64_t*>(results[2].owner.get()), 22);
}

TEST(StepTracker, TheGroupIsIntactOnlyWhenEveryRankRefusedBeforeCollectives) {
  StepTracker t;
  std::vector<StepReply> results;
  uint64_t id = t.Open(1, {false, false}, false);
  for (int r = 0; r < 2; ++r) {
    auto e = Result(id, 1, 0, /*error_code=*/3);
    t.Answer(r, Who, e);
  }
  auto out = t.Wait(id, Clock::now() + milliseconds(5000), &results);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status.message(), "worker rank 0: too big");
  EXPECT_TRUE(out.intact);
  // One refused, the other went on: not intact.
  id = t.Open(1, {false, false}, false);
  auto e = Result(id, 1, 0, 3);
  auto ok = Result(id, 1, 5);
  t.Answer(1, Who, e);
  t.Answer(0, Who, ok);
  out = t.Wait(id, Clock::now() + milliseconds(5000), &results);
  EXPECT_EQ(out.status.message(), "worker rank 1: too big");
  EXPECT_FALSE(out.intact);
  // A direct step touches no collective: intact however it fails.
  id = t.Open(1, {false, false}, /*direct=*/true);
  e = Result(id, 1, 0, 3);
  ok = Result(id, 1, 5);
  t.Answer(1, Who, e);
  t.Answer(0, Who, ok);
  EXPECT_TRUE(t.Wait(id, Clock::now() + milliseconds(5000), &results).intact);
  // A broken collective group never is.
  id = t.Open(1, {false}, false);
  e = Result(id, 1, 0, 13, /*broken=*/true);
  t.Answer(0, Who, e);
  EXPECT_FALSE(t.Wait(id, Clock::now() + milliseconds(5000), &results).intact);
}

TEST(StepTracker, AMissingRankIsNamedAtTheDeadline) {
  StepTracker t;
  const uint64_t id = t.Open(1, {false, false, false}, false);
  auto r1 = Result(id, 1, 5);
  t.Answer(1, Who, r1);
  std::vector<StepReply> results;
  const auto out = t.Wait(
      id, Clock::now() - std::chrono::seconds(1) + milliseconds(30), &results);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      out.status.message(),
      absl::StrCat("step ", id, " timed out waiting for worker ranks [0, 2]"));
  EXPECT_FALSE(out.intact);
  EXPECT_TRUE(results.empty());
}

TEST(StepTracker, AbortsEndStepsAndAStalledRankIsBlamedOverItsPeers) {
  StepTracker t;
  std::vector<StepReply> results;
  uint64_t a = t.Open(1, {false, false}, false);
  uint64_t b = t.Open(1, {false, false}, false);
  auto e = Result(a, 1, 0, 4);  // a peer's collective timed out
  t.Answer(0, Who, e);
  t.Blame(absl::UnavailableError("worker rank 1 stopped answering"));
  t.AbortAll(absl::UnavailableError("worker group reconfigured"));
  auto out = t.Wait(a, Clock::now() + milliseconds(5000), &results);
  EXPECT_EQ(out.status.message(), "worker rank 1 stopped answering");
  EXPECT_FALSE(out.intact);
  out = t.Wait(b, Clock::now() + milliseconds(5000), &results);
  EXPECT_EQ(out.status.message(), "worker rank 1 stopped answering");
  const uint64_t c = t.Open(2, {false}, false);
  t.AbortAll(absl::UnavailableError("worker group reconfigured"));
  t.Fail(c, absl::UnavailableError("lost worker"));  // already failed
  out = t.Wait(c, Clock::now() + milliseconds(5000), &results);
  EXPECT_EQ(out.status.message(), "worker group reconfigured");
  EXPECT_EQ(out.generation, 2u);
}

}  // namespace
}  // namespace moe
