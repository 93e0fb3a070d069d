// Every binary's command line (core/flag_help.h): the help text, when argv
// asks for it, and ParseFlagsOrExit's parse, exits and positional arguments.
// Abseil's flags and usage message are process-wide and set once, so each
// parse runs in a child process (EXPECT_EXIT) and reports by its exit code.
#include "core/flag_help.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, flag_help_count, 7, "how many things\nsecond line");
ABSL_FLAG(std::string, flag_help_name, "", "a name");
ABSL_FLAG(bool, flag_help_bool, false, "a switch");

namespace moe {
namespace {

// argv as main receives it; the strings outlive the call.
struct Argv {
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (auto& s : args) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> args;
  std::vector<char*> ptrs;
};

TEST(FlagHelpText, ListsOwnFlagsAsUsersSpellThem) {
  const std::string text = FlagHelpText("usage line");
  EXPECT_EQ(text.rfind("usage line\n", 0), 0u) << text;
  EXPECT_NE(text.find("  --flag-help-count=7\n      how many things\n"
                      "      second line\n"),
            std::string::npos)
      << text;
  // No default: the name alone.
  EXPECT_NE(text.find("  --flag-help-name\n      a name\n"), std::string::npos)
      << text;
  EXPECT_LT(text.find("--flag-help-count"), text.find("--flag-help-name"));
  EXPECT_EQ(text.find("--flagfile"), std::string::npos) << text;
}

TEST(PrintHelpIfAsked, AnswersEveryHelpSpellingBeforeABareDashDash) {
  for (const char* arg : {"--help", "-h", "--helpfull", "--helpshort",
                          "--help=flag_help", "-help", "--help-full"}) {
    Argv a({"prog", "--flag-help-count=3", arg});
    std::ostringstream out;
    EXPECT_TRUE(PrintHelpIfAsked(a.argc(), a.argv(), "use me", out)) << arg;
    EXPECT_NE(out.str().find("--flag-help-count=7"), std::string::npos);
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"prog", "--flag-help-count=3"},
        {"prog", "--", "--help"},
        {"prog", "--helper"}}) {
    Argv a(args);
    std::ostringstream out;
    EXPECT_FALSE(PrintHelpIfAsked(a.argc(), a.argv(), "use me", out));
    EXPECT_TRUE(out.str().empty());
  }
}

// Exits 0 when the parse set both flags and returned `want`, else 3.
void ParseAndCheck(std::vector<std::string> args,
                   const std::map<std::string, std::string>& aliases,
                   int want_count, const std::string& want_name,
                   const std::vector<std::string>& want) {
  Argv a(std::move(args));
  const std::vector<std::string> rest =
      ParseFlagsOrExit(a.argc(), a.argv(), "use me", aliases);
  const bool ok = rest == want &&
                  absl::GetFlag(FLAGS_flag_help_count) == want_count &&
                  absl::GetFlag(FLAGS_flag_help_name) == want_name;
  std::exit(ok ? 0 : 3);
}

TEST(ParseFlagsOrExitDeathTest, ParsesHyphensAndReturnsPositionals) {
  EXPECT_EXIT(ParseAndCheck({"prog", "forward", "--flag-help-count=5",
                             "--flag_help_name", "x-y", "more"},
                            {}, 5, "x-y", {"prog", "forward", "more"}),
              ::testing::ExitedWithCode(0), "");
  // After a bare "--" everything is positional, --help included.
  EXPECT_EXIT(ParseAndCheck({"prog", "--", "--help", "--flag-help-count=1"}, {},
                            7, "", {"prog", "--help", "--flag-help-count=1"}),
              ::testing::ExitedWithCode(0), "");
}

TEST(ParseFlagsOrExitDeathTest, ExpandsShortAliases) {
  EXPECT_EXIT(ParseAndCheck({"prog", "-c", "9", "-n=abc"},
                            {{"c", "flag_help_count"}, {"n", "flag_help_name"}},
                            9, "abc", {"prog"}),
              ::testing::ExitedWithCode(0), "");
}

