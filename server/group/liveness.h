// Whether the ranks of the worker group are alive: a pure function of when
// each was last heard of, the time and the policy (a heartbeat interval and
// how many may be missed), so that the watchdog's rules are tested without
// threads or gRPC. GroupEvents applies its answers; the group's timer
// (group_timer) looks again when the answer says.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe {

struct LivenessPolicy {
  // Workers send a heartbeat this often; one silent for `misses` intervals
  // is stalled.
  std::chrono::milliseconds interval{500};
  int misses = 4;
  std::chrono::milliseconds limit() const { return interval * misses; }
};

struct LivenessCheck {
  struct Stall {
    int index;  // into the ranks checked
    std::chrono::steady_clock::duration silent;
  };
  // Lists the watched ranks silent for longer than the limit, in rank order.
  std::vector<Stall> stalled;
  // When to look again: every interval, and as soon as a watched rank
  // that is not stalled now would pass the limit (ahead of the transport's
  // keepalive, which would otherwise drop a frozen worker as disconnected
  // before it is seen stalled).
  std::chrono::steady_clock::time_point next_check;
};

// `last_seen[i]` says when rank i was last heard of; nullopt for a rank not
// watched (not told the interval in an assignment, or already stalled).
LivenessCheck CheckLiveness(
    const std::vector<std::optional<std::chrono::steady_clock::time_point>>&
        last_seen,
    std::chrono::steady_clock::time_point now, const LivenessPolicy& policy);

// Returns UNAVAILABLE saying that worker `name` stopped answering and has been
// silent for `silent`.
absl::Status StallError(const std::string& name,
                        std::chrono::steady_clock::duration silent,
                        const LivenessPolicy& policy);
// Returns "; worker NAME not answering (no heartbeat for N ms)" for the group's
// state.
std::string NotAnswering(const std::string& name,
                         std::chrono::steady_clock::duration silent);

}  // namespace moe
