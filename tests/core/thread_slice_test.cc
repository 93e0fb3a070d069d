// Thread roles set the calling thread's scheduler slice, and threads started
// afterwards inherit it. Needs a kernel that reports se.slice (6.6+) and
// honours a custom slice for SCHED_OTHER (6.12+); skips elsewhere.
#include "core/thread_slice.h"

#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(ThreadSlice, RolesSetTheSliceAndNewThreadsInheritIt) {
  const double before = ThreadSliceUs();
  if (before < 0) GTEST_SKIP() << "this kernel does not report se.slice";
  if (!SetThreadRole(ThreadRole::kLatency) || ThreadSliceUs() == before) {
    SetThreadRole(ThreadRole::kCompute);
    GTEST_SKIP() << "this kernel keeps no custom slice for SCHED_OTHER";
  }
  EXPECT_EQ(ThreadSliceUs(), 100.0);
  double child = 0;
  std::thread([&] { child = ThreadSliceUs(); }).join();
  EXPECT_EQ(child, 100.0);
  ASSERT_TRUE(SetThreadRole(ThreadRole::kCompute));
  const double compute = ThreadSliceUs();
  EXPECT_GT(compute, 100.0);
  {
    const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
    EXPECT_EQ(ThreadSliceUs(), 100.0);
  }
  EXPECT_EQ(ThreadSliceUs(), compute);
}

}  // namespace
}  // namespace moe
