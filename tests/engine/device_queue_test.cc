#include "engine/cuda/device_queue.h"

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A group whose peer left mid-collective: Await waits for the deadline and
// aborts, as the NCCL communicator does.
class LostPeerCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "lost-peer"; }
  absl::Status AllToAllV(const void*, absl::Span<const int64_t>, void*,
                         absl::Span<const int64_t>, ElementType,
                         std::chrono::milliseconds, void*) override {
    return absl::OkStatus();
  }
  absl::Status Await(void* event, Clock::time_point deadline) override {
    awaited = event;
    std::this_thread::sleep_until(deadline);
    aborted = true;
    return absl::DeadlineExceededError("peer 1 did not answer; group aborted");
  }
  void* awaited = nullptr;
  bool aborted = false;
};

// A queue holding that collective: synchronising it before the group is
// aborted would block forever (recorded instead of blocking).
class FakeQueue : public DeviceQueue {
 public:
  explicit FakeQueue(const LostPeerCommunicator& comm) : comm_(comm) {}
  absl::StatusOr<void*> MarkDone() override {
    ++marks;
    return static_cast<void*>(&marker);
  }
  absl::Status Synchronize() override {
    ++syncs;
    if (!comm_.aborted) {
      hung = true;
      return absl::InternalError("would hang: a collective waits on a peer");
    }
    return absl::UnavailableError("collective aborted");
  }
  void ClearError() override { ++cleared; }
  int marker = 0, marks = 0, syncs = 0, cleared = 0;
  bool hung = false;

 private:
  const LostPeerCommunicator& comm_;
};

// Drain after a failed piece, with an NCCL exchange queued and the peer
// gone: bounded by the step's deadline, the group aborted, then drained.
TEST(DeviceQueue, DrainAfterAFailedPieceEndsByTheDeadline) {
  LostPeerCommunicator comm;
  FakeQueue q(comm);
  const auto start = Clock::now();
  const auto deadline = start + milliseconds(100);
  DrainQueue(q, comm, deadline);
  const auto took = Clock::now() - start;
  EXPECT_FALSE(q.hung) << "the queue was synchronised before the abort";
  EXPECT_TRUE(comm.aborted);
  EXPECT_EQ(comm.awaited, &q.marker) << "awaited something else than the "
                                        "work queued before the failure";
  EXPECT_EQ(q.marks, 1);
  EXPECT_EQ(q.syncs, 1);
  EXPECT_EQ(q.cleared, 1);
  EXPECT_GE(took, milliseconds(100));
  EXPECT_LT(took, milliseconds(2000));
}

TEST(DeviceQueue, FinishReportsTheAbortWithoutWaitingOnTheQueue) {
  LostPeerCommunicator comm;
  FakeQueue q(comm);
  int done = 0;
  const absl::Status s =
      AwaitQueue(q, comm, &done, Clock::now() + milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(comm.awaited, &done);
  EXPECT_EQ(q.syncs, 0);
  EXPECT_FALSE(q.hung);
}

}  // namespace
}  // namespace moe
