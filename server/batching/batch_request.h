// A request as the batcher holds it, and its share of a step's answer:
// plain structs (views into the request message, no protobuf).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/wire_matrix.h"
#include "engine/caller_overrides.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

struct BatchResult {
  // Holds this request's rows [n, H] as a view of the step's output, valid only
  // while `done` runs (the next step reuses the buffer).
  absl::Span<const float> y;
  Routing routing;  // this request's tokens
  // Holds the [n, E] gate logits (a view, like y) when the request asked for
  // them, else empty.
  absl::Span<const float> router_logits;
  // Holds the [n, H] shared experts' output (a view, like y) when the request
  // wanted it apart (SharedPart::kSeparate), else empty.
  absl::Span<const float> shared;
  StageTimes times;  // of the step the request rode in
  double queue_us = 0;
  int64_t batch_tokens = 0;
  int batch_requests = 0;
};

struct BatchRequest {
  int64_t layer = 0;
  // Holds the request's rows, viewed in the request message (which the caller
  // keeps until `done` has run); decoded straight into the step's buffer.
  WireMatrix x;
  DType output_dtype = DType::kF32;  // what the client asked for
  // Holds one token id per row, or nothing (viewed in the request message, like
  // x).
  absl::Span<const int64_t> token_ids;
  // Holds the caller's routing or logits, and the shared experts' part (views
  // into the request message, like x; checked by the RPC edge).
  RouteSource route_source = RouteSource::kGate;
  absl::Span<const int32_t> routing_experts;  // [rows * top_k], kRouting
  absl::Span<const float> routing_weights;    // [rows * top_k], kRouting
  WireMatrix router_logits;                   // [rows, E], kLogits
  bool return_router_logits = false;
  SharedPart shared = SharedPart::kAdd;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;  // the client's
  // The batcher calls it exactly once: on a batcher thread, or on the thread
  // closing the queue (Batcher::Shutdown) for a request still queued.
  std::function<void(const absl::Status&, BatchResult&)> done;
};

// Holds the requests of one step, in queue (FIFO) order.
using Batch = std::vector<std::unique_ptr<BatchRequest>>;

}  // namespace moe
