// How a backend packs rows for a packed transport (engine/row_transport.h):
// the dispatch's rows as bf16 or FP8 and back, the expert outputs as bf16.
// A small table of its own, apart from the experts' math: a backend without
// one (ExpertBackend::row_codec() null) moves rows only in its row type, and
// a step that would pack is refused at plan time, before anything is queued.
#pragma once

#include "absl/status/status.h"
#include "engine/ep_plan.h"

namespace moe {

class RowCodec {
 public:
  virtual ~RowCodec() = default;
  // The plan.sent rows to send as plan.dispatch rows (DispatchRowBytes
  // each) into `packed`: row j of `gathered` (kSend), or x's row
  // plan.src_row[j] (in.rows) where the backend's Gather left them there.
  virtual absl::Status PackRows(const EpStepInput& in, const EpPlan& plan,
                                const void* gathered, void* packed) = 0;
  // Unpacks the plan.arrived rows of `packed` back into row type `rows`.
  virtual absl::Status UnpackRows(const EpPlan& plan, const void* packed,
                                  void* rows) = 0;
  // Packs the plan.received expert outputs of `out` as bf16 into `packed`.
  virtual absl::Status PackOutputs(const EpPlan& plan, const void* out,
                                   void* packed) = 0;
};

}  // namespace moe
