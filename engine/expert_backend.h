// The device side of the MoE layer, narrow enough that the expert-parallel
// step (engine/ep_step.h) is written once over it: a backend holds a shard
// of a model's weights (the router's gate and shared expert, some routed
// experts, or all of them), owns the step's buffers in its memory (host for
// the CPU, device for CUDA), and computes the step's pieces. How rows travel
// between the pieces is the step's RowTransport (engine/row_transport.h),
// packed by the backend's RowCodec (engine/row_codec.h); the pieces run and
// are waited for on the backend's StepQueue (engine/step_queue.h).
// Implementations: engine/cpu_backend.h, engine/cuda/cuda_backend.h.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/model_source.h"
#include "engine/ep_plan.h"
#include "engine/layer_shard.h"
#include "engine/layer_weights.h"
#include "engine/route_rows.h"
#include "engine/row_codec.h"
#include "engine/row_transport.h"
#include "engine/step_queue.h"
#include "engine/token_router.h"

namespace moe {

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;

  // Identity.
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // What tells this device apart from every other on the host (a GPU's
  // UUID, "GPU-..."); empty for the CPU.
  virtual std::string device_identity() const { return ""; }
  // True when the step's buffers are device memory.
  virtual bool device_memory() const = 0;
  // Element type of the rows the step exchanges.
  virtual ElementType row_type() const = 0;

  // Weights. Load loads what `options` selects of every MoE layer of
  // `source` (replacing what was loaded) and sizes every workspace for
  // steps of up to `max_tokens` tokens, so that steps allocate nothing.
  virtual absl::Status Load(const ModelSource& source,
                            const LoadOptions& options, int64_t max_tokens) = 0;
  // Another backend over the same loaded weights, with workspaces (and, on
  // a GPU, a queue) of its own: one per step in flight at once.
  virtual absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const = 0;
  virtual const MoeLayerConfig& config() const = 0;
  virtual int64_t max_tokens() const = 0;
  // What is loaded of `layer`; NOT_FOUND naming the layer when nothing is.
  virtual absl::StatusOr<LayerShard> Shard(int64_t layer) const = 0;
  // True when `layer` is loaded.
  virtual bool HasLayer(int64_t layer) const { return Shard(layer).ok(); }
  // The layer's shard against what the caller needs (engine/layer_shard.h),
  // the same check for every backend.
  absl::Status CheckLayer(int64_t layer, bool need_gate, bool need_shared,
                          bool need_all_experts) const;

  // Router pieces. Route keeps x [n, H] resident for the step and for
  // Shared, which writes the (gated) shared expert of those rows to host
  // `out` [n, H].
  virtual absl::Status Route(int64_t layer, const float* x, int64_t n,
                             absl::Span<const int64_t> segment_ends,
                             Routing* routing) = 0;
  virtual absl::Status Shared(int64_t layer, const float* x, int64_t n,
                              float* out) = 0;
  // Has the next Combine add the layer's (gated) shared expert of the rows
  // last given to Route into y, on the device, so that y comes home once
  // with both; true when the backend does so. False (the default, and the
  // CPU's): the caller adds Shared's output itself.
  virtual absl::StatusOr<bool> AddSharedToStep(int64_t /*layer*/) {
    return false;
  }
  // The routed experts' frame (engine/expert_frame.h), for a layer whose
  // config.has_expert_frame(): EnterExperts gives the rows [n,
  // expert_width] the experts read for host rows x [n, H] (host memory,
  // valid until the next call), LeaveExperts turns their weighted sum s
  // [n, expert_width] (host, overwritten) into the routed output y [n, H].
  // The default refuses: a backend that cannot compute a frame refuses such
  // a layer at Load.
  virtual absl::StatusOr<const float*> EnterExperts(int64_t layer,
                                                    const float* x, int64_t n);
  virtual absl::Status LeaveExperts(int64_t layer, float* s, int64_t n,
                                    float* y);
  // The layer's output bias [H] (config.output_bias), host fp32, which the
  // router adds to y once per token after everything else; null when this
  // backend holds none of the layer (no gate loaded, or no such bias).
  virtual const float* OutputBias(int64_t /*layer*/) const { return nullptr; }
  // Route with the rows' token ids, which a hash-routed layer
  // (config.hash_vocab > 0) routes by and every other layer ignores. The
  // default, for backends that refuse hash-routed layers at load, ignores
  // them.
  // `caller` (may be null): the segments routed from the caller's logits
  // or routing, and whether to keep the logits (TokenRouter::Route).
  virtual absl::Status RouteTokens(int64_t layer, const float* x,
                                   const RouteRows& rows, Routing* routing) {
    const CallerOverrides* caller = rows.caller;
    if (AnyCallerRoute(caller) || (caller != nullptr && caller->keep_logits)) {
      return absl::UnimplementedError(
          "this backend routes with its own gate only");
    }
    return Route(layer, x, rows.n, rows.segment_ends, routing);
  }
  // RouteTokens of bf16 rows x [n, H], the request's own elements: true
  // when the backend took them as they are (a device backend uploads n x H
  // x 2 bytes and widens them on the device), after which the step and
  // AddSharedToStep name the resident rows by `x`; false (the default)
  // when it wants fp32 rows, which the caller widens and routes instead.
  virtual absl::StatusOr<bool> RouteTokensBf16(int64_t /*layer*/,
                                               const uint16_t* /*x*/,
                                               const RouteRows& /*rows*/,
                                               Routing* /*routing*/) {
    return false;
  }

