// The host-side plan of one worker's part of a step, from the router's
// counts: which of its slots go where, how many rows it exchanges with each
// rank, and where each received row sits when grouped by expert. Validates
// the step against the worker's own rows first, so a malformed plan is an
// error and never an overrun. Shared by the CPU and CUDA executors.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "moe/v1/worker.pb.h"

namespace moe {

// First expert owned by `rank` of `world` ranks: rank * E / world.
inline int64_t ExpertBegin(int64_t rank, int64_t world, int64_t experts) {
  return rank * experts / world;
}

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
};

// `max_count` bounds every count of the plan (no source sends one expert
// more rows than a full batch holds).
absl::Status PlanStep(const moe::v1::Step& step, int rank, int world,
                      int64_t num_experts, int64_t hidden, int64_t max_count,
                      StepPlan* plan);

}  // namespace moe
