// Command-line spelling: lets every binary accept --top-k as well as
// --top_k. Abseil flags are named with underscores; users type hyphens.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moe {

// Rewrites '-' to '_' in the name part of each "--flag[=value]" argument
// (not in values, not after a bare "--"). The returned strings own the
// storage that `argv_out` points into.
class NormalizedArgs {
 public:
  // `aliases` maps short names to flags, e.g. {"c", "concurrency"} turns
  // "-c 8" and "-c=8" into "--concurrency ...".
  NormalizedArgs(int argc, char** argv,
                 const std::map<std::string, std::string>& aliases = {});
  int argc() const { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

// INVALID_ARGUMENT "--FLAG must be RULE, got GOT": how every binary refuses
// a flag value.
absl::Status BadFlag(absl::string_view flag, absl::string_view rule,
                     absl::string_view got);

// The --threads flag of every binary: `requested` when positive, else every
// core this process may use.
int ThreadsOrAllCores(int requested);

}  // namespace moe
