#include "core/flag_help.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/cli_args.h"

namespace moe {
namespace {

// Abseil's own flags (--flagfile, --fromenv, ...) and those of libraries
// that define some are not the binary's options.
bool IsOwnFlag(const absl::CommandLineFlag& flag) {
  const std::string file = flag.Filename();
  return file.find("absl/") == std::string::npos;
}

bool IsHelpArg(std::string_view arg) {
  for (std::string_view h : {"--help", "-help", "-h", "--helpfull",
                             "--helpshort", "--help_full", "--help-full"}) {
    if (arg == h) return true;
  }
  return arg.rfind("--help=", 0) == 0;
}

}  // namespace

std::string FlagHelpText(const std::string& usage) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOwnFlag(*flag) && !flag->IsRetired()) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string text = absl::StrCat(usage,
                                  "\n\nFlags (--name=value; hyphens "
                                  "or underscores):\n");
  for (const auto* flag : flags) {
    const std::string name = absl::StrReplaceAll(flag->Name(), {{"_", "-"}});
    const std::string def = flag->DefaultValue();
    absl::StrAppend(&text, "  --", name,
                    def.empty() ? "" : absl::StrCat("=", def), "\n");
    for (absl::string_view line : absl::StrSplit(flag->Help(), '\n')) {
      absl::StrAppend(&text, "      ", line, "\n");
    }
  }
  return text;
}

bool PrintHelpIfAsked(int argc, char** argv, const std::string& usage,
                      std::ostream& out) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (IsHelpArg(arg)) {
      out << FlagHelpText(usage);
      out.flush();
      return true;
    }
  }
  return false;
}

std::vector<std::string> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::map<std::string, std::string>& aliases) {
  absl::SetProgramUsageMessage(usage);
  if (PrintHelpIfAsked(argc, argv, usage, std::cout)) std::exit(0);
  NormalizedArgs args(argc, argv, aliases);
  // The positional arguments point into `args`: copy them out.
  const std::vector<char*> rest =
      absl::ParseCommandLine(args.argc(), args.argv());
  return std::vector<std::string>(rest.begin(), rest.end());
}

}  // namespace moe
