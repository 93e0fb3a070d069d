// Communicator over NCCL: send/recv pairs in one group for the all-to-all,
// on a non-blocking communicator so that every wait has a deadline; on
// timeout or error the communicator is aborted (ncclCommAbort), never hung.
// The unique id travels through the group's rendezvous store.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "gloo/rendezvous/store.h"

namespace moe {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world, gloo::rendezvous::Store& store, int device,
    std::chrono::milliseconds timeout);

}  // namespace moe
