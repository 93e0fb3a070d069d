// Orderly shutdown on SIGINT/SIGTERM for the daemons: the signals are
// blocked in every thread and taken by one waiting thread, which runs the
// callback outside signal context (where it may cancel RPCs, join threads).
#pragma once

#include <functional>

namespace moe {

// Call first thing in main, before any thread starts, so that all threads
// inherit the blocked mask. `on_signal` runs once, on a dedicated thread.
void HandleShutdownSignals(std::function<void(int signal)> on_signal);

}  // namespace moe
