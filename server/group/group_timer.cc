#include "server/group/group_timer.h"

#include <utility>

namespace moe {

GroupTimer::~GroupTimer() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void GroupTimer::Start(Tick tick) {
  tick_ = std::move(tick);
  thread_ = std::thread([this] { Loop(); });
}

void GroupTimer::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

void GroupTimer::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void GroupTimer::Loop() {
  mu_.Lock();
  while (!stopped_) {
    // A poke from here on is seen after this tick: it may have come too
    // late for the tick to see what it was about.
    poked_ = false;
    mu_.Unlock();
    const Clock::time_point wake = tick_(Clock::now());
    mu_.Lock();
    auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return poked_ || stopped_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&due),
                         absl::FromChrono(wake - Clock::now()));
  }
  mu_.Unlock();
}

}  // namespace moe
