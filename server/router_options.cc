#include "server/router_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cli_args.h"
#include "core/device_spec.h"
#include "core/status_macros.h"
#include "server/router_address_checks.h"

namespace moe {
namespace {

absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return BadFlag(flag, absl::StrCat(">= ", min), absl::StrCat(value));
}

absl::StatusOr<ModelLocation> LocationOf(const RouterFlags& f) {
  ModelLocation loc;
  if (!f.model.empty()) {  // wins over --synthetic
    loc.checkpoint_dir = f.model;
    return loc;
  }
  if (!f.synthetic) {
    return absl::InvalidArgumentError("give --model DIR or --synthetic");
  }
  MOE_ASSIGN_OR_RETURN(loc.synthetic, MakeSyntheticSpec(f.synthetic_args));
  return loc;
}

// Checks the workers and where experts go on them.
absl::Status CheckPlacementSizes(const RouterFlags& f) {
  if (f.num_workers < 0 || f.num_workers > 1024) {
    return BadFlag("num-workers", "between 0 and 1024",
                   absl::StrCat(f.num_workers));
  }
  if (f.redundant_experts < 0 ||
      (f.num_workers > 0 && f.redundant_experts % f.num_workers != 0)) {
    return BadFlag(
        "redundant-experts",
        absl::StrCat("a multiple of --num-workers ", f.num_workers, ", >= 0"),
        absl::StrCat(f.redundant_experts));
  }
  if (f.num_workers == 0 &&
      (f.redundant_experts > 0 || !f.expert_placement.empty() ||
       !f.expert_load.empty())) {
    return absl::InvalidArgumentError(
        "--redundant-experts, --expert-load and --expert-placement place "
        "experts on workers: they need --num-workers > 0");
  }
  if (f.rebalance_every_steps < 0) {
    return BadFlag("rebalance-every-steps", ">= 0 (0: only on request)",
                   absl::StrCat(f.rebalance_every_steps));
  }
  if (f.num_workers == 0 && f.rebalance_every_steps > 0) {
    return absl::InvalidArgumentError(
        "--rebalance-every-steps places experts on workers: it needs "
        "--num-workers > 0");
  }
  if (!f.expert_placement.empty() && !f.expert_load.empty()) {
    return absl::InvalidArgumentError(
        "--expert-placement pins the placement; --expert-load computes one: "
        "give one of them");
  }
  return absl::OkStatus();
}

// Checks the step deadlines, heartbeats and regrouping.
absl::Status CheckLivenessSizes(const RouterFlags& f) {
  MOE_RETURN_IF_ERROR(AtLeast("step-timeout-ms", f.step_timeout_ms, 1));
  if (f.heartbeat_interval_ms < 10 || f.heartbeat_interval_ms > 60000) {
    return BadFlag("heartbeat-interval-ms", "between 10 and 60000",
                   absl::StrCat(f.heartbeat_interval_ms));
  }
  if (f.heartbeat_misses < 2 || f.heartbeat_misses > 1000) {
    return BadFlag("heartbeat-misses", "between 2 and 1000",
                   absl::StrCat(f.heartbeat_misses));
  }
  if (f.regroup_after_ms < 0 || f.regroup_after_ms > 3600000) {
    return BadFlag("regroup-after-ms", "between 0 and 3600000",
                   absl::StrCat(f.regroup_after_ms));
  }
  if (f.hold_while_regrouping_ms < 0 || f.hold_while_regrouping_ms > 600000) {
    return BadFlag("hold-while-regrouping-ms", "between 0 and 600000",
                   absl::StrCat(f.hold_while_regrouping_ms));
  }
  return absl::OkStatus();
}

// Checks the batches, requests and the queue in front of them.
absl::Status CheckBatchSizes(const RouterFlags& f) {
  MOE_RETURN_IF_ERROR(AtLeast("max-batch-tokens", f.max_batch_tokens, 1));
  if (f.max_request_tokens < 0 || f.max_request_tokens > f.max_batch_tokens) {
    return BadFlag("max-request-tokens",
                   absl::StrCat("between 0 (--max-batch-tokens) and "
                                "--max-batch-tokens ",
                                f.max_batch_tokens),
                   absl::StrCat(f.max_request_tokens));
  }
  MOE_RETURN_IF_ERROR(AtLeast("batch-window-us", f.batch_window_us, 0));
  MOE_RETURN_IF_ERROR(AtLeast("max-inflight-steps", f.max_inflight_steps, 1));
  const int64_t request_tokens =
      f.max_request_tokens > 0 ? f.max_request_tokens : f.max_batch_tokens;
  if (f.max_queue_tokens != 0 && f.max_queue_tokens < request_tokens) {
    return BadFlag("max-queue-tokens",
                   absl::StrCat("0 ((--max-inflight-steps + 2) x "
                                "--max-batch-tokens) or at least the "
                                "largest request, ",
                                request_tokens),
                   absl::StrCat(f.max_queue_tokens));
  }
  MOE_RETURN_IF_ERROR(AtLeast("max-stream-inflight", f.max_stream_inflight, 1));
  return absl::OkStatus();
}

absl::Status CheckSizes(const RouterFlags& f) {
  MOE_RETURN_IF_ERROR(CheckPlacementSizes(f));
  MOE_RETURN_IF_ERROR(CheckLivenessSizes(f));
  MOE_RETURN_IF_ERROR(CheckBatchSizes(f));
  if (f.dispatch_dtype != "auto" && f.dispatch_dtype != "f32" &&
      f.dispatch_dtype != "bf16" && f.dispatch_dtype != "fp8") {
    return BadFlag("dispatch-dtype", "auto, f32, bf16 or fp8",
                   absl::StrCat("'", f.dispatch_dtype, "'"));
  }
  MOE_RETURN_IF_ERROR(AtLeast("direct-step-tokens", f.direct_step_tokens, 0));
  MOE_RETURN_IF_ERROR(AtLeast("threads", f.threads, 0));
  MOE_RETURN_IF_ERROR(
      AtLeast("max-concurrent-streams", f.max_concurrent_streams, 1));
  return AtLeast("max-message-bytes", f.max_message_bytes, 0);
}

}  // namespace

absl::StatusOr<RouterOptions> RouterOptions::FromFlags(const RouterFlags& f) {
  RouterOptions o;
  MOE_ASSIGN_OR_RETURN(o.location, LocationOf(f));
  auto dtype = ParseWeightDType(f.weight_dtype);
  if (!dtype.ok()) {
    return BadFlag("weight-dtype", "auto, f32, bf16, fp8, mxfp4 or nvfp4",
                   absl::StrCat("'", f.weight_dtype, "'"));
  }
  o.dtype = *dtype;
  auto device = ParseDeviceSpec(f.device);
  if (!device.ok()) {
    return BadFlag("device", "cpu, cuda or cuda:N",
                   absl::StrCat("'", f.device, "'"));
  }
  MOE_RETURN_IF_ERROR(CheckSizes(f));
  MOE_RETURN_IF_ERROR(CheckListenAddresses(f));
  if (f.drain_timeout < absl::ZeroDuration()) {
    return BadFlag("drain-timeout", ">= 0",
                   absl::FormatDuration(f.drain_timeout));
  }
  MOE_RETURN_IF_ERROR(CheckWorkerRegistration(f));
  static_cast<RouterFlags&>(o) = f;
  o.step_timeout = std::chrono::milliseconds(f.step_timeout_ms);
  o.dispatch = f.dispatch_dtype == "fp8"    ? DispatchDType::kFp8
               : f.dispatch_dtype == "bf16" ? DispatchDType::kBf16
                                            : DispatchDType::kRowType;
  o.bf16_results = f.dispatch_dtype != "f32";
  o.max_request_tokens =
      f.max_request_tokens > 0 ? f.max_request_tokens : f.max_batch_tokens;
  o.batch_window = std::chrono::microseconds(f.batch_window_us);
  // The default queue holds what keeps the pipeline fed: a full step for
  // every step in flight to start next, and one more forming. Deeper queues
  // add only waiting: an open-loop flood at twice capacity kept admitted
  // requests waiting 2.6x the closed-loop p99 behind 8 steps' worth
  // (bench/abuse.sh), where a client is better told at once to go
  // elsewhere or back off.
  o.max_queue_tokens = f.max_queue_tokens > 0
                           ? f.max_queue_tokens
                           : (f.max_inflight_steps + 2) * f.max_batch_tokens;
  o.stream_max_queued_tokens =
      std::min(o.max_queue_tokens,
               std::max(o.max_queue_tokens / 2,
                        (f.max_inflight_steps + 1) * f.max_batch_tokens));
  o.threads = ThreadsOrAllCores(f.threads);
  o.drain_wait =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(f.drain_timeout));
  return o;
}

}  // namespace moe
