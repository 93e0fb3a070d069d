// The line the router logs once it serves: its ports (the public one with
// TLS or not, the workers' with mutual TLS or not, the probes'), the batch
// settings, how rows travel when not the default, and whether bearer tokens
// are required. A pure function, so that what an operator reads first is
// tested apart from the process.
#pragma once

#include <string>

#include "server/router_options.h"

namespace moe {

// Holds the ports the router serves on; 0 means that server does not run.
struct ServingPorts {
  int api = 0;
  int workers = 0;
  int health = 0;
};

std::string ListeningLine(const RouterOptions& o, const ServingPorts& ports,
                          bool tokens_required);

}  // namespace moe
