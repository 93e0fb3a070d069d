// The host logic of a backend whose buffers are device memory: what each
// piece of the layer copies between host and device, in which element type,
// through which pinned staging, and when the host waits. The device's math
// is a handful of hooks (the CUDA backend's kernels, engine/cuda/
// cuda_backend.cc) and the device itself is a DeviceStepQueue, so the same
// code runs on the CPU against a counting queue and no-op math
// (tests/engine/copy_budget_test.cc), which makes the copy budget a tested
// property: per layer, x goes up once in the request's element type, the
// routing comes home as ids and weights, and y comes home once with the
// shared expert already summed into it on the device.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/device_step_queue.h"
#include "engine/expert_backend.h"
#include "engine/expert_frame.h"
#include "engine/token_router.h"

namespace moe {

// Where a queued routing leaves its answer in device memory: the top-k
// experts (int32) and weights (fp32) [n, k], or the gate's logits [n, E]
// (fp32) when the host routes (capacity limits, expert choice).
// What a device routing is asked: n resident rows, their token ids (one per
// row, host; a hash-routed layer routes by them), and whether the logits
// must come home even where the device could choose the slots itself (the
// caller sent logits to score instead, or wants the logits back).
struct DeviceRouteQuery {
  int64_t layer = 0;
  int64_t n = 0;
  absl::Span<const int64_t> token_ids;
  bool host_logits = false;
};

struct DeviceRouteAnswer {
  const void* idx = nullptr;
  const void* weights = nullptr;
  const void* logits = nullptr;
};

// Holds the plan's index arrays in device memory, each uploaded once per step.
struct DeviceStepIndices {
  int32_t* src_row = nullptr;   // [sent] row of x each sent row gathers
  float* scale = nullptr;       // [sent] its weight (score_before_experts)
  int32_t* grouped = nullptr;   // [received] (EpPlan::grouped)
  int32_t* out_row = nullptr;   // [received] (EpPlan::out_row)
  int32_t* slot_row = nullptr;  // [tokens * slots] (EpPlan::slot_row)
  float* weights = nullptr;     // [tokens * slots] the routing weights
};

// What a device backend's kernels compute of `config`, in two parts, so
// that Load refuses a model before anything is uploaded (a layer is never
// served with part of its math missing), with UNIMPLEMENTED naming the
// option:
//  - the routed experts (all a worker holds, LoadOptions without gate or
//    shared expert): gated and non-gated (relu2) experts at the experts'
//    width config.expert_width() (LatentMoE's latent width included), with
//    the activations of kernels/act_rule.h, shared with the CPU;
//  - the router part (gate, shared expert, the experts' frame): the experts'
//    frame (LatentMoE's latent projections, Gemma 4's branch norms) runs on
//    the host with the CPU's code (DeviceBackend::EnterExperts), and so do
//    Gemma 4's routing (router pre-norm, per-expert scale: the CPU's
//    TokenRouter) and its shared expert's norms around the device's shared
//    expert; a shared-expert gate under branch norms is refused (the device
//    would gate before the post-norm), so such a model is routed on a CPU
//    router, whose CUDA workers can run its experts.
absl::Status CheckDeviceExpertMath(const MoeLayerConfig& config,
                                   absl::string_view backend);
absl::Status CheckDeviceRouterMath(const MoeLayerConfig& config,
                                   absl::string_view backend);
// Both parts, the router's only when `router_part` (a backend loaded with the
// gate or the shared expert).
absl::Status CheckDeviceLayerMath(const MoeLayerConfig& config,
                                  absl::string_view backend, bool router_part);

// Whether a device backend's router part routes `config` on the host, with
// the CPU's TokenRouter: the device's routing has no router pre-norm or
// per-expert scale (Gemma 4), no sparsemixer (PhiMoE), no router soft-cap
// (Grok-1) and no zero experts (LongCat-Flash).
bool RoutesOnHost(const MoeLayerConfig& config);
// Whether the router part keeps host copies of the layer's router tensors
// (LoadHostParts): routed on the host, an expert frame, or an output bias
// (added on the host after y comes home, like the zero experts' w * x and
// output_scale, LocalMoe and the router's step).
bool NeedsHostParts(const MoeLayerConfig& config);

class DeviceBackend : public ExpertBackend {
 public:
  bool device_memory() const override { return true; }
  ElementType row_type() const override { return ElementType::kBF16; }
  const MoeLayerConfig& config() const override { return config_; }
  int64_t max_tokens() const override { return max_tokens_; }
  StepQueue& queue() override { return device_queue(); }

