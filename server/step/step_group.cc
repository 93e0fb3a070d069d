#include "server/step/step_group.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moe {
namespace {
constexpr absl::string_view kPlacementChanged = "expert placement changed";
}  // namespace

absl::Status PlacementChangedError(uint64_t planned, uint64_t in_force) {
  return absl::AbortedError(absl::StrCat(kPlacementChanged,
                                         ": step planned for ", planned,
                                         ", in force ", in_force));
}

bool IsPlacementChanged(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StartsWith(status.message(), kPlacementChanged);
}

}  // namespace moe
