// The worker group's timer: one thread that runs the group's tick when it
// is due (the tick says when it wants to run next) or at once when poked
// (the group scheduled a regroup, a StoreGet parked with a new timeout).
// The tick runs outside the timer's lock, so it may take the group's; the
// group may poke under its own.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace moe {

class GroupTimer {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs at `now` and returns when it wants to run next (now or earlier:
  // at once).
  using Tick = std::function<Clock::time_point(Clock::time_point now)>;

  GroupTimer() = default;
  ~GroupTimer();  // Stop, and waits for the thread
  GroupTimer(const GroupTimer&) = delete;
  GroupTimer& operator=(const GroupTimer&) = delete;

  // Starts the thread, which ticks at once.
  void Start(Tick tick);
  // Asks for another tick as soon as the one running (if any) returns.
  void Poke();
  // Stops the ticks: none starts from now on, and one running finishes.
  void Stop();

 private:
  void Loop();

  Tick tick_;  // set before the thread starts
  absl::Mutex mu_;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace moe
