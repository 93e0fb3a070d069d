// Thread roles set the calling thread's scheduler slice, and threads started
// afterwards inherit it. Needs a kernel that reports se.slice (6.6+) and
// honours a custom slice for SCHED_OTHER (6.12+); skips elsewhere.
#include "core/thread_slice.h"

#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

// The calling thread's slice in ns, or -1 where the kernel does not say.
long long SliceNs() {
  std::ifstream in("/proc/thread-self/sched");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("se.slice", 0) == 0) {
      return std::stoll(line.substr(line.find(':') + 1));
    }
  }
  return -1;
}

TEST(ThreadSlice, RolesSetTheSliceAndNewThreadsInheritIt) {
  const long long before = SliceNs();
  if (before < 0) GTEST_SKIP() << "this kernel does not report se.slice";
  if (!SetThreadRole(ThreadRole::kLatency) || SliceNs() == before) {
    SetThreadRole(ThreadRole::kCompute);
    GTEST_SKIP() << "this kernel keeps no custom slice for SCHED_OTHER";
  }
  EXPECT_EQ(SliceNs(), 100'000);
  EXPECT_EQ(ThreadSliceUs(), 100.0);
  long long child = 0;
  std::thread([&] { child = SliceNs(); }).join();
  EXPECT_EQ(child, 100'000);
  ASSERT_TRUE(SetThreadRole(ThreadRole::kCompute));
  const long long compute = SliceNs();
  EXPECT_GT(compute, 100'000);
  {
    const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
    EXPECT_EQ(SliceNs(), 100'000);
  }
  EXPECT_EQ(SliceNs(), compute);
}

}  // namespace
}  // namespace moe
