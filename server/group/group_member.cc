#include "server/group/group_member.h"

#include <random>

#include "absl/synchronization/mutex.h"
#include "core/even_split.h"

namespace moe {
namespace {

// Draws a fresh secret per rank and generation, so a token of an earlier
// generation opens nothing.
std::string NewToken() {
  static absl::Mutex mu(absl::kConstInit);
  static std::random_device rd;
  absl::MutexLock lock(&mu);
  std::string t(16, '\0');
  for (char& c : t) c = static_cast<char>(rd() & 0xff);
  return t;
}

}  // namespace

std::vector<GroupAssignment> AssignGeneration(
    uint64_t generation, int world, int configured, int64_t num_experts,
    const PlacementInForce& in_force,
    std::chrono::milliseconds heartbeat_interval) {
  std::vector<GroupAssignment> out(world);
  for (int r = 0; r < world; ++r) {
    out[r] = {.generation = generation,
              .rank = r,
              .world_size = world,
              .expert_begin = SplitBegin(r, world, num_experts),
              .expert_end = SplitBegin(r + 1, world, num_experts),
              .placement_epoch = in_force.epoch,
              .placement = world == configured ? in_force.placement : nullptr,
              .heartbeat_interval = heartbeat_interval,
              .store_token = NewToken()};
  }
  return out;
}

void Send(const GroupOutbox& out) {
  for (const auto& [member, msg] : out) {
    if (const auto* a = std::get_if<GroupAssignment>(&msg)) {
      member->Assign(*a);
    } else {
      member->SendPlacement(std::get<PlacementUpdate>(msg));
    }
  }
}

}  // namespace moe