  // Step pieces, run in this order by EpStep on queue(); between Gather and
  // RunExperts, and between RunExperts and Combine, the rows travel as the
  // step's RowTransport says (engine/row_transport.h).
  // Makes every buffer of the planned step available (RESOURCE_EXHAUSTED
  // when the step exceeds workspaces sized at Load); buffer() pointers stay
  // valid until the next Prepare.
  virtual absl::Status Prepare(const EpPlan& plan) = 0;
  // Takes the rank's rows (`x_resident`: the rows last given to Route) and
  // the plan's index arrays, and gathers the rows to send into kSend,
  // scaled by their weight when the layer scales expert inputs. Where
  // `transport.rows_in_place`, a backend may leave the rows where they are
  // and have RunExperts read kSend's rows in place; where the transport
  // packs them, it may leave kSend unfilled and have its RowCodec read the
  // rows where they are (in.rows).
  virtual absl::Status Gather(const EpStepInput& in, const EpPlan& plan,
                              bool x_resident,
                              const RowTransport& transport) = 0;
  // Grouped SwiGLU: grouped row i reads row plan.grouped[i] of `in`
  // (plan.arrived rows) and writes row plan.out_row[i] of `out`
  // (plan.received rows).
  virtual absl::Status RunExperts(int64_t layer, const EpPlan& plan,
                                  const void* in, void* out) = 0;
  // y [tokens, H] (host fp32) = the weighted sum in slot order of the rows
  // that came back: `back` holds them in the row type, or as bf16 where
  // PacksOutputs(plan.dispatch, row_type()).
  virtual absl::Status Combine(const EpStepInput& in, const EpPlan& plan,
                               const void* back, float* y) = 0;

  // How this backend packs rows for a packed transport, or null: it moves
  // rows only in its row type, and a step that would pack is refused before
  // anything is queued.
  virtual RowCodec* row_codec() { return nullptr; }
  // The queue the step's pieces run on (engine/step_queue.h).
  virtual StepQueue& queue() = 0;

  // Buffers.
  void* buffer(EpBuffer which) const {
    return buffers_[static_cast<int>(which)];
  }
  // Makes kStageSend and kStageRecv available (allocated on first use: only
  // a device backend under a host communicator needs them).
  virtual absl::Status ReserveStaging() { return absl::OkStatus(); }

 protected:
  // Where each EpBuffer lives now; implementations keep it current.
  void SetBuffer(EpBuffer which, void* data) {
    buffers_[static_cast<int>(which)] = data;
  }

 private:
  std::array<void*, kNumEpBuffers> buffers_{};
};

// "cpu" (threads for OpenMP) or "cuda[:N]" (builds with the CUDA backend).
absl::StatusOr<std::unique_ptr<ExpertBackend>> CreateExpertBackend(
    const std::string& device, int threads);

}  // namespace moe
