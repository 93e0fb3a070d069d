// What follows the worker group's membership: the rendezvous store (owned
// here), the steps in flight (the step channel) and a placement loading
// (the placement switch), each told what happened to the group: a
// generation started, a rank left or stalled, the router shutting down.
// No lock of its own: WorkerGroup and its GroupEvents call it under the
// group's lock, and the parts' own locks call nothing back.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/group/group_member.h"
#include "server/group/placement_switch.h"
#include "server/group/rendezvous_store.h"
#include "server/group/step_channel.h"
#include "server/group/worker_pool_options.h"

namespace moe {

class GroupParts {
 public:
  // `channel` and `placement` outlive the parts (WorkerPool owns them).
  GroupParts(const WorkerPoolOptions& options, StepChannel* channel,
             PlacementSwitch* placement);

  RendezvousStore& store() { return store_; }

  // Generation `generation` of `world` ranks: their assignments
  // (AssignGeneration, the placement in force), the store serving their
  // tokens; the ended generation's rendezvous, steps in flight and
  // placement loading end.
  std::vector<GroupAssignment> StartGeneration(uint64_t generation, int world);
  // Worker `name`, rank `rank` of `generation`, disconnected: its steps
  // fail, the rendezvous cannot complete, its token no longer opens the
  // store.
  void RankLeft(const std::string& name, int rank, uint64_t generation);
  // A rank stalled (`status` names it): the cause of the steps failing
  // (not its peers' timeouts), and the rendezvous ends.
  void RankStalled(const absl::Status& status);
  // Fails everything in flight, and nothing starts any more.
  void Shutdown();

 private:
  const int world_size_;  // configured
  const int64_t num_experts_;
  const std::chrono::milliseconds heartbeat_interval_;
  StepChannel* const channel_;
  PlacementSwitch* const placement_;
  RendezvousStore store_;
};

}  // namespace moe
