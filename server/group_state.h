// The worker group as the router's readiness, metrics and errors see it:
// a plain report read off the roster (how many workers are connected and
// ready, the generation, why the last worker was refused, which ranks are
// silent) and the UNAVAILABLE message made from it. Apart from the roster,
// which keeps who is in the group, so that what the router shows is
// checked on its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "server/group_roster.h"

namespace moe {

// The group as the router's readiness, metrics and errors see it.
struct GroupState {
  int world_size = 0;  // configured (P)
  // The current generation's world size: P, or fewer while degraded; 0
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
  // "; worker rank R (...) not answering (...)" for each stalled rank.
  std::string stalled;
  // Ready with fewer workers than configured.
  bool degraded() const { return ready && group_size < world_size; }
};

// `roster`'s state at `now` (a stalled rank's silence measured to `now`).
GroupState GroupStateOf(const GroupRoster& roster,
                        std::chrono::steady_clock::time_point now);
// UNAVAILABLE's message while `roster` is not ready (connected, ready,
// stalled, the last refusal).
std::string NotReady(const GroupRoster& roster,
                     std::chrono::steady_clock::time_point now);

}  // namespace moe