  // Uploads x once (fp32, through pinned staging), queues the routing and
  // brings home only its answer: one wait. A layer with a router pre-norm or
  // per-expert scales (Gemma 4) is routed on the host instead, by the CPU's
  // TokenRouter over host copies of the gate (LoadHostParts), with the CPU's
  // bits and no wait; x then goes up only where the step reads it (no
  // expert frame).
  absl::Status Route(int64_t layer, const float* x, int64_t n,
                     absl::Span<const int64_t> segment_ends,
                     Routing* routing) override;
  absl::Status RouteTokens(int64_t layer, const float* x, const RouteRows& rows,
                           Routing* routing) override;
  // bf16 rows go up as bf16 (half the bytes) and are widened on the device;
  // not for a layer with an expert frame, which the host computes from fp32
  // rows (false: the caller widens them).
  absl::StatusOr<bool> RouteTokensBf16(int64_t layer, const uint16_t* x,
                                       const RouteRows& rows,
                                       Routing* routing) override;
  // For a caller that adds the shared expert itself (a router whose experts
  // run on workers): downloads it and waits. Under branch norms (Gemma 4)
  // the rows are pre-normed on the host before they go up and the output
  // post-normed after it comes home, with the CPU's RmsNormRows.
  absl::Status Shared(int64_t layer, const float* x, int64_t n,
                      float* out) override;
  // False under branch norms: the host norms the shared expert (Shared).
  absl::StatusOr<bool> AddSharedToStep(int64_t layer) override;
  absl::Status Prepare(const EpPlan& plan) override;
  absl::Status Gather(const EpStepInput& in, const EpPlan& plan,
                      bool x_resident, const RowTransport& transport) override;
  absl::Status Combine(const EpStepInput& in, const EpPlan& plan,
                       const void* back, float* y) override;
  absl::Status ReserveStaging() override;
  // The experts' frame on the host, the CPU's code (engine/expert_frame.h)
  // over host copies of the frame's tensors (LoadHostParts): LatentMoE's
  // projections are GEMVs of a router's rows, and the step's rows cross to
  // the device at the latent width either way.
  absl::StatusOr<const float*> EnterExperts(int64_t layer, const float* x,
                                            int64_t n) override;
  // The host copy's (LoadHostParts).
  const float* OutputBias(int64_t layer) const override;
  absl::Status LeaveExperts(int64_t layer, float* s, int64_t n,
                            float* y) override;

 protected:
  virtual DeviceStepQueue& device_queue() = 0;

  // The device's math, each queued on device_queue() and copying nothing
  // between host and device.
  // Checks that the layer's shared expert is loaded.
  virtual absl::Status CheckShared(int64_t layer) = 0;
  // Queues the routing of the query's resident rows (device_x()); says
  // where the answer will be: logits whenever query.host_logits.
  virtual absl::Status QueueRoute(const DeviceRouteQuery& query,
                                  DeviceRouteAnswer* answer) = 0;
  // Runs the host's routing on downloaded logits [n, E], with the caller's
  // overrides (may be null: TokenRouter::RouteLogits).
  virtual absl::Status RouteLogits(int64_t layer, const float* logits,
                                   const RouteRows& rows, Routing* routing) = 0;
  // Queues out [n, H] (device fp32) = the gated shared expert of the n resident
  // rows.
  virtual absl::Status QueueShared(int64_t layer, int64_t n, float* out) = 0;
  // Queues dst [count] (device fp32) = the bf16 values of src [count] (device).
  virtual absl::Status QueueWiden(const uint16_t* src, int64_t count,
                                  float* dst) = 0;
  // Queues y [rows, H] += add [rows, H] (device fp32).
  virtual absl::Status QueueAdd(float* y, const float* add, int64_t rows) = 0;
  // Makes the step's row buffers (kSend, kRecv, kOut, kBack) ready for `plan`.
  virtual absl::Status PrepareStep(const EpPlan& plan) = 0;
  // Queues kSend = the bf16 rows of the step's input (device_x(), width
  // config_.expert_width()) that device_indices().src_row names, scaled by
  // .scale when `scaled`.
  virtual absl::Status QueueGather(const EpPlan& plan, bool scaled) = 0;
  // Queues y [tokens, expert_width] (device fp32) = the weighted sum in slot
  // order of `back`.
  virtual absl::Status QueueCombine(const EpPlan& plan, const void* back,
                                    float* y) = 0;

