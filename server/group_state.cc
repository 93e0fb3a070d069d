#include "server/group_state.h"

#include "absl/strings/str_cat.h"

namespace moe {

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
  const GroupState st = GroupStateOf(roster, now);
  return absl::StrCat("worker group not ready: ", st.connected, " of ",
                      st.world_size, " workers connected, ", st.ready_workers,
                      " ready", st.stalled,
                      st.refusal.empty() ? "" : "; last refused: ", st.refusal);
}

}  // namespace moe
