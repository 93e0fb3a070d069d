// Every binary's command line: --help with the binary's own flags, spelled
// as users type them (--num-workers), each with its default and
// description, exit 0; then the flags parsed (ParseFlagsOrExit), where a
// usage error exits 64.
// Abseil's own --help matches flags by the main file's name (router_main.cc
// is not moe-router, so it printed "No flags matched"), spells them with
// underscores, lists Abseil's flags first and exits 1.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moe {

// The exit status of a usage error in every binary: an unknown flag, a
// value that does not parse or is out of range, a required argument
// missing (EX_USAGE of sysexits.h). Scripts tell it from a failure of the
// work itself, which exits with another status.
inline constexpr int kExitUsage = 64;

// The help text: `usage`, then every flag defined outside Abseil, sorted by
// name, as "  --name=DEFAULT\n      description".
std::string FlagHelpText(const std::string& usage);

// When argv holds --help, -h, --helpfull, --helpshort or --help=... (before
// a bare "--"), prints FlagHelpText to `out` and returns true: the caller
// exits 0. Call before absl::ParseCommandLine.
bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage,
                      std::ostream& out);

// Checks argv (flag names spelled with underscores, as NormalizedArgs
// leaves them) the way absl::ParseCommandLine reads it, without changing
// any flag: every flag is defined, every value parses as its flag's type,
// a flag that takes a value has one. INVALID_ARGUMENT naming the first that
// does not. Abseil's parser prints such errors and exits 1 itself; checking
// first lets the caller exit 64. What a --flagfile holds is not checked.
absl::Status CheckFlags(int argc, char** argv);

// Prints "PROGRAM: MESSAGE (see PROGRAM --help)" on stderr and returns
// kExitUsage, for a main to return. PROGRAM is argv[0]'s base name once
// ParseFlagsOrExit ran.
int UsageError(absl::string_view message);

// UsageError, then exits.
[[noreturn]] void ExitUsage(absl::string_view message);

// What every main does first: sets `usage` as the program's usage
// message; prints the help and exits 0 when argv asks for it
// (PrintHelpIfAsked); parses the flags, spelled with hyphens or underscores
// (`aliases`: short names, as core/cli_args.h NormalizedArgs), and exits 64
// with the error on an unknown flag, a bad value or a missing one
// (CheckFlags). Returns the positional arguments, argv[0] first.
std::vector<std::string> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::map<std::string, std::string>& aliases = {});

// Every value given to flag `name` (underscores) in argv, in order: each
// occurrence (--name=V, --name V, hyphens or underscores) and each
// comma-separated part of one, for flags a user may repeat, which Abseil's
// parser would keep only the last of.
std::vector<std::string> RepeatedFlagValues(int argc, char** argv,
                                            absl::string_view name);

// ParseFlagsOrExit for a binary that takes flags only: a positional
// argument exits 64 too (usually a value whose flag was left out, which
// would otherwise be ignored).
void ParseOnlyFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::map<std::string, std::string>& aliases = {});

}  // namespace moe
