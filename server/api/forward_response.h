// A Forward answer built from a request's share of a step (BatchResult):
// the output rows in the asked dtype, and the routing and stage times when
// the request asked for them. Part of the MoeService RPC handler.
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "moe/v1/moe.pb.h"
#include "server/batching/batch_request.h"

namespace moe {

// Holds what the answer carries beyond the output rows, as the request asked
// (return_routing, return_timing): all that the answer needs of the request, so
// the request need not travel with it.
struct ResponseParts {
  bool routing = false;
  bool timing = false;
  // Set when the request asked for router_logits (return_router_logits): the
  // response carries them as [n, experts] in f32.
  bool router_logits = false;
  int64_t experts = 0;
  // Set when the request asked for the shared experts apart (SHARED_SEPARATE):
  // the response carries shared_output [n, hidden] in the output dtype.
  bool shared_output = false;
};

// Fills `response` (output [n, hidden] in `out_dtype`, and the parts asked
// for; the timing's total runs from `arrival` to now), or returns
// OUT_OF_RANGE naming the first row of output (or shared_output) that is
// not finite and fills nothing:
// finite inputs can still overflow (hidden states near the float limit),
// and an answer is never OK with a non-finite output.
absl::Status FillForwardResponse(ResponseParts parts, DType out_dtype,
                                 int64_t hidden, const BatchResult& result,
                                 std::chrono::steady_clock::time_point arrival,
                                 moe::v1::ForwardResponse* response);

}  // namespace moe
