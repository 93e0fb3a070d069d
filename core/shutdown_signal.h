// Orderly shutdown on SIGINT/SIGTERM for the daemons: the signals are
// blocked in every thread and taken by one waiting thread, which runs the
// callback outside signal context (where it may cancel RPCs, join threads).
#pragma once

#include <functional>

namespace moe {

// Call first thing in main, before any thread starts, so that every thread
// inherits the blocked mask.
void BlockShutdownSignals();

// Starts the thread that waits for SIGINT/SIGTERM and runs `on_signal`
// once. The signals must have been blocked already.
void OnShutdownSignal(std::function<void(int signal)> on_signal);

}  // namespace moe
