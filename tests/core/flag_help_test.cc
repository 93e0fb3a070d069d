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

TEST(ParseFlagsOrExitDeathTest, UnknownFlagOrBadValueExitsOne) {
  EXPECT_EXIT(ParseAndCheck({"prog", "--no-such-flag=1"}, {}, 7, "", {"prog"}),
              ::testing::ExitedWithCode(1), "Unknown command line flag");
  EXPECT_EXIT(
      ParseAndCheck({"prog", "--flag-help-count=many"}, {}, 7, "", {"prog"}),
      ::testing::ExitedWithCode(1), "flag_help_count");
}

}  // namespace
}  // namespace moe
