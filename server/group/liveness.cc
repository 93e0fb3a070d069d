#include "server/group/liveness.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

LivenessCheck CheckLiveness(
    const std::vector<std::optional<Clock::time_point>>& last_seen,
    Clock::time_point now, const LivenessPolicy& policy) {
  LivenessCheck check;
  check.next_check = now + policy.interval;
  const auto limit = policy.limit();
  for (int i = 0; i < static_cast<int>(last_seen.size()); ++i) {
    if (!last_seen[i]) continue;
    const Clock::duration silent = now - *last_seen[i];
    if (silent > limit) {
      check.stalled.push_back({i, silent});
      continue;
    }
    const Clock::time_point due =
        *last_seen[i] + limit + std::chrono::milliseconds(1);
    check.next_check = std::min(check.next_check, std::max(due, now));
  }
  return check;
}

absl::Status StallError(const std::string& name, Clock::duration silent,
                        const LivenessPolicy& policy) {
  return absl::UnavailableError(absl::StrCat(
      "worker ", name, " stopped answering: no heartbeat for ", Ms(silent),
      " ms (", policy.misses, " x ", policy.interval.count(), " ms)"));
}

std::string NotAnswering(const std::string& name, Clock::duration silent) {
  return absl::StrCat("; worker ", name, " not answering (no heartbeat for ",
                      Ms(silent), " ms)");
}

}  // namespace moe
