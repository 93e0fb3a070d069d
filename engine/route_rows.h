// The rows of a step as routing sees them, besides their values: how many
// there are, where each request ends, the token ids a hash-routed layer
// routes by, and what the callers asked of the routing. Every routing entry
// point (TokenRouter, the backends, LocalMoe) takes them as one value, so
// that what routing reads is written in one place. Plain views, like
// CallerOverrides: whoever stages the step owns the buffers.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/caller_overrides.h"

namespace moe {

struct RouteRows {
  int64_t n = 0;
  // Ascending ends of the step's requests (the last is n), each an
  // independent request for capacity and expert choice; empty means one.
  absl::Span<const int64_t> segment_ends;
  // One per row, or empty: only a hash-routed layer reads them.
  absl::Span<const int64_t> token_ids;
  // May be null: every request is routed by the gate and no logits are
  // kept.
  const CallerOverrides* caller = nullptr;
};

}  // namespace moe
