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

// Every rank calls it with the same world. `timeout` bounds the rendezvous
// and the communicator's creation; then one small all-to-all connects every
// pair of ranks (NCCL connects lazily, on first use) under the longer
// `connect_timeout`, so that the first step does not pay for it against its
// own deadline. Fails, the communicator aborted, when either runs out.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world, gloo::rendezvous::Store& store, int device,
    std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout = std::chrono::minutes(2));

}  // namespace moe
