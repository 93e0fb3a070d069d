// Every binary's command line: --help with the binary's own flags, spelled
// as users type them (--num-workers), each with its default and
// description, exit 0; then the flags parsed (ParseFlagsOrExit).
// Abseil's own --help matches flags by the main file's name (router_main.cc
// is not moe-router, so it printed "No flags matched"), spells them with
// underscores, lists Abseil's flags first and exits 1.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace moe {

// The help text: `usage`, then every flag defined outside Abseil, sorted by
// name, as "  --name=DEFAULT\n      description".
std::string FlagHelpText(const std::string& usage);

// When argv holds --help, -h, --helpfull, --helpshort or --help=... (before
// a bare "--"), prints FlagHelpText to `out` and returns true: the caller
// exits 0. Call before absl::ParseCommandLine.
bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage,
                      std::ostream& out);

// What every main does first: sets `usage` as the program's usage
// message; prints the help and exits 0 when argv asks for it
// (PrintHelpIfAsked); parses the flags, spelled with hyphens or underscores
// (`aliases`: short names, as core/cli_args.h NormalizedArgs), where Abseil
// prints the error and exits 1 on an unknown flag or a bad value. Returns
// the positional arguments, argv[0] first.
std::vector<std::string> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::map<std::string, std::string>& aliases = {});

}  // namespace moe
