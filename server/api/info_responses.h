// The read-only RPCs' answers (GetModelInfo, GetExpertStats) filled from
// plain structs. Part of the MoeService RPC handler.
#pragma once

#include <cstdint>
#include <string>

#include "moe/v1/moe.pb.h"
#include "server/step/expert_stats.h"
#include "server/step/group_readiness.h"
#include "server/step/router_model.h"

namespace moe {

// Fills GetModelInfo's answer with the model, the router's limits and device,
// and the worker group's readiness (`readiness` null: no workers, always
// ready).
void FillModelInfo(const RouterModel& model, const GroupReadiness* readiness,
                   int64_t max_batch_tokens, int64_t max_request_tokens,
                   const std::string& device, moe::v1::ModelInfo* info);

void FillExpertStats(const LayerStats& l, moe::v1::ExpertStats* s);

}  // namespace moe
