#include "core/cli_args.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace moe {

NormalizedArgs::NormalizedArgs(
    int argc, char** argv, const std::map<std::string, std::string>& aliases) {
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") flags_done = true;
    if (!flags_done && i > 0 && a.size() >= 2 && a[0] == '-' && a[1] != '-') {
      const size_t eq = a.find('=');
      auto it =
          aliases.find(a.substr(1, eq == std::string::npos ? eq : eq - 1));
      if (it != aliases.end()) {
        a = "--" + it->second + (eq == std::string::npos ? "" : a.substr(eq));
      }
    }
    if (!flags_done && i > 0 && a.size() > 2 && a[0] == '-') {
      const size_t start = a[1] == '-' ? 2 : 1;
      const size_t end = a.find('=');
      for (size_t j = start; j < a.size() && j < end; ++j) {
        if (a[j] == '-') a[j] = '_';
      }
    }
    args_.push_back(std::move(a));
  }
  for (auto& a : args_) ptrs_.push_back(a.data());
}

int ThreadsOrAllCores(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::Status BadFlag(absl::string_view flag, absl::string_view rule,
                     absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", rule, ", got ", got));
}

}  // namespace moe
