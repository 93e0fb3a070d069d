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

// A tolerance relative to the size of the whole output, for errors that
// scale with the layer's activations rather than with each element:
// ||got - want||_2 <= norm_rel * ||want||_2, and every |got - want| <=
// max_frac * max |want|.
struct ScaledTolerance {
  double norm_rel;
  double max_frac;
};
// Rows that crossed the dispatch as FP8 (router --dispatch-dtype fp8): the
// experts read every value rounded to e4m3, 3 mantissa bits, a relative
// error of at most 2^-4 and about 2.6% RMS, so y is off by a few percent of
// its own size. Measured over every golden case with 2 and 3 workers:
// normwise at most 3.9% (mixtral_like, deepseek_v3_like), elementwise at
// most 5.6% of max |y| (one_hot_expert); the bounds leave 1.5x to 2x.
inline constexpr ScaledTolerance kFp8DispatchTol{0.06, 0.10};
// As bf16 (--dispatch-dtype bf16): 7 mantissa bits, 16x finer (measured at
// most 0.34% normwise and 0.35% of max |y|).
inline constexpr ScaledTolerance kBf16DispatchTol{0.006, 0.01};

// Every |got - want| <= atol + rtol * |want|; reports the worst element.
::testing::AssertionResult AllClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    Tolerance tol);

// Within `tol`; reports the normwise error and the worst element.
::testing::AssertionResult CloseToScale(const std::vector<float>& got,
                                        const std::vector<float>& want,
                                        ScaledTolerance tol);

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
