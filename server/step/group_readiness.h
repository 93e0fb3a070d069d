// The worker group's readiness as the rest of the router reads it: a plain
// report (GroupState) and the view that gives it (GroupReadiness), which
// the worker pool implements. Here, below the group, so that the batcher's
// admission, the read-only RPCs and the metrics read readiness without
// depending on the pool.
#pragma once

#include <cstdint>
#include <string>

namespace moe {

// Describes the group as the router's readiness, metrics and errors see it.
struct GroupState {
  int world_size = 0;  // configured (P)
  // Holds the current generation's world size: P, or fewer while degraded; 0
  // before any group formed.
  int group_size = 0;
  int connected = 0;
  int ready_workers = 0;
  bool ready = false;
  uint64_t generation = 0;
  // Why the last worker was refused at registration (e.g. a second NCCL
  // worker on one GPU) or could not join a generation (its load or
  // rendezvous error, naming the worker), until a group is ready; empty if
  // none was.
  std::string refusal;
  // Holds "; worker rank R (...) not answering (...)" for each stalled rank.
  std::string stalled;
  // Is true when the group is ready with fewer workers than configured.
  bool degraded() const { return ready && group_size < world_size; }
};

// Returns UNAVAILABLE's one message while the group is not ready (connected,
// ready, stalled, the last refusal): the same words whether the batcher refuses
// a request or a step finds the group gone.
std::string NotReadyMessage(const GroupState& st);

// Is where readiness is read: the worker pool in the router, a fake in tests.
class GroupReadiness {
 public:
  virtual ~GroupReadiness() = default;
  virtual GroupState state() const = 0;
  // Returns true when a step waits for a group that is not ready (requests then
  // queue instead of being refused at admission).
  virtual bool holds_steps() const = 0;
};

}  // namespace moe
