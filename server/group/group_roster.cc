#include "server/group/group_roster.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "server/group/worker_admission.h"

namespace moe {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point LastSeen(const GroupMember& member) {
  return Clock::time_point(Clock::duration(member.last_seen.load()));
}

// Returns the index of `member` in `members`, or -1 if it is not there.
int IndexOf(const GroupRoster::Members& members, const GroupMember& member) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].get() == &member) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

absl::Status GroupRoster::Admit(const std::shared_ptr<GroupMember>& member,
                                const std::string& peer) {
  absl::Status refused = CheckCollectiveHost(member->info, peer);
  if (refused.ok()) {
    std::vector<RegisteredWorker> registered;
    for (const auto& c : members_) {
      if (c != nullptr) registered.push_back({&c->info, NameOf(*c)});
    }
    refused = CheckDevice(member->info, registered);
  }
  if (!refused.ok()) {
    // Refused before it takes a rank: the group is not re-formed.
    refusal_ = std::string(refused.message());
    spdlog::error("{}", refusal_);
    return refused;
  }
  const auto free = std::find(members_.begin(), members_.end(), nullptr);
  if (free == members_.end()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", world_size(), " worker ranks are taken; retry to stand by"));
  }
  *free = member;
  spdlog::info(
      "worker {} registered from {} ({} of {} workers connected; {} "
      "threads, {})",
      member->Name(), peer, Connected(), world_size(), member->threads,
      member->info.device);
  return absl::OkStatus();
}

GroupRoster::Removed GroupRoster::Remove(
    const std::shared_ptr<GroupMember>& member) {
  const int slot = SlotOf(*member);
  if (slot < 0) return Removed::kNone;
  members_[slot] = nullptr;
  spdlog::warn("worker {} disconnected", NameOf(*member));
  const int rank = RankOf(*member);
  if (rank < 0) return Removed::kMember;
  if (said_ready_[rank]) {
    said_ready_[rank] = false;
    --ready_count_;
  }
  assigned_[rank] = false;
  ready_ = false;
  return Removed::kRank;
}

GroupRoster::Readiness GroupRoster::Ready(
    const std::shared_ptr<GroupMember>& member, uint64_t generation,
    const std::string& error) {
  const int rank = RankOf(*member);
  if (generation != generation_ || rank < 0) return Readiness::kIgnored;
  if (!error.empty()) {
    // Kept for the clients' UNAVAILABLE answers (GroupState::refusal):
    // without it they would only see "0 ready" while the group retries.
    refusal_ =
        absl::StrCat("worker ", NameOf(*member), " could not join generation ",
                     generation, ": ", error);
    spdlog::warn("{}", refusal_);
    return Readiness::kFailed;
  }
  if (said_ready_[rank]) return Readiness::kIgnored;
  said_ready_[rank] = true;
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
  // A member left out of it has no rank, no store token and no heartbeat
  // watch (it is already known to be stalled).
  ranks_.clear();
  for (int s : slots) ranks_.push_back(members_[s]);
  said_ready_.assign(ranks_.size(), false);
  assigned_.assign(ranks_.size(), true);
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
        StallError(NameOf(*ranks_[stall.index]), stall.silent, policy));
    spdlog::error("{}", stalled.back().message());
  }
  return stalled;
}

int GroupRoster::SlotOf(const GroupMember& member) const {
  return IndexOf(members_, member);
}

int GroupRoster::RankOf(const GroupMember& member) const {
  return IndexOf(ranks_, member);
}

std::string GroupRoster::NameOf(const GroupMember& member) const {
  const int rank = RankOf(member);
  return rank >= 0 ? absl::StrCat("rank ", rank, " ", member.Name())
                   : member.Name();
}

std::vector<std::optional<Clock::time_point>> GroupRoster::Watched() const {
  // Only a rank that was told the interval (in an assignment) is held to
  // it.
  std::vector<std::optional<Clock::time_point>> watched(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const auto& c = ranks_[r];
    if (c != nullptr && !c->stalled && assigned_[r]) watched[r] = LastSeen(*c);
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
      absl::StrAppend(&out, NotAnswering(NameOf(*c), now - LastSeen(*c)));
    }
  }
  return out;
}

GroupState GroupStateOf(const GroupRoster& roster,
                        std::chrono::steady_clock::time_point now) {
  GroupState s;
  s.world_size = roster.world_size();
  s.group_size = static_cast<int>(roster.ranks().size());
  s.connected = roster.Connected();
  s.ready_workers = roster.ready_workers();
  s.ready = roster.ready();
  s.generation = roster.generation();
  s.refusal = roster.ready() ? "" : roster.refusal();
  s.stalled = roster.Stalled(now);
  return s;
}

std::string NotReady(const GroupRoster& roster,
                     std::chrono::steady_clock::time_point now) {
  return NotReadyMessage(GroupStateOf(roster, now));
}

}  // namespace moe
