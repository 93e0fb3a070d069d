#include "core/service_process.h"

#include <string>

#include "core/flag_help.h"
#include "core/logging.h"
#include "core/memory_policy.h"
#include "core/openmp_policy.h"
#include "core/shutdown_signal.h"
#include "core/thread_slice.h"

namespace moe {

void InitServiceProcess(int argc, char** argv, const char* usage,
                        const char* log_tag) {
  ShortenOpenMpSpinning(argv);
  KeepFreedMemoryForReuse();
  // Every thread starts as one that hands data on (gRPC's, Gloo's, ours);
  // the threads that compute say so around their math.
  SetThreadRole(ThreadRole::kLatency);
  BlockShutdownSignals();
  ParseOnlyFlagsOrExit(argc, argv, usage);
  spdlog::set_pattern(std::string("[%Y-%m-%d %H:%M:%S.%e] [") + log_tag +
                      "] [%l] %v");
  if (const double slice_us = ThreadSliceUs();
      slice_us > 0 && slice_us <= kLatencySliceUs) {
    spdlog::info(
        "threads that hand data on run with a {:.0f} us scheduler "
        "slice; computing threads with the kernel's default",
        slice_us);
  } else {
    spdlog::info(
        "this kernel keeps no per-thread scheduler slice (Linux "
        "6.12+): every thread runs with its default");
  }
}

int ExitCodeOf(const absl::Status& s, int exit_code) {
  if (s.ok()) return 0;
  spdlog::error("{}", s.message());
  return exit_code;
}

}  // namespace moe
