// The CPU's step queue (engine/host_queue.h): marks that time the step's
// points in order, copies that copy, and nothing to wait for.
#include "engine/host_queue.h"

#include <thread>
#include <vector>

#include "comm/loopback_communicator.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(HostQueue, MarksTimeThePointsBetweenThem) {
  HostQueue q;
  EXPECT_EQ(q.stream(), nullptr);
  q.Mark(EpMark::kStart);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  q.Mark(EpMark::kDispatched);
  q.Mark(EpMark::kDone);
  const double dispatch = q.ElapsedUs(EpMark::kStart, EpMark::kDispatched);
  EXPECT_GE(dispatch, 2000.0);
  EXPECT_LT(dispatch, 2e6);
  EXPECT_GE(q.ElapsedUs(EpMark::kDispatched, EpMark::kDone), 0.0);
  EXPECT_GE(q.ElapsedUs(EpMark::kStart, EpMark::kDone), dispatch);
}

TEST(HostQueue, CopiesBothWaysAndFinishesAtOnce) {
  HostQueue q;
  const std::vector<float> a = {1, 2, 3};
  std::vector<float> b(3, 0), c(3, 0);
  ASSERT_TRUE(q.CopyToHost(a.data(), b.data(), 3 * sizeof(float)).ok());
  EXPECT_EQ(b, a);
  ASSERT_TRUE(q.CopyFromHost(b.data(), c.data(), 2 * sizeof(float)).ok());
  EXPECT_EQ(c, (std::vector<float>{1, 2, 0}));
  EXPECT_TRUE(q.CopyToHost(nullptr, nullptr, 0).ok());
  auto comm = CreateLoopbackCommunicator();
  EXPECT_TRUE(q.Finish(*comm, std::chrono::steady_clock::now()).ok());
}

}  // namespace
}  // namespace moe
