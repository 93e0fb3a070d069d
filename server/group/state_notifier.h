// The worker group's state delivered to one callback, in order. Each
// delivery reads the state when it runs, under the notifier's lock, so two
// changes racing to deliver still leave the latest state shown last, and
// the group's own lock is never held while the callback runs. Lock order:
// the notifier's, then (reading the state) the group's.
#pragma once

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "server/step/group_readiness.h"

namespace moe {

class StateNotifier {
 public:
  using Callback = std::function<void(const GroupState&)>;

  void Set(Callback callback) {
    absl::MutexLock lock(&mu_);
    callback_ = std::move(callback);
  }
  // Calls the callback (if one is set) with `read()`; call with no lock
  // held that `read` takes.
  void Deliver(absl::FunctionRef<GroupState()> read) {
    absl::MutexLock lock(&mu_);
    if (callback_) callback_(read());
  }

 private:
  absl::Mutex mu_;
  Callback callback_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe
