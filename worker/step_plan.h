// The host-side plan of one worker's part of a step, from the router's
// counts: which of its slots go where, how many rows it exchanges with each
// rank, and where each received row sits when grouped by expert. Validates
// the step against the worker's own rows first, so a malformed plan is an
// error and never an overrun. Shared by the CPU and CUDA executors.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/even_split.h"
#include "moe/v1/worker.pb.h"

namespace moe {

struct StepPlan {
  int64_t tokens = 0;                        // this worker's rows of x
  int64_t slots = 0;                         // slots per token
  int64_t expert_begin = 0, expert_end = 0;  // this worker's experts
  int64_t sent = 0;                // rows sent (this worker's dispatched slots)
  int64_t received = 0;            // rows received for this worker's experts
  std::vector<int64_t> order;      // [sent] slot ids in expert order
  std::vector<int64_t> send_rows;  // [world] rows to each rank
  std::vector<int64_t> recv_rows;  // [world] rows from each rank
  // [local + 1] offsets of each local expert's rows when grouped.
  std::vector<int64_t> expert_offsets;
  // [received] receive-buffer row of the i-th grouped row.
  std::vector<int64_t> grouped;
  // [tokens * slots] row of each slot in the buffer that comes back, or -1.
  std::vector<int64_t> slot_row;
  // Working space of PlanStep, kept so that a steady step allocates nothing.
  std::vector<int64_t> slot_offsets;  // [E + 1] own slots per expert
  std::vector<int64_t> cursor;        // [world] next row from each source
};

// `max_count` bounds every count of the plan (no source sends one expert
// more rows than a full batch holds).
absl::Status PlanStep(const moe::v1::Step& step, int rank, int world,
                      int64_t num_experts, int64_t hidden, int64_t max_count,
                      StepPlan* plan);

}  // namespace moe
