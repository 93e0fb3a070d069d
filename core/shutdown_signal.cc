#include "core/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace moe {

void HandleShutdownSignals(std::function<void(int signal)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    int sig = 0;
    if (sigwait(&set, &sig) == 0) on_signal(sig);
  }).detach();
}

}  // namespace moe
