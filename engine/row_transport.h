// How a step's rows travel, chosen once per step at plan time (as vLLM's
// modular kernel picks its prepare/finalize apart from the experts' math):
// f32 or bf16 rows as they are, bf16 or FP8 packed rows, each either
// exchanged across ranks or staying (world size 1, a direct step). Two legs:
// dispatch takes the gathered rows (kSend) to the experts' input, combine
// takes the experts' outputs (kOut) to what the weighted sum reads. Each leg
// may encode its rows (engine/row_codec.h), exchange them, and decode them;
// which, through which buffers and as which wire elements is decided here,
// so that the step (engine/ep_step.cc) runs one straight line over the legs.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "engine/ep_plan.h"

namespace moe {

// The step's buffers. Rows travel between them as the backend's row type
// elements of width H: send [sent], recv [arrived], out [received], back
// [home] (see EpPlan); stage_send / stage_recv are pinned host copies of
// send/recv (and out/back) for a host communicator over a device backend.
// send_packed [sent] and recv_packed [arrived] hold the rows as they cross
// the dispatch all-to-all when it is packed (DispatchRowBytes each);
// out_packed [received] and back_packed [home] the bf16 expert outputs of a
// packed combine.
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

// Returns the bytes of one row of width `hidden` in the dispatch all-to-all.
int64_t DispatchRowBytes(DispatchDType dispatch, ElementType row_type,
                         int64_t hidden);
// Returns the router flag's spelling: "row type", "bf16", "fp8".
const char* DispatchDTypeName(DispatchDType dispatch);

// One leg: rows leave from `send` (the leg's source, or the packed copy
// `encode` writes there), land in `recv` (`send` itself when nothing
// crosses), and are left in `rows` for the next piece (`recv`, or the row
// type buffer `decode` writes).
struct RowLeg {
  bool encode = false;
  bool exchange = false;
  bool decode = false;
  EpBuffer send = EpBuffer::kSend;
  EpBuffer recv = EpBuffer::kSend;
  EpBuffer rows = EpBuffer::kSend;
  // Hold the exchange's element type, and how many make one row.
  ElementType wire_type = ElementType::kF32;
  int64_t wire_row_elems = 0;
};

struct RowTransport {
  RowLeg dispatch;  // from kSend to the experts' input
  RowLeg combine;   // from kOut to what the weighted sum reads
  // Nothing is done to the gathered rows on their way to the experts, so
  // the backend may leave them where they are (Gather, RunExperts).
  bool rows_in_place = false;
  // Says what the combine leg leaves: the row type, or bf16 (PacksOutputs).
  ElementType output_type = ElementType::kF32;
  // A leg packs rows: the backend needs a RowCodec.
  bool packs() const { return dispatch.encode || combine.encode; }
};

// The transport of a step dispatching as `dispatch` (the plan's: the row
// type at world size 1) rows of width `hidden` for a backend whose rows are
// `row_type`; `crosses`: rows go to other ranks (false at world size 1 and
// in a direct step, where a packed dispatch still packs and unpacks so that
// the outputs have the all-to-all path's bits).
RowTransport PlanRowTransport(DispatchDType dispatch, ElementType row_type,
                              int64_t hidden, bool crosses);

}  // namespace moe
