// A golden case checked against a started cluster that serves it: routed
// by the service, and through the caller-routing API (the case's own
// routing replayed, its gate logits sent, the service's logits returned,
// its shared experts apart and skipped).
// Shared by caller_routing_test (every case, P = 0..3, direct and
// all-to-all steps) and families_golden_test (every family's checkpoint).
#pragma once

#include <cstdint>
#include <vector>

#include "client/moe_client.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/local_cluster.h"

namespace moe::testing {

// The case's gate logits, x·gate.weightᵀ (+ router bias), as fp32.
std::vector<float> GateLogits(const GoldenCase& c);
// Options sending the case's own top_idx/top_w as routing.
ForwardOptions ReplayOptions(const GoldenCase& c);
// Options sending GateLogits as router_logits.
ForwardOptions LogitsOptions(const GoldenCase& c);

// On `cluster`, serving `c` at `layer` routed by the service: y within
// kF32Tol, k slots per token and the case's experts and weights.
void ExpectServesCase(LocalCluster& cluster, const GoldenCase& c,
                      int32_t layer);

// On `cluster`, serving `c` at `layer`: routing replay (token choice) and
// logits (not hash-routed) give y within kF32Tol with exactly the routing
// sent; a routing of the caller's own (every id moved to the next expert)
// is dispatched as sent, its routed part linear in the weights where the
// layer sums the experts' outputs last; return_router_logits matches
// GateLogits; output + shared_output of SHARED_SEPARATE is y, and SHARED_SKIP
// answers that output, bit for bit.
void ExpectCallerRoutingMatches(LocalCluster& cluster, const GoldenCase& c,
                                int32_t layer);

}  // namespace moe::testing
