// When the worker group forms a new generation, and with whom: a pure
// function of the members there, the time and the policy, so that the rules
// (a full group first; after a loss, a smaller one once regroup_after has
// passed; whole again as soon as workers return) are tested without threads
// or gRPC; RegroupSchedule keeps what the rules remember between
// generations (and the backoff of failed ones). GroupEvents applies its
// answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace moe {

struct GroupPolicy {
  int world_size = 1;  // P, the configured workers
  // Sets how long after a loss the workers left wait before they form a smaller
  // group.
  std::chrono::milliseconds regroup_after{5000};
};

// Holds what the membership remembers between generations.
struct GroupHistory {
  bool formed_full = false;  // a group of world_size workers has formed
  // Records when the last member of a generation was lost.
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

// When the next generation forms: PlanGeneration and RegroupAfterLoss over
// the history they keep, the regroup scheduled (after a loss, a wait or a
// failed generation) and the backoff of generations that a worker could
// not join. Plain state with no lock: GroupEvents keeps it, under
// WorkerGroup's lock.
class RegroupSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // A failed generation is retried after `retry_delay`, doubled for each
  // one failed in a row, at most `max_doublings` times.
  RegroupSchedule(GroupPolicy policy, std::chrono::milliseconds retry_delay,
                  int max_doublings)
      : policy_(policy),
        retry_delay_(retry_delay),
        max_doublings_(max_doublings) {}

  // PlanGeneration over the history kept: kForm adopts the plan's history
  // and drops a scheduled regroup; kWait schedules one at the plan's time
  // (the later one if one was scheduled).
  NextGeneration Plan(const std::vector<bool>& available,
                      Clock::time_point now);
  // A member of the current generation was lost at `now`: true when the
  // members left may form a smaller group, scheduled at regroup_after.
  bool Lost(Clock::time_point now);
  // Records that a worker could not join `generation` (counted once per
  // generation).
  void Failed(uint64_t generation);
  // Records that a group is ready, so the backoff starts over.
  void Succeeded() { failed_in_a_row_ = 0; }
  // Schedules a new generation of the same members after the backoff; a regroup
  // due sooner keeps its time.
  void RetryLater(Clock::time_point now);
  // Returns true, once, when the regroup scheduled is due at `now`.
  bool Due(Clock::time_point now);
  // Returns when the regroup scheduled is due, or nullopt when none is.
  std::optional<Clock::time_point> next() const { return at_; }

 private:
  const GroupPolicy policy_;
  const std::chrono::milliseconds retry_delay_;
  const int max_doublings_;
  GroupHistory history_;
  std::optional<Clock::time_point> at_;
  int failed_in_a_row_ = 0;   // generations a worker could not join
  uint64_t last_failed_ = 0;  // the last one counted
};

}  // namespace moe
