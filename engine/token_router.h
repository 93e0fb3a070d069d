// The router's math for a batch: gate GEMM (fp32), scores, top-k or expert
// choice, capacity, normalisation and scale. Requests batched together are
// routed as independent segments wherever the batch would otherwise matter
// (capacity, expert choice).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/caller_overrides.h"
#include "engine/layer_weights.h"
#include "engine/route_rows.h"

namespace moe {

// Every token has `slots` routing slots, in the order their contributions
// are summed. Token choice: slots = k, in descending score order. Expert
// choice: slots = the most experts any token got, by ascending expert id.
// A layer with zero experts (config.zero_experts = Z) routes over E + Z
// ids: a slot of id e >= E holds a zero expert, which adds weight * x to y
// on the router (AddZeroExperts); it is never dispatched, so plans, workers,
// expert counts and placement see ids below E only.
struct Routing {
  int64_t tokens = 0;
  int64_t slots = 0;
  std::vector<int32_t> expert;         // [tokens * slots]; -1 = empty slot
  std::vector<float> weight;           // final weights; 0 if dropped or empty
  std::vector<uint8_t> dispatched;     // 1 when a worker computes the slot
  std::vector<int64_t> expert_counts;  // [E] dispatched slots per expert
  int64_t dropped = 0;                 // slots dropped by the capacity limit
  int64_t zero_slots = 0;              // slots that chose a zero expert
  // [tokens, logit_cols] the gate logits (x·Wᵀ plus the router bias, or the
  // caller's; before any soft-cap) when CallerOverrides::keep_logits asked
  // for them, else left as it was. logit_cols = E + Z, the router's rows.
  std::vector<float> logits;
  int64_t logit_cols = 0;

  void Reset(int64_t n, int64_t s, int64_t num_experts);
};

// Holds a layer's router-side vectors, each used when its config option is on.
struct RouteTables {
  const float* expert_bias = nullptr;  // [E + Z], use_bias: for choosing only
  const float* router_bias = nullptr;  // [E + Z], router_bias: on the logits
  const int32_t* tid2eid = nullptr;    // [V, k], hash_vocab > 0
  // [E], per_expert_scale: multiplies each final weight (Gemma 4).
  const float* per_expert_scale = nullptr;
};

// OK unless `config` is hash-routed and `token_ids` is not one id in
// [0, hash_vocab) per row: INVALID_ARGUMENT naming the field and the row.
absl::Status CheckTokenIds(const MoeLayerConfig& config,
                           absl::Span<const int64_t> token_ids, int64_t n);

// Adds every zero-expert slot's weight * x[t] to y[t] (x, y [n, H]): the
// identity experts of LongCat-Flash, computed on the router. Nothing when
// the layer has none.
void AddZeroExperts(const MoeLayerConfig& config, const Routing& routing,
                    const float* x, float* y);

// What the layer does to y after the routed sum and the shared expert:
// y = output_scale * y (and the shared output answered apart, `separate`,
// when not null), then y += output_bias [H] once per row (null: none).
void ScaleAndBiasOutput(const MoeLayerConfig& config, const float* output_bias,
                        int64_t n, float* y, float* separate);

// Whether the layer has any of the pieces above: the routed sum alone is
// then not its output.
bool HasOutputTerms(const MoeLayerConfig& config);

// Writes the caller's routing (CallerOverrides::expert, weight) into the
// rows of `out`'s kRouting segments, every slot dispatched, and recounts
// expert_counts over every dispatched slot, so that whatever chose the
// other rows (the host's scoring or the device's) need not leave the
// caller's rows out of its own count. `out` has slots = the layer's top_k.
void ApplyCallerRouting(const CallerOverrides& caller,
                        absl::Span<const int64_t> segment_ends, Routing* out);

class TokenRouter {
 public:
  // Routes n tokens of x [n, H]. `segment_ends` are the exclusive ends of the
  // independent requests in the batch (ascending, last == n); empty means one.
  // `token_ids` (one per row, in [0, hash_vocab)) are what a hash-routed
  // layer routes by: INVALID_ARGUMENT naming the row when missing or out of
  // range there; other layers ignore them. `caller` (may be null): the
  // segments whose logits or routing came from the caller. A kLogits
  // segment is scored from the caller's logits; a kRouting segment gets
  // exactly the caller's slots (no capacity limit, normalisation or scale);
  // the other segments get the bits they get in a step without them, since
  // scoring is per row and capacity and expert choice per segment.
  absl::Status Route(const LayerWeights& weights, const float* x,
                     const RouteRows& rows, int num_threads, Routing* out);

  // The same routing from gate logits [n, E + Z] computed elsewhere (a GPU).
  absl::Status RouteLogits(const MoeLayerConfig& config,
                           const RouteTables& tables, const float* logits,
                           const RouteRows& rows, int num_threads,
                           Routing* out);

 private:
  void Logits(const LayerWeights& w, const float* x, int64_t n,
              int num_threads);
  // `rows.segment_ends` must not be empty here (RouteLogits fills it).
  void TokenChoice(const MoeLayerConfig& c, const RouteTables& tables,
                   const float* logits, const RouteRows& rows, int num_threads,
                   Routing* out);
  void ExpertChoice(const MoeLayerConfig& c, const float* logits, int64_t n,
                    absl::Span<const int64_t> ends, int num_threads,
                    Routing* out);

  std::vector<float> logits_;
  std::vector<float> biased_;     // logits + router bias
  std::vector<float> merged_;     // with the caller's rows in place
  std::vector<float> prenormed_;  // router_prenorm: the rows the gate reads
  std::vector<float> scores_;
  std::vector<const float*> x_rows_;
  std::vector<float*> logit_rows_;
  std::vector<int32_t> idx_;
  std::vector<int64_t> load_;
  std::vector<int32_t> ec_tokens_;
  std::vector<float> ec_probs_;
  std::vector<int64_t> per_token_;
};

}  // namespace moe
