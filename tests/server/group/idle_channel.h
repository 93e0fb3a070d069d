// A step channel over ranks that never open a step, and no placement: what
// the worker group's membership tests build GroupParts on (they form,
// lose and re-form generations, and run no steps).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "server/group/placement_switch.h"
#include "server/group/step_channel.h"

namespace moe::testing {

class NoSteps : public StepRanks {
  absl::Status OpenStep(const std::vector<StepContent>&, Open) override {
    return absl::UnavailableError("no steps here");
  }
};

struct IdleChannel {
  NoSteps steps;
  StepChannel channel{&steps};
  PlacementSwitch placement{nullptr};
};

}  // namespace moe::testing
