#include "server/group_roster.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "server/worker_admission.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point LastSeen(const GroupMember& member) {
  return Clock::time_point(Clock::duration(member.last_seen.load()));
}

}  // namespace

absl::Status GroupRoster::Admit(const std::shared_ptr<GroupMember>& member,
                                const std::string& peer) {
  absl::Status refused = CheckCollectiveHost(member->info, peer);
  if (refused.ok()) {
    std::vector<RegisteredWorker> registered;
    for (const auto& c : members_) {
      if (c != nullptr) registered.push_back({&c->info, c->Name()});
    }
    refused = CheckDevice(member->info, registered);
  }
  if (!refused.ok()) {
    // Refused before it takes a rank: the group is not re-formed.
    refusal_ = std::string(refused.message());
    spdlog::error("{}", refusal_);
    return refused;
  }
  for (int i = 0; i < world_size(); ++i) {
    if (members_[i] == nullptr) {
      member->slot = i;
      members_[i] = member;
      break;
    }
  }
  if (member->slot < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", world_size(), " worker ranks are taken; retry to stand by"));
  }
  spdlog::info(
      "worker {} registered from {} ({} of {} workers connected; {} "
      "threads, {})",
      member->Name(), peer, Connected(), world_size(), member->threads,
      member->info.device);
  return absl::OkStatus();
}

GroupRoster::Removed GroupRoster::Remove(
    const std::shared_ptr<GroupMember>& member) {
  if (member->slot < 0 || members_[member->slot] != member) {
    return Removed::kNone;
  }
  members_[member->slot] = nullptr;
  spdlog::warn("worker {} disconnected", member->Name());
  if (!IsRank(*member)) return Removed::kMember;
  if (member->ready_generation == generation_ && ready_count_ > 0) {
    --ready_count_;
  }
  member->assigned = false;
  ready_ = false;
  return Removed::kRank;
}

GroupRoster::Readiness GroupRoster::Ready(
    const std::shared_ptr<GroupMember>& member, uint64_t generation,
    const std::string& error) {
  if (generation != generation_ || !IsRank(*member)) {
    return Readiness::kIgnored;
  }
  if (!error.empty()) {
    // Kept for the clients' UNAVAILABLE answers (GroupState::refusal):
    // without it they would only see "0 ready" while the group retries.
    refusal_ =
        absl::StrCat("worker ", member->Name(), " could not join generation ",
                     generation, ": ", error);
    spdlog::warn("{}", refusal_);
    return Readiness::kFailed;
  }
  if (member->ready_generation == generation_) return Readiness::kIgnored;
  member->ready_generation = generation_;
  if (++ready_count_ < static_cast<int>(ranks_.size())) {
    return Readiness::kCounted;
  }
  spdlog::info("worker group generation {} ready ({} of {} workers)",
               generation_, ranks_.size(), world_size());
  ready_ = true;
  refusal_.clear();
  return Readiness::kGroupReady;
}

std::vector<bool> GroupRoster::Available() const {
  std::vector<bool> available(members_.size());
  for (size_t s = 0; s < members_.size(); ++s) {
    available[s] = members_[s] != nullptr && !members_[s]->stalled;
  }
  return available;
}

void GroupRoster::StartGeneration(const std::vector<int>& slots) {
  ++generation_;
  ready_ = false;
  ready_count_ = 0;
  for (const auto& c : members_) {
    if (c == nullptr) continue;
    // Left out of this generation: no rank, no store token, no heartbeat
    // watch (it is already known to be stalled).
    c->rank = -1;
    c->assigned = false;
  }
  ranks_.clear();
  for (int s : slots) ranks_.push_back(members_[s]);
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    ranks_[r]->rank = r;
    ranks_[r]->assigned = true;
  }
}

void GroupRoster::Stall(int rank) {
  ranks_[rank]->stalled = true;
  ready_ = false;
}

std::vector<absl::Status> GroupRoster::StallSilent(
    Clock::time_point now, const LivenessPolicy& policy,
    Clock::time_point* next_check) {
  const LivenessCheck check = CheckLiveness(Watched(), now, policy);
  *next_check = check.next_check;
  std::vector<absl::Status> stalled;
  for (const LivenessCheck::Stall& stall : check.stalled) {
    Stall(stall.index);
    stalled.push_back(
        StallError(ranks_[stall.index]->Name(), stall.silent, policy));
    spdlog::error("{}", stalled.back().message());
  }
  return stalled;
}

bool GroupRoster::IsRank(const GroupMember& member) const {
  return member.rank >= 0 && member.rank < static_cast<int>(ranks_.size()) &&
         ranks_[member.rank].get() == &member;
}

std::vector<std::optional<Clock::time_point>> GroupRoster::Watched() const {
  // Only a rank that was told the interval (in an assignment) is held to
  // it.
  std::vector<std::optional<Clock::time_point>> watched(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const auto& c = ranks_[r];
    if (c != nullptr && !c->stalled && c->assigned) watched[r] = LastSeen(*c);
  }
  return watched;
}

int GroupRoster::Connected() const {
  int connected = 0;
  for (const auto& c : members_) connected += c != nullptr;
  return connected;
}

std::string GroupRoster::Stalled(Clock::time_point now) const {
  std::string out;
  for (const auto& c : members_) {
    if (c != nullptr && c->stalled) {
      absl::StrAppend(&out, NotAnswering(c->Name(), now - LastSeen(*c)));
    }
  }
  return out;
}

GroupState GroupRoster::State(Clock::time_point now) const {
  GroupState s;
  s.world_size = world_size();
  s.group_size = static_cast<int>(ranks_.size());
  s.connected = Connected();
  s.ready_workers = ready_count_;
  s.ready = ready_;
  s.generation = generation_;
  s.refusal = ready_ ? "" : refusal_;
  s.stalled = Stalled(now);
  return s;
}

std::string GroupRoster::NotReady(Clock::time_point now) const {
  const GroupState st = State(now);
  return absl::StrCat("worker group not ready: ", st.connected, " of ",
                      st.world_size, " workers connected, ", st.ready_workers,
                      " ready", st.stalled,
                      st.refusal.empty() ? "" : "; last refused: ", st.refusal);
}

}  // namespace moe
