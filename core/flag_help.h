// --help for every binary: the binary's own flags, spelled as users type
// them (--num-workers), each with its default and description, exit 0.
// Abseil's own --help matches flags by the main file's name (router_main.cc
// is not moe-router, so it printed "No flags matched"), spells them with
// underscores, lists Abseil's flags first and exits 1.
#pragma once

#include <ostream>
#include <string>

namespace moe {

// The help text: `usage`, then every flag defined outside Abseil, sorted by
// name, as "  --name=DEFAULT\n      description".
std::string FlagHelpText(const std::string& usage);

// When argv holds --help, -h, --helpfull, --helpshort or --help=... (before
// a bare "--"), prints FlagHelpText to `out` and returns true: the caller
// exits 0. Call before absl::ParseCommandLine.
bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage,
                      std::ostream& out);

}  // namespace moe