// The help goes to stdout, sent here to stderr for the matcher.
TEST(ParseFlagsOrExitDeathTest, HelpPrintsTheTextAndExitsZero) {
  EXPECT_EXIT(
      {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        ParseAndCheck({"prog", "--flag-help-count=bad", "--help"}, {}, 0, "",
                      {});
      },
      ::testing::ExitedWithCode(0), "use me\n\nFlags .*--flag-help-count=7");
}

// Usage errors exit 64 (kExitUsage), naming the flag as users spell it.
TEST(ParseFlagsOrExitDeathTest, UnknownFlagBadOrMissingValueExits64) {
  EXPECT_EXIT(ParseAndCheck({"/bin/prog", "--no-such-flag=1"}, {}, 7, "",
                            {"/bin/prog"}),
              ::testing::ExitedWithCode(kExitUsage),
              "prog: unknown flag --no-such-flag \\(see prog --help\\)");
  EXPECT_EXIT(
      ParseAndCheck({"prog", "--flag-help-count=many"}, {}, 7, "", {"prog"}),
      ::testing::ExitedWithCode(kExitUsage), "--flag-help-count: .*many");
  EXPECT_EXIT(ParseAndCheck({"prog", "--flag-help-name"}, {}, 7, "", {"prog"}),
              ::testing::ExitedWithCode(kExitUsage),
              "--flag-help-name needs a value");
}

TEST(ParseOnlyFlagsOrExitDeathTest, RefusesPositionalArguments) {
  EXPECT_EXIT(
      {
        Argv a({"prog", "--flag-help-count", "3", "stray"});
        ParseOnlyFlagsOrExit(a.argc(), a.argv(), "use me");
        std::exit(0);
      },
      ::testing::ExitedWithCode(kExitUsage), "unexpected argument 'stray'");
  EXPECT_EXIT(
      {
        Argv a({"prog", "--flag-help-count", "3"});
        ParseOnlyFlagsOrExit(a.argc(), a.argv(), "use me");
        std::exit(absl::GetFlag(FLAGS_flag_help_count) == 3 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// CheckFlags reads argv as absl::ParseCommandLine does, and sets nothing.
TEST(CheckFlags, AcceptsWhatAbseilParses) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"prog"},
           {"prog", "--flag_help_count=3", "-flag_help_name", "x"},
           {"prog", "--flag_help_count", "-3"},  // a value, not a flag
           {"prog", "forward", "-", "--flag_help_name="},
           {"prog", "--flag_help_bool", "--noflag_help_bool"},
           {"prog", "--flag_help_bool=false", "--flag_help_bool=1"},
           {"prog", "--", "--no_such_flag", "--flag_help_count=x"},
           {"prog", "--undefok=gone,other", "--gone=1", "--nogone"},
           {"prog", "--version"},
       }) {
    Argv a(args);
    EXPECT_TRUE(CheckFlags(a.argc(), a.argv()).ok())
        << args[1] << ": " << CheckFlags(a.argc(), a.argv());
  }
  EXPECT_EQ(absl::GetFlag(FLAGS_flag_help_count), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_flag_help_name), "");
  EXPECT_FALSE(absl::GetFlag(FLAGS_flag_help_bool));
}

TEST(CheckFlags, NamesTheFirstUsageError) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"prog", "--no_such_flag"}, "unknown flag --no-such-flag"},
           {{"prog", "--no_such_flag", "value"}, "unknown flag --no-such-flag"},
           {{"prog", "--noflag_help_count"},
            "unknown flag --noflag-help-count"},
           {{"prog", "--flag_help_count=x"}, "--flag-help-count: "},
           {{"prog", "--flag_help_count", "x"}, "--flag-help-count: "},
           {{"prog", "--flag_help_count="}, "--flag-help-count: "},
           {{"prog", "--flag_help_count"}, "--flag-help-count needs a value"},
           {{"prog", "--flag_help_bool=maybe"}, "--flag-help-bool: "},
           {{"prog", "--flag_help_bool="}, "--flag-help-bool=: give"},
           {{"prog", "--noflag_help_bool=1"}, "--noflag-help-bool=1: give"},
       }) {
    Argv a(c.args);
    const absl::Status s = CheckFlags(a.argc(), a.argv());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[1];
    EXPECT_NE(s.message().find(c.error), std::string::npos)
        << c.args[1] << ": " << s.message();
  }
}

}  // namespace
}  // namespace moe
