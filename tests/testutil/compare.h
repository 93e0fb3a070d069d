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

// FP8 errors are a fraction of the values a sum adds, not of the sum: a
// small output built from large terms can be off by more than itself. So
// FP8 layers are held to the relative RMS error over the whole output and
// to a largest error in units of the reference's RMS.
struct RmsTolerance {
  double rel_rms;       // sqrt(sum err^2 / sum want^2) at most this
  double max_over_rms;  // every |err| <= this * rms(want)
};
// The GPU's block-scaled FP8 layer (E4M3 weights, E4M3 activations per row
// per 128 channels, bf16 between the GEMMs) against the fp32 reference. Its
// host emulation (tests/engine/fp8_gpu_emulation_test.cc) measured, over
// the golden cases, relative RMS 0.056-0.072 and a largest error of 0.63
// rms (with FP8 weights alone, activations unquantised: 0.046-0.065); the
// bound leaves room for the GPU's own accumulation order.
inline constexpr RmsTolerance kFp8GpuTol{0.10, 1.0};
// The GPU's FP8 layer against its host emulation: the same roundings, in
// another order (an E4M3 or bf16 rounding may fall the other way).
inline constexpr RmsTolerance kFp8EmulationTol{0.02, 0.2};
// The GPU's bf16 layer (bf16 weights, and activations rounded to bf16 at
// each GEMM: x, gate-up, h, routed outputs) against the fp32 reference,
// where the golden per-element bf16 bound (kBf16Tol) cannot hold: cases
// with large intermediates (gpt-oss, DeepSeek-V4), where rounding x alone
// moves small outputs past its 5e-2. The host emulation
// (EmulateCudaBf16Layer) measured, over every golden case, relative RMS
// 0.0035-0.0063 and a largest error of 0.017-0.051 rms, the 2026 cases no
// worse than the others; the bounds leave about 1.6x and 2x for the GPU's
// own accumulation order.
inline constexpr RmsTolerance kBf16GpuTol{0.01, 0.1};
// Rows that crossed the workers' dispatch as FP8 (router --dispatch-dtype
// fp8), fp32 everywhere else: the experts read every value rounded to
// e4m3, 3 mantissa bits (at most 2^-4 relative, about 2.6% RMS). Measured
// over every golden case with 2 and 3 workers (DistributedGolden): relative
// RMS 0.018-0.039, largest error 0.06-0.27 rms; the bounds leave about 1.5x
// and 1.9x.
inline constexpr RmsTolerance kFp8DispatchTol{0.06, 0.5};
// As bf16 (--dispatch-dtype bf16): 7 mantissa bits, 16x finer; measured
// 0.0011-0.0034 and 0.006-0.023 rms.
inline constexpr RmsTolerance kBf16DispatchTol{0.006, 0.05};

// Routed experts in MXFP4 (--weight-dtype mxfp4, quantised at load by the
// OCP MX rule), everything else fp32: each weight to E2M1's 1 mantissa bit
// in its block of 32. Measured over every golden case (single process and
// router + 2 workers, tests/engine/mxfp4_weights_test.cc,
// tests/integration/mxfp4_experts_test.cc): see the README's precision
// table; the bounds leave about 1.5x.
inline constexpr RmsTolerance kMxfp4WeightTol{0.33, 2.7};

// The figures RmsClose checks: relative RMS error, largest error in rms.
struct RmsError {
  double rel_rms = 0;
  double max_over_rms = 0;
};
RmsError MeasureRmsError(const std::vector<float>& got,
                         const std::vector<float>& want);

// Every |got - want| <= atol + rtol * |want|; reports the worst element.
::testing::AssertionResult AllClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    Tolerance tol);

// got against want at an RmsTolerance; reports both figures.
::testing::AssertionResult RmsClose(const std::vector<float>& got,
                                    const std::vector<float>& want,
                                    RmsTolerance tol);

// A CPU layer with bf16 weights against the golden y: the golden
// per-element bf16 bound (kBf16Tol), except for a case whose outputs are so
// large that rounding its expert weights to bf16 alone breaks that bound
// (the reference run on the rounded weights does; step35_like, |y| up to
// 205, measured relative RMS 0.0030 and a largest error of 0.013 rms):
// that case is held to kBf16GpuTol's RMS bounds instead.
::testing::AssertionResult CpuBf16Close(const GoldenCase& c,
                                        const std::vector<float>& y);

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
