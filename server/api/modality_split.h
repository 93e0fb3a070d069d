// ERNIE-4.5-VL's modality-isolated experts at the RPC edge: a request to a
// layer with a text and a vision expert set whose rows are of both types (or
// only vision) becomes one batch request per type, the text rows to the
// layer and the vision rows to its vision layer (ModelInfo::vision_layers),
// and their answers are joined row by row before the request's `done` sees
// them. Each part rides the batcher like any request, so the two expert sets
// batch with other requests to the same layer. Part of the MoeService RPC
// handler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/batching/batch_request.h"

namespace moe {

// `request` holds everything of the whole request (its rows x, its output
// dtype, what it asked back, its `done`) but caller routing, which a split
// request does not take. Rows whose token_types entry is 0 go to
// request->layer, the others to `vision_layer`. The joined answer reports a
// vision row's experts as `experts` + e, the release's numbering of the
// vision experts; its stage times are those of the part with more rows.
// Each part goes to `submit`; an error from it fails the whole request once
// every submitted part has answered.
absl::Status SubmitByModality(
    std::unique_ptr<BatchRequest> request,
    absl::Span<const int32_t> token_types, int64_t vision_layer,
    int64_t experts,
    const std::function<absl::Status(std::unique_ptr<BatchRequest>)>& submit);

}  // namespace moe
