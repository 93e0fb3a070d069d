// Where the routed experts live when workers hold redundant copies of hot
// ones (expert-parallel load balancing, DeepSeek's EPLB recipe). Pure host
// code: placements, their checks and JSON form, and the EPLB computation.
//
// A layer's E logical experts sit in E + R physical slots over P workers
// (R a multiple of P). Physical slots are numbered worker by worker, and
// worker q holds slots [SplitBegin(q, P, E + R), SplitBegin(q + 1, P, E + R))
// (core/even_split.h): E/P + R/P each when P divides E. With R = 0 and slot
// i holding expert i, the placement is the contiguous ranges workers always
// had, and physical ids are the logical ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moe {

// Describes one MoE layer: workers[q][s] is the logical expert in worker q's
// slot s.
struct LayerPlacement {
  std::vector<std::vector<int32_t>> workers;

  int world() const { return static_cast<int>(workers.size()); }
  int64_t physical() const;  // E + R slots in all
  // Returns the logical expert of every physical slot, worker by worker [E +
  // R].
  std::vector<int32_t> Flat() const;
  bool operator==(const LayerPlacement&) const = default;
};

// Holds every MoE layer's placement, for P workers and R redundant slots.
struct ExpertPlacement {
  int64_t redundant = 0;  // R
  std::map<int64_t, LayerPlacement> layers;
  bool operator==(const ExpertPlacement&) const = default;
};

// Returns the slots worker q holds when E + R physical slots are split over P.
int64_t WorkerSlots(int q, int P, int64_t physical);

// R = 0: worker q holds experts [SplitBegin(q, P, E), SplitBegin(q+1, P, E)).
LayerPlacement ContiguousPlacement(int64_t num_experts, int P);

// EPLB for one layer from per-expert load (tokens routed to each expert over
// a recent window): the R extra replicas go one at a time to the expert
// with the highest load per replica; then the E + R replicas, each carrying
// its expert's load over its replica count, are packed heaviest first onto
// the least loaded worker that has a free slot (preferring one that does
// not hold that expert yet; ties to the lower worker), so that every worker
// fills its slots and the load per worker is as even as possible. Each
// worker's slots are then sorted by expert. All-zero load counts as even.
// Deterministic. INVALID_ARGUMENT for R < 0, R not a multiple of P, P < 1, a
// negative load, or fewer experts than workers with R > 0.
absl::StatusOr<LayerPlacement> ComputePlacement(absl::Span<const double> load,
                                                int P, int64_t R);

// INVALID_ARGUMENT (naming the layer, worker and slot) unless `p` has P
// workers, worker q holds WorkerSlots(q, P, E + R) slots, every slot holds
// an expert in [0, E) and every expert is held at least once.
absl::Status CheckPlacement(const LayerPlacement& p, int64_t num_experts, int P,
                            int64_t R, int64_t layer = 0);

// Where each logical expert's replicas are, for the router's replica
// choice: replicas of expert e are physical slots slot[offsets[e] ..
// offsets[e+1]), in ascending slot (so ascending worker) order; worker_of
// [E + R] is the worker of each physical slot.
struct ReplicaMap {
  int world = 0;
  int64_t physical = 0;
  std::vector<int64_t> offsets;  // [E + 1]
  std::vector<int32_t> slot;     // [E + R]
  std::vector<int32_t> worker_of;
  int64_t replicas(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};
ReplicaMap MakeReplicaMap(const LayerPlacement& p, int64_t num_experts);

// JSON form (--expert-placement FILE, moe-cli placement):
// {"redundant_experts": R, "layers": {"<layer>": [[experts of worker 0's
// slots], [worker 1's], ...]}}. Parsing checks only the form; check each
// layer with CheckPlacement against the model.
std::string PlacementToJson(const ExpertPlacement& p);
absl::StatusOr<ExpertPlacement> PlacementFromJson(const std::string& text);

}  // namespace moe
