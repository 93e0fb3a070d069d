// The expert placement the worker group's steps are planned with, and the
// switch to a new one (live rebalancing): every rank of a generation loads
// the next placement while steps go on, and once all have, it is in force
// from the next step sent. One placement loads at a time; a new generation
// fails the one loading.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/placement.h"
#include "server/step/placement_in_force.h"

namespace moe {

class PlacementSwitch {
 public:
  // `initial` is in force at epoch 0 (null: contiguous ranges).
  explicit PlacementSwitch(std::shared_ptr<const ExpertPlacement> initial)
      : placement_(std::move(initial)) {}

  PlacementInForce in_force() const;

  // Starts loading a placement on the `world` ranks of `generation`: the
  // epoch it will have. FAILED_PRECONDITION while another one loads.
  absl::StatusOr<uint64_t> Begin(uint64_t generation, int world);
  // Records that rank `rank` of `generation` loaded `epoch`, or could not
  // (`error`). Answers for another epoch or generation are ignored.
  void Loaded(uint64_t generation, uint64_t epoch, int rank,
              const std::string& error);
  // A new generation started: a placement loading for an earlier one can
  // no longer switch.
  void GenerationStarted(uint64_t generation);
  // Waits until every rank has loaded the placement begun (OK), one could
  // not (UNAVAILABLE with its error), the switch shuts down (UNAVAILABLE),
  // or `deadline` passes (DEADLINE_EXCEEDED); on failure nothing loads any
  // more.
  absl::Status AwaitLoaded(std::chrono::steady_clock::time_point deadline);
  // Puts `next` in force from now on, as the epoch begun, if its generation is
  // still `generation` and no rank failed (else UNAVAILABLE).
  absl::Status Commit(std::shared_ptr<const ExpertPlacement> next,
                      uint64_t generation);
  void Shutdown();

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const ExpertPlacement> placement_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  struct Staging {
    bool active = false;
    uint64_t epoch = 0;
    uint64_t generation = 0;
    std::vector<bool> loaded;
    int remaining = 0;
    std::string error;
  };
  Staging staging_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe
