#include "engine/ep_step.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "comm/loopback_communicator.h"
#include "core/status_macros.h"
#include "core/thread_slice.h"

namespace moe {
namespace {

absl::Status NotBuiltHere(DispatchDType dispatch, const std::string& name) {
  return absl::FailedPreconditionError(absl::StrCat(
      "--dispatch-dtype ", DispatchDTypeName(dispatch),
      " (a router flag) is not built for the ", name,
      " backend yet; start the router with --dispatch-dtype auto or f32"));
}

}  // namespace

absl::Status EpStep::Exchange(ExpertBackend& backend, Communicator& comm,
                              const RowExchange& rows,
                              std::chrono::milliseconds timeout) {
  const auto [send, send_rows, recv, recv_rows, type, row_elems] = rows;
  // Waiting on the peers: the thread wakes when their rows land, at once
  // rather than behind a computing thread (core/thread_slice.h).
  const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
  send_elems_.resize(send_rows.size());
  recv_elems_.resize(recv_rows.size());
  for (size_t q = 0; q < send_rows.size(); ++q) {
    send_elems_[q] = send_rows[q] * row_elems;
    recv_elems_[q] = recv_rows[q] * row_elems;
  }
  StepQueue& queue = backend.queue();
  if (!backend.device_memory() || comm.device_memory()) {
    return comm.AllToAllV(send, send_elems_, recv, recv_elems_, type, timeout,
                          queue.stream());
  }
  // Host-staged: device -> pinned, the host collective, pinned -> device.
  const size_t es = DTypeSize(type);
  const int64_t sent =
      std::accumulate(send_elems_.begin(), send_elems_.end(), int64_t{0});
  const int64_t received =
      std::accumulate(recv_elems_.begin(), recv_elems_.end(), int64_t{0});
  MOE_RETURN_IF_ERROR(backend.ReserveStaging());
  void* stage_send = backend.buffer(EpBuffer::kStageSend);
  void* stage_recv = backend.buffer(EpBuffer::kStageRecv);
  MOE_RETURN_IF_ERROR(queue.CopyToHost(send, stage_send, sent * es));
  MOE_RETURN_IF_ERROR(comm.AllToAllV(stage_send, send_elems_, stage_recv,
                                     recv_elems_, type, timeout, nullptr));
  return queue.CopyFromHost(stage_recv, recv, received * es);
}

absl::Status EpStep::Run(const EpStepInput& in, ExpertBackend& backend,
                         Communicator& comm, EpStepBounds bounds, float* y,
                         EpStepTimes* times) {
  comm_entered_ = false;
  const void* back = nullptr;
  absl::Status s =
      RunPieces(in, backend, comm,
                {.bounds = bounds, .direct = false, .y = y, .back = &back});
  collectives_intact_ = s.ok() || !comm_entered_;
  if (!s.ok()) {
    backend.queue().Drain(comm, deadline_);
    return s;
  }
  ReadTimes(backend, times);
  return absl::OkStatus();
}

absl::Status EpStep::RunDirect(const EpStepInput& in, ExpertBackend& backend,
                               DirectRank where, int64_t max_count,
                               DirectOutputs* out, EpStepTimes* times) {
  if (self_ == nullptr || self_->rank() != where.rank ||
      self_->size() != where.world) {
    self_ = CreateLoopbackCommunicator(where.rank, where.world);
  }
  comm_entered_ = false;
  collectives_intact_ = true;  // the group's communicator is never touched
  const void* back = nullptr;
  absl::Status s =
      RunPieces(in, backend, *self_,
                {.bounds = {.max_count = max_count, .x_resident = false},
                 .direct = true,
                 .y = nullptr,
                 .back = &back});
  const ElementType type = transport_.output_type;
  if (s.ok() && backend.device_memory()) {
    const size_t bytes = static_cast<size_t>(plan_.home) *
                         backend.config().expert_width() * DTypeSize(type);
    // Through the backend's pinned staging when the rows are its row type
    // (stage buffers hold `back`'s rows, EpBuffer): a copy into pageable
    // memory would be staged by the driver again.
    void* host = nullptr;
    if (type == backend.row_type() && backend.ReserveStaging().ok()) {
      host = backend.buffer(EpBuffer::kStageRecv);
    }
    if (host == nullptr) {
      if (host_back_.size() < bytes) host_back_.resize(bytes);
      host = host_back_.data();
    }
    s = backend.queue().CopyToHost(back, host, bytes);
    back = host;
  }
  if (!s.ok()) {
    backend.queue().Drain(*self_, deadline_);
    return s;
  }
  out->type = type;
  out->rows = back;
  out->slot_row = plan_.slot_row;
  ReadTimes(backend, times);
  return absl::OkStatus();
}

void EpStep::ReadTimes(ExpertBackend& backend, EpStepTimes* times) const {
  if (times == nullptr) return;
  const StepQueue& queue = backend.queue();
  times->dispatch_us = queue.ElapsedUs(EpMark::kStart, EpMark::kDispatched);
  times->experts_us = queue.ElapsedUs(EpMark::kDispatched, EpMark::kComputed);
  times->combine_us = queue.ElapsedUs(EpMark::kComputed, EpMark::kDone);
  times->gather_us = queue.ElapsedUs(EpMark::kStart, EpMark::kGathered);
  times->sum_us = queue.ElapsedUs(EpMark::kReturned, EpMark::kDone);
  times->expert_rows = plan_.received;
}

absl::Status EpStep::MoveRows(ExpertBackend& backend, Communicator& comm,
                              const RowLeg& leg,
                              absl::Span<const int64_t> send_rows,
                              absl::Span<const int64_t> recv_rows,
                              std::chrono::milliseconds timeout) {
  if (!leg.exchange) return absl::OkStatus();
  return Exchange(backend, comm,
                  {.send = backend.buffer(leg.send),
                   .send_rows = send_rows,
                   .recv = backend.buffer(leg.recv),
                   .recv_rows = recv_rows,
                   .type = leg.wire_type,
                   .row_elems = leg.wire_row_elems},
                  timeout);
}

absl::Status EpStep::RunPieces(const EpStepInput& in, ExpertBackend& backend,
                               Communicator& comm, const Pieces& pieces) {
  const int64_t max_count = pieces.bounds.max_count;
  const bool x_resident = pieces.bounds.x_resident;
  const bool direct = pieces.direct;
  float* y = pieces.y;
  const void** back_out = pieces.back;
  const MoeLayerConfig& c = backend.config();
  // Physical expert slots with redundant experts (engine/placement.h).
  const int64_t experts = in.experts > 0 ? in.experts : c.num_experts;
  // Before anything is queued: Drain after a failed piece is bounded by it.
  const auto deadline = std::chrono::steady_clock::now() + in.timeout;
  deadline_ = deadline;
  // A token's rows differ by slot when they are scaled before the experts:
  // then each slot travels (and every rank agrees, by the layer's config).
  MOE_RETURN_IF_ERROR(PlanEpStep(in, comm.rank(), comm.size(), experts,
                                 max_count, !c.score_before_experts, &plan_));
  const EpPlan& p = plan_;
  // At world size 1, and in a direct step, every row stays: the received
  // rows are the sent ones, and the rows going back are the expert outputs.
  transport_ =
      PlanRowTransport(p.dispatch, backend.row_type(), c.expert_width(),
                       /*crosses=*/comm.size() > 1 && !direct);
  const RowTransport& t = transport_;
  RowCodec* codec = backend.row_codec();
  // Before anything is queued, so that a backend without this packing
  // refuses the step with the group intact.
  if (t.packs() && codec == nullptr) {
    return NotBuiltHere(p.dispatch, backend.name());
  }
  MOE_RETURN_IF_ERROR(backend.Prepare(p));
  auto buf = [&](EpBuffer b) { return backend.buffer(b); };
  StepQueue& queue = backend.queue();

  queue.Mark(EpMark::kStart);
  MOE_RETURN_IF_ERROR(backend.Gather(in, p, x_resident, t));
  if (t.dispatch.encode) {
    MOE_RETURN_IF_ERROR(
        codec->PackRows(in, p, buf(EpBuffer::kSend), buf(t.dispatch.send)));
  }
  queue.Mark(EpMark::kGathered);
  // From here on the peers take part: a failure leaves them mid-step.
  comm_entered_ = t.dispatch.exchange;
  MOE_RETURN_IF_ERROR(MoveRows(backend, comm, t.dispatch, p.send_rows,
                               p.recv_rows, in.timeout));
  if (t.dispatch.decode) {
    MOE_RETURN_IF_ERROR(
        codec->UnpackRows(p, buf(t.dispatch.recv), buf(t.dispatch.rows)));
  }
  queue.Mark(EpMark::kDispatched);
  MOE_RETURN_IF_ERROR(backend.RunExperts(in.layer, p, buf(t.dispatch.rows),
                                         buf(EpBuffer::kOut)));
  queue.Mark(EpMark::kComputed);
  if (t.combine.encode) {
    MOE_RETURN_IF_ERROR(
        codec->PackOutputs(p, buf(EpBuffer::kOut), buf(t.combine.send)));
  }
  MOE_RETURN_IF_ERROR(MoveRows(backend, comm, t.combine, p.return_rows,
                               p.home_rows, in.timeout));
  queue.Mark(EpMark::kReturned);
  *back_out = buf(t.combine.rows);
  if (y != nullptr) MOE_RETURN_IF_ERROR(backend.Combine(in, p, *back_out, y));
  queue.Mark(EpMark::kDone);
  comm_entered_ = true;  // Finish may wait on the communicator
  return queue.Finish(comm, deadline);
}

}  // namespace moe
