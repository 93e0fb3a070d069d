// Defaults that several layers share: the router's flags, the pool, the
// batcher, the model's workspaces and the step plan all start from these,
// so that a struct built without the flags behaves as the binary does.
#pragma once

#include <cstdint>

namespace moe {

// Tokens in one step at most (--max-batch-tokens).
inline constexpr int64_t kDefaultMaxBatchTokens = 4096;
// Deadline of one step on the workers, collectives included
// (--step-timeout-ms).
inline constexpr int64_t kDefaultStepTimeoutMs = 10000;

}  // namespace moe
