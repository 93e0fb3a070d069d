// The communicator of a group of one: the single-process engine runs the
// same expert-parallel step as a worker, with every row staying home.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace moe {

std::unique_ptr<Communicator> CreateLoopbackCommunicator();

}  // namespace moe
