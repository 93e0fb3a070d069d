// Live rebalancing on the worker: a PlacementUpdate's slots loaded into the
// step executor's staging (StepExecutor::Stage) on a thread of its own, so
// that steps keep running meanwhile, and PlacementLoaded answered when the
// load is done. One load at a time: the next waits for the last to end.
// Used from one thread (the worker's executor thread), so it has no lock.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "moe/v1/worker.pb.h"
#include "worker/step_executor.h"

namespace moe {

class PlacementLoader {
 public:
  // Sends the PlacementLoaded answer (from the loader's thread).
  using Reply = std::function<void(const moe::v1::WorkerMessage&)>;

  PlacementLoader() = default;
  PlacementLoader(const PlacementLoader&) = delete;
  PlacementLoader& operator=(const PlacementLoader&) = delete;
  ~PlacementLoader() { Join(); }

  // Waits for the load in progress, then loads `update`'s slots of `model`
  // (the last Assignment's) into `executor` in the background and answers
  // through `reply` as rank `rank`: the error, or none once staged.
  // `executor` must outlive the load (Join).
  void Start(const moe::v1::PlacementUpdate& update,
             const moe::v1::ModelSpec& model, int32_t rank,
             StepExecutor& executor, Reply reply);
  // Waits for the load in progress, if any.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

}  // namespace moe
