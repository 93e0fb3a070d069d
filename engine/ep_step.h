// THE expert-parallel step (docs/architecture.md, "One step"), written once
// for every backend and communicator: plan -> gather rows -> all-to-all
// dispatch -> grouped SwiGLU -> all-to-all combine -> weighted sum in slot
// order. A worker runs it as rank r of P; the single-process engine runs it
// with a loopback communicator of world size 1, where nothing moves.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "engine/ep_plan.h"
#include "engine/expert_backend.h"
#include "engine/row_transport.h"

namespace moe {

// Records what the rank's part of a step took, in microseconds.
struct EpStepTimes {
  double dispatch_us = 0;   // gather + dispatch all-to-all
  double experts_us = 0;    // grouped SwiGLU
  double combine_us = 0;    // combine all-to-all + weighted sum
  double gather_us = 0;     // of dispatch_us: rows packed by destination
  double sum_us = 0;        // of combine_us: the weighted sum
  int64_t expert_rows = 0;  // rows this rank's experts computed
};

// A direct step's expert outputs on the host: plan().home rows of width H
// in `type` (the row type, or bf16 where PacksOutputs), row slot_row[t *
// slots + s] for slot s of token t (-1: a slot of another rank). Valid until
// the step's next Run or RunDirect.
struct DirectOutputs {
  ElementType type = ElementType::kF32;
  const void* rows = nullptr;
  absl::Span<const int64_t> slot_row;
};

// How one step may run, beside its input: `max_count` bounds every count
// of the plan, and `x_resident` says the backend already holds in.rows
// (from its Route).
struct EpStepBounds {
  int64_t max_count = 0;
  bool x_resident = false;
};

// Says which rank of how many a direct step runs as.
struct DirectRank {
  int rank = 0;
  int world = 1;
};

class EpStep {
 public:
  // Computes y [in.tokens, H] (host fp32) for rank comm.rank() of comm.size().
  absl::Status Run(const EpStepInput& in, ExpertBackend& backend,
                   Communicator& comm, EpStepBounds bounds, float* y,
                   EpStepTimes* times);

  // A direct step (docs/architecture.md, "Direct steps"): the router sent
  // rank `where.rank` of `where.world` the rows of exactly the tokens with a
  // slot on its experts (every other slot -1, the counts of its own rows only),
  // and sums the outputs itself. The step's pieces run as in Run, the rounding
  // of a packed dispatch included, with nothing exchanged (the group's
  // communicator is not touched); it stops before the weighted sum and
  // leaves each slot's expert output in `out`.
  // in.rows are never resident (bounds.x_resident is not read).
  absl::Status RunDirect(const EpStepInput& in, ExpertBackend& backend,
                         DirectRank where, int64_t max_count,
                         DirectOutputs* out, EpStepTimes* times);

  const EpPlan& plan() const { return plan_; }
  // Returns how the last step's rows travelled (chosen after its plan).
  const RowTransport& transport() const { return transport_; }
  // After Run: whether `comm` is still in step with its peers. True when
  // Run succeeded or failed before its first collective (plan, Prepare,
  // Gather: the communicator was never touched); false when it failed in or
  // after one (an exchange, the experts between them, Combine, Finish), where
  // peers may be left mid-collective and the group must be rebuilt.
  bool collectives_intact() const { return collectives_intact_; }

 private:
  // How RunPieces runs and where it leaves its outputs. `direct`: nothing
  // crosses ranks (see RunDirect). With y null it stops before the weighted
  // sum, the outputs left in *back.
  struct Pieces {
    EpStepBounds bounds;
    bool direct = false;
    float* y = nullptr;
    const void** back = nullptr;
  };
  // Runs the step's pieces in order.
  absl::Status RunPieces(const EpStepInput& in, ExpertBackend& backend,
                         Communicator& comm, const Pieces& pieces);
  // Runs a leg's exchange, where it has one (RowLeg::exchange).
  absl::Status MoveRows(ExpertBackend& backend, Communicator& comm,
                        const RowLeg& leg, absl::Span<const int64_t> send_rows,
                        absl::Span<const int64_t> recv_rows,
                        std::chrono::milliseconds timeout);
  void ReadTimes(ExpertBackend& backend, EpStepTimes* times) const;
  // Describes one all-to-all's rows: send_rows[q] rows to rank q from `send`,
  // recv_rows[q] from it into `recv`, each `row_elems` elements of `type`.
  struct RowExchange {
    const void* send = nullptr;
    absl::Span<const int64_t> send_rows;
    void* recv = nullptr;
    absl::Span<const int64_t> recv_rows;
    ElementType type = ElementType::kF32;
    int64_t row_elems = 0;
  };
  // The all-to-all of `rows`, staged through pinned host memory when the
  // backend's buffers are on a device and the communicator moves host
  // memory.
  absl::Status Exchange(ExpertBackend& backend, Communicator& comm,
                        const RowExchange& rows,
                        std::chrono::milliseconds timeout);

  EpPlan plan_;
  RowTransport transport_;
  // Direct steps: this rank's own exchanges, and the outputs on the host
  // when the backend's buffers are on a device (grow only).
  std::unique_ptr<Communicator> self_;
  std::vector<char> host_back_;
  std::vector<int64_t> send_elems_, recv_elems_;
  bool comm_entered_ = false;  // this Run reached its first collective
  // Holds the running step's deadline, set before its first piece.
  std::chrono::steady_clock::time_point deadline_{};
  bool collectives_intact_ = true;
};

}  // namespace moe
