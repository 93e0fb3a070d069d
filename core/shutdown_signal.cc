#include "core/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace moe {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void OnShutdownSignal(std::function<void(int signal)> on_signal) {
  std::thread([on_signal = std::move(on_signal)] {
    const sigset_t set = ShutdownSet();
    int sig = 0;
    if (sigwait(&set, &sig) == 0) on_signal(sig);
  }).detach();
}

}  // namespace moe
