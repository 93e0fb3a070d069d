// What each part of the router process is built with, from RouterOptions:
// pure translations (no I/O, no threads), so that the Router only assembles
// and runs its parts, and each rule here (the message limit, the connect
// timeout, the resolved weight dtype the workers load) is tested alone.
#pragma once

#include <memory>

#include "core/model_source.h"
#include "engine/placement.h"
#include "server/api/worker_auth.h"
#include "server/api/worker_control_service.h"
#include "server/batching/batcher.h"
#include "server/group/worker_pool_options.h"
#include "server/router_options.h"
#include "server/router_servers.h"
#include "server/step/router_model.h"

namespace moe {

RouterModel::Options ModelOptionsFor(const RouterOptions& o);
RouterServers::Options ServersOptionsFor(const RouterOptions& o);
// Returns the gRPC message size limit: --max-message-bytes, or room for the
// largest request or step (rows, routing and a margin).
int MessageLimitFor(const RouterOptions& o, const ModelInfo& info);
// Says how many times the derived message limit a request may take on the
// public port (bounded: gRPC holds each message whole before the handler sees
// it).
inline constexpr int kOversizedRequestFactor = 4;
// Returns the bytes a request to the public port may have: with
// --max-message-bytes that limit, as given; else kOversizedRequestFactor times
// the derived one (at most INT32_MAX), so that a request with more tokens than
// --max-request-tokens is read and refused naming that flag rather than by
// gRPC's message size check. Larger ones still get gRPC's refusal.
int RequestLimitFor(const RouterOptions& o, const ModelInfo& info);
WorkerPoolOptions PoolOptionsFor(
    const RouterOptions& o, int64_t num_experts,
    std::shared_ptr<const ExpertPlacement> placement);
// `resolved`: the weight dtype the router loaded (never auto), which every
// worker loads too.
WorkerControlOptions ControlOptionsFor(const RouterOptions& o,
                                       WeightDType resolved,
                                       const WorkerAuth* auth);
Batcher::Options BatcherOptionsFor(const RouterOptions& o);

}  // namespace moe
