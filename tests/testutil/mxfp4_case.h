// MXFP4 test layers: routed expert weights replaced by their MXFP4 round
// trip (kernels/mxfp4_rule.h's quantiser, each row in blocks of 32), so that
// an engine keeping them MXFP4 must meet the fp32 tolerance.
#pragma once

#include "tests/testutil/golden_case.h"

namespace moe::testing {

// Replaces every routed expert weight of `c` (not the shared expert, which
// --weight-dtype mxfp4 leaves as stored) by its MXFP4 round trip, and
// recomputes the reference output and routing on those weights.
void RoundTripRoutedExpertsThroughMxfp4(GoldenCase* c);

}  // namespace moe::testing
