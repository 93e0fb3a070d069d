// A registered worker as the worker group knows it, and what the group
// sends it in plain structs (an assignment to a generation, a placement to
// load). The gRPC edge (worker_control_service) makes one member per Join
// stream and encodes those messages onto it; tests make fake members, so
// the group is driven without gRPC.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/placement.h"
#include "server/group/step_rank.h"
#include "server/group/worker_admission.h"
#include "server/step/placement_in_force.h"

namespace moe {

// Rank `rank` of a new generation of `world_size` ranks, as far as the group
// decides it (the edge adds the model and the transport's settings).
struct GroupAssignment {
  uint64_t generation = 0;
  int rank = 0;
  int world_size = 0;
  int64_t expert_begin = 0, expert_end = 0;  // the even split
  uint64_t placement_epoch = 0;
  // Holds the redundant experts' placement (null: the even split above).
  std::shared_ptr<const ExpertPlacement> placement;
  std::chrono::milliseconds heartbeat_interval{0};
  std::string store_token;  // the rendezvous store's key to rank `rank`
};

// The assignments of generation `generation` to `world` ranks, of the
// `configured` workers: each rank's even split of `num_experts`, the
// placement `in_force` only when the group is whole (it is made for the
// configured workers: a smaller group splits evenly, and is back on it when
// whole again), and a fresh store token each.
std::vector<GroupAssignment> AssignGeneration(
    uint64_t generation, int world, int configured, int64_t num_experts,
    const PlacementInForce& in_force,
    std::chrono::milliseconds heartbeat_interval);

// Tells rank `rank` of `generation` to load `placement` as `epoch` (live
// rebalancing).
struct PlacementUpdate {
  uint64_t generation = 0;
  int rank = 0;
  uint64_t epoch = 0;
  std::shared_ptr<const ExpertPlacement> placement;
};

class GroupMember;
// Holds messages for members, which the group writes in the order added once
// its lock is released (in the channel's send order).
using GroupOutbox =
    std::vector<std::pair<std::shared_ptr<GroupMember>,
                          std::variant<GroupAssignment, PlacementUpdate>>>;
void Send(const GroupOutbox& out);

class GroupMember : public StepRank {
 public:
  GroupMember(WorkerRegistration registration, int threads)
      : info(std::move(registration)), threads(threads) {}

  // Returns false when the connection is gone (nothing was sent).
  virtual bool Assign(const GroupAssignment& assignment) = 0;
  virtual bool SendPlacement(const PlacementUpdate& update) = 0;
  // Returns "(host pid N)"; GroupRoster::NameOf adds its rank.
  std::string Name() const override {
    return absl::StrCat("(", info.host, " pid ", info.pid, ")");
  }

  const WorkerRegistration info;  // from its Register message
  const int threads;              // Register.threads, for the log
  // Its slot, rank and readiness are the group's (GroupRoster).
  // When the last message came (steady clock, ns); stalled: no message
  // for heartbeat_misses intervals (set under the group's lock).
  std::atomic<int64_t> last_seen{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  std::atomic<bool> stalled{false};
};

}  // namespace moe
