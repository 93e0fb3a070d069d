// Communicator over Gloo's TCP transport, rendezvousing through a
// key-value store (the router's, for workers).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "gloo/rendezvous/store.h"

namespace moe {

// Connects rank `rank` of `size` to its peers: publishes this process's
// addresses (reachable at `host`) in `store` and connects to everyone
// else's. Fails (never hangs) after `timeout`.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    int rank, int size, const std::string& host, gloo::rendezvous::Store& store,
    std::chrono::milliseconds timeout);

}  // namespace moe
