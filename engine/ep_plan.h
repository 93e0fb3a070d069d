// The plan of one expert-parallel step (docs/architecture.md, "One step"):
// what the router hands each rank, in plain C++ (the wire's Step, decoded in
// proto/step_codec), and the host-side plan a rank derives from it: which of
// its slots go where, how many rows it exchanges with each rank, and where
// each received row sits when grouped by expert. The plan is validated
// against the rank's own rows first, so a malformed step is an error and
// never an overrun. Also the one place that bounds a step's workspaces.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/moe_config.h"
#include "core/serving_defaults.h"

namespace moe {

struct Routing;     // engine/token_router.h
struct ReplicaMap;  // engine/placement.h

// How rows cross the dispatch all-to-all (the router's --dispatch-dtype,
// sent in every Step so that all ranks of a step agree): in the backend's
// own row type (fp32 on a CPU, bf16 on a GPU; exact), as bf16 (rounded to
// nearest even), or as FP8 rows (core/fp8_rows.h: e4m3 codes plus one fp32
// scale per 128 channels). Expert outputs always go home in the row type.
// At world size 1 nothing crosses, so every choice is the row type there.
enum class DispatchDType { kRowType, kBf16, kFp8 };

// One rank's part of a step. Spans point into memory the caller owns for
// the duration of the step (the decoded message, or the router's routing).
struct EpStepInput {
  uint64_t step_id = 0;
  int64_t layer = 0;
  int64_t tokens = 0;           // this rank's rows of x
  const float* rows = nullptr;  // host fp32 [tokens, H]
  int64_t slots = 0;            // routing slots per token
  // [tokens * slots]: expert of each slot, -1 = not dispatched.
  absl::Span<const int32_t> expert_ids;
  absl::Span<const float> weights;  // [tokens * slots] final weights
  // [world * E]: dispatched slots from each source rank to each expert.
  // With redundant experts, expert ids and counts name physical slots
  // (engine/placement.h) and E is `experts`.
  absl::Span<const int64_t> counts;
  int64_t experts = 0;  // E + R physical expert slots; 0: the layer's E
  // [all tokens * slots]: the expert ids of every rank's rows (rank q's
  // are its token shard, core/even_split.h), this rank's among them. With
  // them each rank knows what every peer sends it, so a token goes to each
  // rank once however many of its experts live there (see EpPlan). Empty:
  // one row per dispatched slot (the layout the counts alone describe).
  absl::Span<const int32_t> all_expert_ids;
  // Bounds how long the step's collectives may wait.
  std::chrono::milliseconds timeout{kDefaultStepTimeoutMs};
  DispatchDType dispatch = DispatchDType::kRowType;
};

// Rows cross the two all-to-alls differently. Dispatch: one row per token
// and destination rank (a token whose k experts include three on rank q
// goes to q once), in token order per destination; without the peers'
// expert ids (EpStepInput::all_expert_ids) or when rows are scaled per slot
// before the experts, one row per dispatched slot in expert order. Combine:
// one row per dispatched slot (each expert's output), in expert order per
// source, so that the source sums its slots in slot order exactly as a
// single process does.
struct EpPlan {
  int64_t tokens = 0;                        // this rank's rows
  int64_t slots = 0;                         // slots per token
  int64_t expert_begin = 0, expert_end = 0;  // this rank's experts
  // in.dispatch, or kRowType at world size 1 (nothing is exchanged).
  DispatchDType dispatch = DispatchDType::kRowType;
  bool one_row_per_token = false;    // the dispatch layout (see above)
  int64_t sent = 0;                  // rows this rank dispatches
  int64_t arrived = 0;               // rows dispatched to this rank
  int64_t received = 0;              // rows through this rank's experts
  int64_t home = 0;                  // rows coming back: its dispatched slots
  std::vector<int64_t> order;        // [home] own slot ids in expert order
  std::vector<int64_t> src_row;      // [sent] token of each dispatched row
  std::vector<int64_t> send_rows;    // [world] dispatched rows to each rank
  std::vector<int64_t> recv_rows;    // [world] dispatched rows from each rank
  std::vector<int64_t> return_rows;  // [world] expert outputs to each rank
  std::vector<int64_t> home_rows;    // [world] outputs back from each rank
  // [local + 1] offsets of each local expert's rows when grouped.
  std::vector<int64_t> expert_offsets;
  // [received] the dispatched (receive-buffer) row each grouped row reads,
  // and the out-buffer row its output goes to.
  std::vector<int64_t> grouped;
  std::vector<int64_t> out_row;
  // [tokens * slots] row of each slot in the buffer that comes back, or -1.
  std::vector<int64_t> slot_row;
  // This is PlanEpStep's working space, kept so that a steady step allocates
  // nothing.
  std::vector<int64_t> slot_offsets;   // [E + 1] own slots per expert
  std::vector<int64_t> cursor;         // [world] or [world * local] cursors
  std::vector<int64_t> expert_cursor;  // [local]
  std::vector<int32_t> rank_of;        // [E] owner of each expert
};

// Plans rank `rank` of `world`'s part of `in`. `max_count` bounds every count
// (no source sends one expert more rows than a full batch holds).
// `num_experts` is the number of (physical) experts ids and counts name;
// rank q owns [SplitBegin(q, world, num_experts), SplitBegin(q + 1, ...)).
// `one_row_per_token`: dispatch each token once per destination when
// in.all_expert_ids allows it (false where rows are scaled per slot before
// the experts, so a token's rows differ by slot).
absl::Status PlanEpStep(const EpStepInput& in, int rank, int world,
                        int64_t num_experts, int64_t max_count,
                        bool one_row_per_token, EpPlan* plan);

// The router's side: splits n routed tokens over `world` ranks (token shards
// by core/even_split.h) and writes each rank's expert ids (-1 where a slot is
// not dispatched) into `expert_ids` [n * slots] and the (source, expert)
// count matrix [world * E] into `counts`.
//
// With `replicas` (a layer's redundant placement over `world` workers), ids
// and counts name physical slots [world * (E + R)] instead, and every
// dispatched slot goes to one replica of its expert: first the slots of
// experts with a single replica, then, in slot order, each slot of a
// replicated expert to the replica whose worker has the fewest rows of this
// step so far (ties to the lower worker). Deterministic, and the sum in slot
// order on the workers makes the choice invisible in the output bits.
void PlanDispatch(const Routing& routing, int64_t n, int world,
                  int64_t num_experts, std::vector<int32_t>* expert_ids,
                  std::vector<int64_t>* counts,
                  const ReplicaMap* replicas = nullptr);

// Returns the rows each of `world` ranks computes in a step with `counts`
// [world * experts] (rank q's experts as in PlanEpStep).
std::vector<int64_t> RowsPerRank(absl::Span<const int64_t> counts, int world,
                                 int64_t experts);

// Holds upper bounds of one step's sizes, from the routing rules, for `tokens`
// tokens in at most `segments` independently routed requests.
struct EpBounds {
  int64_t tokens = 0;  // rows of x
  int64_t slots = 0;   // routing slots per token
  int64_t rows = 0;    // rows through the experts (dispatched slots)
};
// Token choice: k slots and k rows per token (the capacity limit only drops).
// Expert choice: expert e takes C_s = clamp(floor(m * n_s / E), 1, n_s) of
// each segment's n_s tokens (m = capacity factor, or k), so a segment sends
// E * C_s <= max(E, m * n_s) rows: at most min(E * tokens,
// E * segments + m * tokens) in all; a token can be taken by every expert.
EpBounds StepBounds(const MoeLayerConfig& config, int64_t tokens,
                    int64_t segments);

}  // namespace moe
