// The device side of the MoE layer, narrow enough that the expert-parallel
// step (engine/ep_step.h) is written once over it: a backend holds a shard
// of a model's weights (the router's gate and shared expert, some routed
// experts, or all of them), owns the step's buffers in its memory (host for
// the CPU, device for CUDA), and runs the step's device pieces in order on
// its own queue. Implementations: engine/cpu_backend.h,
// engine/cuda/cuda_backend.h.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/model_source.h"
#include "engine/ep_plan.h"
#include "engine/layer_weights.h"
#include "engine/token_router.h"

namespace moe {

// The step's buffers. Rows travel between them as `row_type()` elements of
// width H: send [sent], recv [arrived], out [received], back [home] (see
// EpPlan);
// stage_send / stage_recv are pinned host copies of send/recv (and out/back)
// for a host communicator over a device backend. send_packed [sent] and
// recv_packed [arrived] hold the rows as they cross the dispatch
// all-to-all when the plan's dispatch type is not the row type
// (DispatchRowBytes each).
enum class EpBuffer {
  kSend,
  kRecv,
  kOut,
  kBack,
  kStageSend,
  kStageRecv,
  kSendPacked,
  kRecvPacked,
  kOutPacked,
  kBackPacked
};
inline constexpr int kNumEpBuffers = 10;

// Whether a step's expert outputs go home as bf16: after a packed dispatch
// (bf16, FP8) on a backend computing in fp32, as DeepEP pairs its FP8
// dispatch with a BF16 combine. Half the bytes home; the weighted sum
// stays fp32 and in slot order over the rounded outputs.
bool PacksOutputs(DispatchDType dispatch, ElementType row_type);

// Bytes of one row of width `hidden` in the dispatch all-to-all.
int64_t DispatchRowBytes(DispatchDType dispatch, ElementType row_type,
                         int64_t hidden);
// The router flag's spelling: "row type", "bf16", "fp8".
const char* DispatchDTypeName(DispatchDType dispatch);

// Points of a step whose times the backend can tell apart afterwards.
// kGathered and kReturned split dispatch and combine into the local work
// (packing rows, the weighted sum) and the time in the all-to-all.
enum class EpMark {
  kStart,
  kGathered,
  kDispatched,
  kComputed,
  kReturned,
  kDone
};
inline constexpr int kNumEpMarks = 6;

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // What tells this device apart from every other on the host (a GPU's
  // UUID, "GPU-..."); empty for the CPU.
  virtual std::string device_identity() const { return ""; }
  // True when the step's buffers are device memory.
  virtual bool device_memory() const = 0;
  // Element type of the rows the step exchanges.
  virtual ElementType row_type() const = 0;

  // Loads what `options` selects of every MoE layer of `source` (replacing
  // what was loaded) and sizes every workspace for steps of up to
  // `max_tokens` tokens, so that steps allocate nothing.
  virtual absl::Status Load(const ModelSource& source,
                            const LoadOptions& options, int64_t max_tokens) = 0;
  // Another backend over the same loaded weights, with workspaces (and, on
  // a GPU, a stream) of its own: one per step in flight at once.
  virtual absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const = 0;
  virtual const MoeLayerConfig& config() const = 0;
  virtual int64_t max_tokens() const = 0;
  // True when `layer` is loaded.
  virtual bool HasLayer(int64_t layer) const = 0;
  // The layer's shard: its expert range and whether gate/shared are here.
  virtual absl::Status CheckLayer(int64_t layer, bool need_gate,
                                  bool need_shared,
                                  bool need_all_experts) const = 0;

