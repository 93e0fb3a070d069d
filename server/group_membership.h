// When the worker group forms a new generation, and with whom: a pure
// function of the members there, the time and the policy, so that the rules
// (a full group first; after a loss, a smaller one once regroup_after has
// passed; whole again as soon as workers return) are tested without threads
// or gRPC. WorkerPool applies its answers.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

namespace moe {

struct GroupPolicy {
  int world_size = 1;  // P, the configured workers
  // After a loss, how long before the workers left form a smaller group.
  std::chrono::milliseconds regroup_after{5000};
};

// What the membership remembers between generations.
struct GroupHistory {
  bool formed_full = false;  // a group of world_size workers has formed
  // When the last member of a generation was lost.
  std::optional<std::chrono::steady_clock::time_point> lost_at;
};

struct NextGeneration {
  enum class Action {
    kNone,  // no group can form
    kWait,  // the members there may form a smaller group at regroup_at
    kForm,  // `slots` become ranks 0.. of a new generation
  };
  Action action = Action::kNone;
  std::vector<int> slots;  // kForm: the members' slots, ascending
  std::chrono::steady_clock::time_point regroup_at{};  // kWait
  GroupHistory history;                                // after this decision
};

// `available[slot]`: a worker is registered in the slot and answering (a
// stalled one cannot join; it gets a new generation when it answers again).
NextGeneration PlanGeneration(const std::vector<bool>& available,
                              const GroupHistory& history,
                              std::chrono::steady_clock::time_point now,
                              const GroupPolicy& policy);

// A member of the current generation was lost at `now`: the history after
// it, and when the members left may form a smaller group (none before a
// full group has formed).
std::optional<std::chrono::steady_clock::time_point> RegroupAfterLoss(
    GroupHistory* history, std::chrono::steady_clock::time_point now,
    const GroupPolicy& policy);

}  // namespace moe
