#include "engine/caller_overrides.h"

#include <algorithm>

namespace moe {

bool AnyCallerRoute(const CallerOverrides* caller) {
  return caller != nullptr &&
         std::any_of(caller->route.begin(), caller->route.end(),
                     [](RouteSource s) { return s != RouteSource::kGate; });
}

bool SharedApart(const CallerOverrides* caller) {
  return caller != nullptr &&
         std::any_of(caller->shared.begin(), caller->shared.end(),
                     [](SharedPart s) { return s != SharedPart::kAdd; });
}

bool NeedsShared(const CallerOverrides* caller) {
  return caller == nullptr || caller->shared.empty() ||
         std::any_of(caller->shared.begin(), caller->shared.end(),
                     [](SharedPart s) { return s != SharedPart::kSkip; });
}

void PlaceShared(const SharedRows& rows, int64_t n, int64_t hidden,
                 const float* shared, float* y, float* separate) {
  std::fill(separate, separate + n * hidden, 0.0f);
  if (shared == nullptr) return;
  const CallerOverrides& caller = *rows.caller;
  absl::Span<const int64_t> ends = rows.segment_ends;
  const int64_t whole[] = {n};
  if (ends.empty()) ends = whole;
  int64_t begin = 0;
  for (size_t s = 0; s < ends.size(); ++s) {
    const SharedPart part =
        caller.shared.empty() ? SharedPart::kAdd : caller.shared[s];
    const int64_t from = begin * hidden, to = ends[s] * hidden;
    if (part == SharedPart::kAdd) {
      for (int64_t i = from; i < to; ++i) y[i] += shared[i];
    } else if (part == SharedPart::kSeparate) {
      std::copy(shared + from, shared + to, separate + from);
    }
    begin = ends[s];
  }
}

}  // namespace moe
