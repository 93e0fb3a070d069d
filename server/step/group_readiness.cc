#include "server/step/group_readiness.h"

#include "absl/strings/str_cat.h"

namespace moe {

std::string NotReadyMessage(const GroupState& st) {
  return absl::StrCat("worker group not ready: ", st.connected, " of ",
                      st.world_size, " workers connected, ", st.ready_workers,
                      " ready", st.stalled,
                      st.refusal.empty() ? "" : "; last refused: ", st.refusal);
}

}  // namespace moe
