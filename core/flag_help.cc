#include "core/flag_help.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/cli_args.h"

namespace moe {
namespace {

// argv[0]'s base name, for the messages of usage errors.
std::string& ProgramName() {
  static std::string* name = new std::string("moe");
  return *name;
}

// A flag's name as users type it: --num-workers for num_workers.
std::string Dashed(absl::string_view name) {
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

// Names Abseil answers itself without defining a flag for them (--help and
// its forms, --version, --only_check_args): left to its parser.
bool IsAbseilUsageName(absl::string_view name) {
  return absl::StartsWith(name, "help") || name == "version" ||
         name == "only_check_args";
}

// The flag `name` sets: --foo, or --nofoo for a bool flag foo (`negative`).
absl::CommandLineFlag* LocateFlag(absl::string_view name, bool* negative) {
  *negative = false;
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::ConsumePrefix(&name, "no")) {
    flag = absl::FindCommandLineFlag(name);
    *negative = true;
  }
  return flag;
}

// Puts back, when it goes, the value each saved flag had when first saved.
// absl::FlagSaver would do it for every flag, but logs a line on stderr
// for each flag it restores.
class FlagRestorer {
 public:
  FlagRestorer() = default;
  FlagRestorer(const FlagRestorer&) = delete;
  FlagRestorer& operator=(const FlagRestorer&) = delete;
  ~FlagRestorer() {
    for (const auto& [flag, value] : saved_) {
      std::string error;
      flag->ParseFrom(value, &error);
    }
  }
  void Save(absl::CommandLineFlag* flag) {
    if (!saved_.contains(flag)) saved_.emplace(flag, flag->CurrentValue());
  }

 private:
  std::map<absl::CommandLineFlag*, std::string> saved_;
};

// Names given to --undefok: unknown flags Abseil lets pass.
bool UndefinedIsOk(absl::string_view name) {
  const absl::CommandLineFlag* undefok = absl::FindCommandLineFlag("undefok");
  if (undefok == nullptr) return false;
  const std::string list = undefok->CurrentValue();
  for (absl::string_view ok : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (name == ok || name == absl::StrCat("no", ok)) return true;
  }
  return false;
}

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

absl::Status CheckFlags(int argc, char** argv) {
  // Values are tried by setting them; `restore` puts every flag back, for
  // absl::ParseCommandLine to set (and record) for real.
  FlagRestorer restore;
  std::vector<std::string> undefined;
  for (int i = 1; i < argc; ++i) {
    // Abseil's forms: -name or --name, "=value" or the next argument as
    // the value of a flag that is not bool; "-" alone is positional and a
    // bare "--" ends the flags.
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "-") || arg.empty()) continue;
    absl::ConsumePrefix(&arg, "-");
    if (arg.empty()) break;
    const size_t eq = arg.find('=');
    const bool assigned = eq != absl::string_view::npos;
    const absl::string_view name = arg.substr(0, eq);
    absl::string_view value = assigned ? arg.substr(eq + 1) : "";
    bool negative = false;
    absl::CommandLineFlag* flag = LocateFlag(name, &negative);
    if (flag == nullptr) {
      if (!IsAbseilUsageName(name)) undefined.emplace_back(name);
      continue;
    }
    if (flag->IsOfType<bool>()) {
      if (assigned && (value.empty() || negative)) {
        return absl::InvalidArgumentError(absl::StrCat(
            Dashed(name), "=", value, ": give ", Dashed(flag->Name()), ", ",
            Dashed(flag->Name()), "=true|false or --no", flag->Name()));
      }
      if (!assigned) value = negative ? "false" : "true";
    } else if (negative) {
      undefined.emplace_back(name);
      continue;
    } else if (!assigned) {
      if (i + 1 == argc) {
        return absl::InvalidArgumentError(
            absl::StrCat(Dashed(flag->Name()), " needs a value"));
      }
      value = argv[++i];
    }
    // Abseil skips a retired flag's value.
    if (flag->IsRetired()) continue;
    std::string error;
    restore.Save(flag);
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Dashed(flag->Name()), ": ", error));
    }
  }
  for (const std::string& name : undefined) {
    if (UndefinedIsOk(name)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", Dashed(name)));
  }
  return absl::OkStatus();
}

int UsageError(absl::string_view message) {
  std::cerr << ProgramName() << ": " << message << " (see " << ProgramName()
            << " --help)" << std::endl;
  return kExitUsage;
}

void ExitUsage(absl::string_view message) { std::exit(UsageError(message)); }

std::vector<std::string> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::map<std::string, std::string>& aliases) {
  if (argc > 0) {
    ProgramName() = std::string(absl::string_view(argv[0]).substr(
        absl::string_view(argv[0]).rfind('/') + 1));
  }
  absl::SetProgramUsageMessage(usage);
  if (PrintHelpIfAsked(argc, argv, usage, std::cout)) std::exit(0);
  NormalizedArgs args(argc, argv, aliases);
  if (absl::Status s = CheckFlags(args.argc(), args.argv()); !s.ok()) {
    ExitUsage(s.message());
  }
  // The positional arguments point into `args`: copy them out.
  const std::vector<char*> rest =
      absl::ParseCommandLine(args.argc(), args.argv());
  return std::vector<std::string>(rest.begin(), rest.end());
}

std::vector<std::string> RepeatedFlagValues(int argc, char** argv,
                                            absl::string_view name) {
  const std::string underscores(name);
  const std::string hyphens = absl::StrReplaceAll(name, {{"_", "-"}});
  std::vector<std::string> values;
  auto add = [&](absl::string_view value) {
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      if (!part.empty()) values.emplace_back(part);
    }
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;
    }
    for (const std::string& spelling : {underscores, hyphens}) {
      absl::string_view rest = arg;
      if (!absl::ConsumePrefix(&rest, spelling)) continue;
      if (absl::ConsumePrefix(&rest, "=")) {
        add(rest);
      } else if (rest.empty() && i + 1 < argc) {
        add(argv[++i]);
      }
      break;
    }
  }
  return values;
}

void ParseOnlyFlagsOrExit(int argc, char** argv, const std::string& usage,
                          const std::map<std::string, std::string>& aliases) {
  const std::vector<std::string> rest =
      ParseFlagsOrExit(argc, argv, usage, aliases);
  if (rest.size() > 1) {
    ExitUsage(absl::StrCat("unexpected argument '", rest[1],
                           "': this program takes flags only"));
  }
}

}  // namespace moe
