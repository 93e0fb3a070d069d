// Waiting for a condition in tests, instead of fixed sleeps:
//   ASSERT_TRUE(WaitFor([&] { return cluster.ready(); }, 30s))
//       << "the group never became ready";
#pragma once

#include <chrono>
#include <functional>

namespace moe::testing {

// Polls `condition` every `poll` until it holds (true) or `timeout` has
// passed (false; the condition is tried one last time at the deadline).
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(10));

}  // namespace moe::testing
