// Assertions for MoE outputs and routing against references.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/golden_case.h"

namespace moe::testing {

struct Tolerance {
  double atol;
  double rtol;
};
// tests/golden/README.md: fp32 compute, and bf16 weights.
inline constexpr Tolerance kF32Tol{1e-4, 1e-3};
inline constexpr Tolerance kBf16Tol{5e-2, 2e-2};

// Every |got - want| <= atol + rtol * |want|; reports the worst element.
::testing::AssertionResult AllClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    Tolerance tol);

// Token-choice routing: per token, the same set of expert ids, and each
// expert's weight within 1e-5 + 1e-4 relative. ids/weights are [n, k].
::testing::AssertionResult SameTokenRouting(
    const std::vector<int64_t>& want_idx, const std::vector<float>& want_w,
    const std::vector<int32_t>& got_idx, const std::vector<float>& got_w,
    int64_t n, int64_t k, int64_t got_slots);

// Expert choice: for each expert, the tokens whose slots name it must be the
// golden top_idx row, with the renormalised (and scaled) top_w weights.
// got_idx/got_w are [tokens, slots] with -1 for unused slots.
::testing::AssertionResult SameExpertChoice(const GoldenCase& c,
                                            const std::vector<int32_t>& got_idx,
                                            const std::vector<float>& got_w,
                                            int64_t tokens, int64_t slots);

}  // namespace moe::testing