  // Sizes the host logic's buffers for config_ and max_tokens_ (and sets
  // bounds_), at load: the routing's staging only `with_gate`, the shared
  // expert's output only with the gate and a shared expert.
  absl::Status ReserveIo(bool with_gate);
  // Loads the host copies of the router part's tensors that the host
  // computes with, at load, for a backend loaded with the router's gate, of
  // every layer of `source` with an expert frame or routed on the host
  // (router pre-norm, per-expert scale): LoadLayerWeights' router part in
  // `options`' dtype, without experts (the gate's host copy with it, E x H
  // fp32), and under branch norms the shared expert's two norm weights.
  absl::Status LoadHostParts(const ModelSource& source,
                             const LoadOptions& options);
  // Takes the host logic's whole state (config, bounds, I/O buffers, host
  // parts) of `from`, a backend freshly loaded on the same device, giving it
  // this one's: how a Load keeps the old state serving until the new one
  // loaded whole (engine/device_load.h).
  void AdoptHostLogic(DeviceBackend& from);
  // A fork shares the host parts (immutable once loaded).
  void ShareHostParts(const DeviceBackend& from) {
    host_parts_ = from.host_parts_;
    host_threads_ = from.host_threads_;
  }

  const float* device_x() const { return static_cast<float*>(x_dev_.get()); }
  const DeviceStepIndices& device_indices() const { return indices_; }

  MoeLayerConfig config_;
  int64_t max_tokens_ = 0;
  EpBounds bounds_;
  // Set by Gather: the dispatched rows are the grouped rows already; the
  // grouped outputs are in their rows of the way back already.
  bool grouped_identity_ = false, out_identity_ = false;

 private:
  // x [n, width] (host fp32: the layer's rows, width H, or the step's,
  // width expert_width()) into device_x(), through pinned staging (no copy
  // into it when x is the staging itself, which the caller wrote after
  // FreeXStaging).
  absl::Status UploadX(const float* x, int64_t n, int64_t width);
  // Makes the pinned staging of x safe for the host to write: an upload
  // queued from it since the queue's last wait may not have read it yet
  // (a host-routed layer's x goes up without a wait, and a shared expert
  // over a sub-range of its rows may follow before the step's end), so the
  // host then waits for it first. Most sequences wait in between anyway
  // (Route, Shared, the step's Finish or Drain) and pay nothing.
  absl::Status FreeXStaging();
  // Does the same for bf16 rows, uploaded as bf16 and widened on the device.
  absl::Status UploadBf16X(const uint16_t* x, int64_t n);
  // Routes the rows.n resident rows: it queues the routing and brings its
  // answer home, with one wait.
  absl::Status RouteResident(int64_t layer, const RouteRows& rows,
                             Routing* routing);
  // Allocates `bytes` of `where` into *block (none for 0 bytes).
  absl::Status Reserve(DeviceStepQueue::Memory where, size_t bytes,
                       DeviceStepQueue::Block* block);

  using Block = DeviceStepQueue::Block;
  Block x_dev_, x16_dev_, x_pin_, y_dev_, y_pin_, shared_dev_, route_pin_;
  Block index_dev_, index_pin_, stage_send_, stage_recv_;
  DeviceStepIndices indices_;
  const void* resident_x_ = nullptr;  // host rows last uploaded
  int64_t resident_n_ = -1;
  // The queue's wait count (DeviceStepQueue::waits) when an upload from x's
  // pinned staging was last queued, or -1: the staging is busy while it is
  // unchanged.
  int64_t x_pin_queued_at_ = -1;
  // Holds the layer whose shared expert the next Combine adds, or -1.
  int64_t shared_layer_ = -1;
  using HostParts = std::map<int64_t, std::shared_ptr<const LayerWeights>>;
  std::shared_ptr<const HostParts> host_parts_ = std::make_shared<HostParts>();
  ExpertFrame frame_;
  TokenRouter host_router_;
  int host_threads_ = 1;
  absl::StatusOr<const LayerWeights*> FindHostPart(int64_t layer) const;
  // Routes x [rows.n, H] with the CPU's TokenRouter (a layer that
  // RoutesOnHost) and uploads x where the step reads it.
  absl::Status RouteOnHost(int64_t layer, const float* x, const RouteRows& rows,
                           Routing* routing);
};

}  // namespace moe
