// What an Assignment or PlacementUpdate asks of a worker, as plain values:
// the experts it holds (ExpertShard), the rows per step it sizes for, and
// the key that tells whether what is loaded already is what is asked.
#pragma once

#include <cstdint>
#include <string>

#include "moe/v1/worker.pb.h"
#include "worker/step_executor.h"

namespace moe {

ExpertShard ShardOf(const moe::v1::Assignment& a);
// A live rebalance's slots (no contiguous range).
ExpertShard ShardOf(const moe::v1::PlacementUpdate& u);

// The Assignment's max_batch_tokens, capped by the worker's own `cap`
// (0: no cap; an Assignment without a limit takes the cap).
int64_t MaxTokensFor(const moe::v1::Assignment& a, int64_t cap);

// Equal for two Assignments exactly when they need the same weights and
// workspaces: model, experts or slots, placement epoch, `max_tokens`.
std::string LoadKeyOf(const moe::v1::Assignment& a, int64_t max_tokens);

// "[4, 8)", or "slots 0:[1,5,7] 1:[...]" with redundant experts.
std::string ShardText(const ExpertShard& shard);

}  // namespace moe