  // Router pieces. Route keeps x [n, H] resident for the step and for
  // Shared, which writes the (gated) shared expert of those rows to host
  // `out` [n, H].
  virtual absl::Status Route(int64_t layer, const float* x, int64_t n,
                             absl::Span<const int64_t> segment_ends,
                             Routing* routing) = 0;
  virtual absl::Status Shared(int64_t layer, const float* x, int64_t n,
                              float* out) = 0;
  // Route with the rows' token ids, which a hash-routed layer
  // (config.hash_vocab > 0) routes by and every other layer ignores. The
  // default, for backends that refuse hash-routed layers at CheckLayer,
  // ignores them.
  virtual absl::Status RouteTokens(int64_t layer, const float* x, int64_t n,
                                   absl::Span<const int64_t> segment_ends,
                                   absl::Span<const int64_t> token_ids,
                                   Routing* routing) {
    return Route(layer, x, n, segment_ends, routing);
  }

  // Step pieces, run in this order by EpStep.
  // Makes every buffer of the planned step available (RESOURCE_EXHAUSTED
  // when the step exceeds workspaces sized at Load); buffer() pointers stay
  // valid until the next Prepare.
  virtual absl::Status Prepare(const EpPlan& plan) = 0;
  // Takes the rank's rows (`x_resident`: the rows last given to Route) and
  // the plan's index arrays, and gathers the rows to send into kSend,
  // scaled by their weight when the layer scales expert inputs.
  // `rows_stay`: no exchange follows (world size 1), so a backend may leave
  // the rows where they are and have RunExperts read kSend's rows in place.
  // Likewise, when the plan's dispatch is packed, a backend may leave kSend
  // unfilled and have PackRows read the rows where they are (in.rows).
  virtual absl::Status Gather(const EpStepInput& in, const EpPlan& plan,
                              bool x_resident, bool rows_stay) = 0;
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

  // Packed dispatch (plan.dispatch not the row type): the plan.sent rows
  // Gather prepared into `packed` (kSendPacked) as plan.dispatch rows, and
  // the plan.arrived rows of `packed` (kRecvPacked) back into `rows` (kRecv)
  // after the exchange. Backends that cannot refuse with
  // FAILED_PRECONDITION naming the router flag (the default), before the
  // step's first collective.
  virtual absl::Status PackRows(const EpStepInput& in, const EpPlan& plan,
                                void* packed);
  virtual absl::Status UnpackRows(const EpPlan& plan, const void* packed,
                                  void* rows);
  // Packed combine (PacksOutputs): the plan.received expert outputs of
  // `out` (kOut) as bf16 into `packed` (kOutPacked); the exchange brings
  // the plan.home rows into kBackPacked, which Combine then reads as bf16.
  // Backends whose rows are bf16 never pack (the default refuses, INTERNAL).
  virtual absl::Status PackOutputs(const EpPlan& plan, const void* out,
                                   void* packed);

  void* buffer(EpBuffer which) const {
    return buffers_[static_cast<int>(which)];
  }
  // Makes kStageSend and kStageRecv available (allocated on first use: only
  // a device backend under a host communicator needs them).
  virtual absl::Status ReserveStaging() { return absl::OkStatus(); }
  // Copies between this backend's memory and the pinned stage buffers.
  virtual absl::Status CopyToHost(const void* src, void* dst, size_t bytes) = 0;
  virtual absl::Status CopyFromHost(const void* src, void* dst,
                                    size_t bytes) = 0;
  // The queue device collectives enqueue on (a cudaStream_t), or null.
  virtual void* stream() = 0;
  virtual void Mark(EpMark mark) = 0;
  // Waits for the step's queued work: through `comm` (which can abort a
  // collective that misses `deadline`), then the backend's own queue.
  virtual absl::Status Finish(
      Communicator& comm, std::chrono::steady_clock::time_point deadline) = 0;
  // After a failed piece: waits for the work already queued, so that the
  // next step's buffers are not written behind its back; by `deadline`,
  // through `comm` (which aborts a collective still waiting then), never
  // on the queue alone.
  virtual void Drain(Communicator& comm,
                     std::chrono::steady_clock::time_point deadline) {}
  // Microseconds between two marks of the finished step.
  virtual double ElapsedUs(EpMark from, EpMark to) const = 0;

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
