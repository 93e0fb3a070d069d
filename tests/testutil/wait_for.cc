#include "tests/testutil/wait_for.h"

#include <algorithm>
#include <thread>

namespace moe::testing {

bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(poll, deadline - now));
  }
}

}  // namespace moe::testing
