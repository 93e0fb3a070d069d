// The start every long-running binary of the service shares (moe-router,
// moe-worker): memory policy, signal mask, flags, log format, and the
// mapping of a start-up failure to an exit code.
#pragma once

#include "absl/status/status.h"

namespace moe {

// Call first in main: shortens OpenMP's idle spinning
// (core/openmp_policy.h; may re-execute the binary), keeps freed memory for
// reuse (core/memory_policy.h), blocks the shutdown signals before any thread
// starts (core/shutdown_signal.h), parses the flags (hyphens or
// underscores, core/cli_args.h; an unknown flag, a bad value or a
// positional argument exits 64, core/flag_help.h) and sets spdlog's line
// format with `log_tag` ("router", "worker %P").
void InitServiceProcess(int argc, char** argv, const char* usage,
                        const char* log_tag);

// 0 when `s` is OK; otherwise logs its message and returns `exit_code`.
int ExitCodeOf(const absl::Status& s, int exit_code);

}  // namespace moe
