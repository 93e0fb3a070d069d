// The small synthetic model the failure tests serve (H=32, I=24, E=6, k=2,
// seed 5): as router flags, and as an in-process engine with the same
// weights that computes the expected answers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/local_moe.h"

namespace moe::testing {

inline constexpr int64_t kSmallHidden = 32;

// --synthetic and its shape flags for moe-router.
std::vector<std::string> SmallModelArgs();
// The same model on the CPU, fp32, for up to 64 tokens a step; null (after
// a gtest failure naming why) when it cannot be built.
std::unique_ptr<LocalMoe> SmallModelEngine();

}  // namespace moe::testing
