// What the requests of a step ask of it beyond "route x with the layer's
// gate and add the shared experts": per request (a segment of the step's
// rows, TokenRouter's segment_ends), routing or gate logits from the caller,
// the logits kept for the answer, and what happens to the shared experts.
// Plain views: whoever stages the step owns the buffers.
#pragma once

#include <cstdint>

#include "absl/types/span.h"

namespace moe {

// Says where a segment's routing comes from.
enum class RouteSource : uint8_t {
  kGate,     // the layer's gate: x·Wᵀ, then the layer's scoring
  kLogits,   // the caller's gate logits, then the layer's scoring
  kRouting,  // the caller's ids and final weights, taken as they are
};

// Says what a segment's answer does with the shared experts' output.
enum class SharedPart : uint8_t {
  kAdd,       // y = routed + shared (the layer's y)
  kSeparate,  // y = routed; the shared output is answered apart
  kSkip,      // y = routed; the shared experts are not computed
};

struct CallerOverrides {
  // Holds one source per segment; empty means every segment is routed by the
  // gate.
  absl::Span<const RouteSource> route;
  // [n, E + Z] fp32 (Z zero experts): the rows of kLogits segments (other
  // rows are not read).
  // They replace the gate linear's output, router bias included.
  const float* logits = nullptr;
  // [n, top_k]: the rows of kRouting segments, distinct ids in [0, E + Z) and
  // finite final weights (checked where the request came in).
  const int32_t* expert = nullptr;
  const float* weight = nullptr;
  // Asks the router to keep the gate logits of every row in Routing::logits.
  bool keep_logits = false;
  // Holds one part per segment; empty means every segment adds the shared
  // experts.
  absl::Span<const SharedPart> shared;
};

// Returns whether any segment of `caller` (may be null) sends logits or
// routing.
bool AnyCallerRoute(const CallerOverrides* caller);
// Whether any segment of `caller` (may be null) wants other than kAdd: the
// step then puts the shared experts' output in place itself (PlaceShared)
// instead of on the path a step of kAdd requests only takes.
bool SharedApart(const CallerOverrides* caller);
// Returns whether any segment needs the shared experts computed.
bool NeedsShared(const CallerOverrides* caller);

// Which rows of a step want the shared experts: those of the segments
// (segment_ends, as for TokenRouter::Route) whose SharedPart in `caller` is
// not kSkip.
struct SharedRows {
  absl::Span<const int64_t> segment_ends;
  const CallerOverrides* caller = nullptr;
  // x names rows resident on the backend, not host rows, and a resident
  // run cannot be offset from the host: the shared experts then run over
  // all of them.
  bool resident = false;
};

// Puts the shared experts' output `shared` [n, hidden] (null: the layer has
// none, or no segment needed it) in place, segment by segment of `rows`
// (rows.caller must not be null): added to y for kAdd, copied to
// `separate` [n, hidden] for kSeparate; `separate`'s other rows are zeros.
void PlaceShared(const SharedRows& rows, int64_t n, int64_t hidden,
                 const float* shared, float* y, float* separate);

}  // namespace moe
