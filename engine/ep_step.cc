#include "engine/ep_step.h"

#include <algorithm>
#include <numeric>

#include "comm/loopback_communicator.h"
#include "core/status_macros.h"
#include "core/thread_slice.h"

namespace moe {

absl::Status EpStep::Exchange(ExpertBackend& backend, Communicator& comm,
                              const void* send,
                              absl::Span<const int64_t> send_rows, void* recv,
                              absl::Span<const int64_t> recv_rows,
                              ElementType type, int64_t row_elems,
                              std::chrono::milliseconds timeout) {
  // Waiting on the peers: the thread wakes when their rows land, at once
  // rather than behind a computing thread (core/thread_slice.h).
  const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
  send_elems_.resize(send_rows.size());
  recv_elems_.resize(recv_rows.size());
  for (size_t q = 0; q < send_rows.size(); ++q) {
    send_elems_[q] = send_rows[q] * row_elems;
    recv_elems_[q] = recv_rows[q] * row_elems;
  }
  if (!backend.device_memory() || comm.device_memory()) {
    return comm.AllToAllV(send, send_elems_, recv, recv_elems_, type, timeout,
                          backend.stream());
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
  MOE_RETURN_IF_ERROR(backend.CopyToHost(send, stage_send, sent * es));
  MOE_RETURN_IF_ERROR(comm.AllToAllV(stage_send, send_elems_, stage_recv,
                                     recv_elems_, type, timeout, nullptr));
  return backend.CopyFromHost(stage_recv, recv, received * es);
}

absl::Status EpStep::Run(const EpStepInput& in, ExpertBackend& backend,
                         Communicator& comm, int64_t max_count, bool x_resident,
                         float* y, EpStepTimes* times) {
  comm_entered_ = false;
  const void* back = nullptr;
  absl::Status s = RunPieces(in, backend, comm, max_count, x_resident,
                             /*direct=*/false, y, &back);
  collectives_intact_ = s.ok() || !comm_entered_;
  if (!s.ok()) {
    backend.Drain(comm, deadline_);
    return s;
  }
  ReadTimes(backend, times);
  return absl::OkStatus();
}

absl::Status EpStep::RunDirect(const EpStepInput& in, ExpertBackend& backend,
                               int rank, int world, int64_t max_count,
                               DirectOutputs* out, EpStepTimes* times) {
  if (self_ == nullptr || self_->rank() != rank || self_->size() != world) {
    self_ = CreateLoopbackCommunicator(rank, world);
  }
  comm_entered_ = false;
  collectives_intact_ = true;  // the group's communicator is never touched
  const void* back = nullptr;
  absl::Status s =
      RunPieces(in, backend, *self_, max_count, /*x_resident=*/false,
                /*direct=*/true, /*y=*/nullptr, &back);
  const ElementType type = PacksOutputs(plan_.dispatch, backend.row_type())
                               ? ElementType::kBF16
                               : backend.row_type();
  if (s.ok() && backend.device_memory()) {
    const size_t bytes = static_cast<size_t>(plan_.home) *
                         backend.config().hidden * DTypeSize(type);
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
    s = backend.CopyToHost(back, host, bytes);
    back = host;
  }
  if (!s.ok()) {
    backend.Drain(*self_, deadline_);
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
  times->dispatch_us = backend.ElapsedUs(EpMark::kStart, EpMark::kDispatched);
  times->experts_us = backend.ElapsedUs(EpMark::kDispatched, EpMark::kComputed);
  times->combine_us = backend.ElapsedUs(EpMark::kComputed, EpMark::kDone);
  times->gather_us = backend.ElapsedUs(EpMark::kStart, EpMark::kGathered);
  times->sum_us = backend.ElapsedUs(EpMark::kReturned, EpMark::kDone);
  times->expert_rows = plan_.received;
}

absl::Status EpStep::RunPieces(const EpStepInput& in, ExpertBackend& backend,
                               Communicator& comm, int64_t max_count,
                               bool x_resident, bool direct, float* y,
                               const void** back_out) {
  const MoeLayerConfig& c = backend.config();
  // Physical expert slots with redundant experts (engine/placement.h).
  const int64_t experts = in.experts > 0 ? in.experts : c.num_experts;
  // A token's rows differ by slot when they are scaled before the experts:
  // then each slot travels (and every rank agrees, by the layer's config).
  // Before anything is queued: Drain after a failed piece is bounded by it.
  const auto deadline = std::chrono::steady_clock::now() + in.timeout;
  deadline_ = deadline;
  MOE_RETURN_IF_ERROR(PlanEpStep(in, comm.rank(), comm.size(), experts,
                                 max_count, !c.score_before_experts, &plan_));
  const EpPlan& p = plan_;
  MOE_RETURN_IF_ERROR(backend.Prepare(p));
  // At world size 1, and in a direct step, every row stays: the received
  // rows are the sent ones, and the rows going back are the expert outputs.
  // A direct step still packs and unpacks them as the dispatch asks, so
  // that its outputs have the bits of the all-to-all path.
  const bool stays = comm.size() == 1 || direct;
  void* send = backend.buffer(EpBuffer::kSend);
  void* recv = stays ? send : backend.buffer(EpBuffer::kRecv);
  void* out = backend.buffer(EpBuffer::kOut);
  void* back = stays ? out : backend.buffer(EpBuffer::kBack);

  const int64_t H = c.hidden;
  const ElementType row_type = backend.row_type();
  // Rows are packed for the dispatch unless they already travel as asked
  // (bf16 rows of a bf16 backend); the plan says row type at world size 1.
  const bool packed =
      p.dispatch == DispatchDType::kFp8 ||
      (p.dispatch == DispatchDType::kBf16 && row_type != ElementType::kBF16);
  // A packed dispatch comes home packed too: fp32 expert outputs travel as
  // bf16 (DeepEP's FP8 dispatch, BF16 combine), and the weighted sum reads
  // them as bf16, widened exactly, still fp32 and in slot order.
  const bool packed_back = PacksOutputs(p.dispatch, row_type);

  backend.Mark(EpMark::kStart);
  // Rows read in place only when nothing is done to them on the way.
  MOE_RETURN_IF_ERROR(backend.Gather(in, p, x_resident, stays && !packed));
  if (packed) {
    // Before the first collective, so that a backend without this packing
    // refuses the step with the group intact.
    MOE_RETURN_IF_ERROR(
        backend.PackRows(in, p, backend.buffer(EpBuffer::kSendPacked)));
  }
  backend.Mark(EpMark::kGathered);
  // From here on the peers take part: a failure leaves them mid-step.
  comm_entered_ = !stays;
  if (packed) {
    void* arrived = backend.buffer(EpBuffer::kSendPacked);
    if (!stays) {
      arrived = backend.buffer(EpBuffer::kRecvPacked);
      MOE_RETURN_IF_ERROR(
          Exchange(backend, comm, backend.buffer(EpBuffer::kSendPacked),
                   p.send_rows, arrived, p.recv_rows, ElementType::kU8,
                   DispatchRowBytes(p.dispatch, row_type, H), in.timeout));
    }
    MOE_RETURN_IF_ERROR(backend.UnpackRows(p, arrived, recv));
  } else if (!stays) {
    MOE_RETURN_IF_ERROR(Exchange(backend, comm, send, p.send_rows, recv,
                                 p.recv_rows, row_type, H, in.timeout));
  }
  backend.Mark(EpMark::kDispatched);
  MOE_RETURN_IF_ERROR(backend.RunExperts(in.layer, p, recv, out));
  backend.Mark(EpMark::kComputed);
  // Expert outputs go home in the row type, or as bf16 after a packed
  // dispatch. Every slot's output is rounded, the rows that stay on this
  // rank too, so y does not depend on which rank computed what.
  if (packed_back) {
    void* out_packed = backend.buffer(EpBuffer::kOutPacked);
    MOE_RETURN_IF_ERROR(backend.PackOutputs(p, out, out_packed));
    back = out_packed;  // Combine reads bf16
    if (!stays) {
      back = backend.buffer(EpBuffer::kBackPacked);
      MOE_RETURN_IF_ERROR(Exchange(backend, comm, out_packed, p.return_rows,
                                   back, p.home_rows, ElementType::kBF16, H,
                                   in.timeout));
    }
  } else if (!stays) {
    MOE_RETURN_IF_ERROR(Exchange(backend, comm, out, p.return_rows, back,
                                 p.home_rows, row_type, H, in.timeout));
  }
  backend.Mark(EpMark::kReturned);
  *back_out = back;
  if (y != nullptr) MOE_RETURN_IF_ERROR(backend.Combine(in, p, back, y));
  backend.Mark(EpMark::kDone);
  comm_entered_ = true;  // Finish may wait on the communicator
  return backend.Finish(comm, deadline);
}

}  // namespace moe
