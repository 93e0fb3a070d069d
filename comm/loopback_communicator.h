// The communicator of rows that never leave their rank: a group of one (the
// single-process engine runs the same expert-parallel step as a worker, with
// every row staying home), or rank `rank` of a group of `world` in a direct
// step (engine/ep_step.h, EpStep::RunDirect), where the router sent the rank
// exactly the rows its experts need and nothing crosses between workers.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace moe {

// AllToAllV copies what the rank sends itself and refuses (INTERNAL) any
// count to or from another rank: a plan that moves rows here is a bug.
std::unique_ptr<Communicator> CreateLoopbackCommunicator(int rank = 0,
                                                         int world = 1);

}  // namespace moe
