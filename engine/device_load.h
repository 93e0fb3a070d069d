// The points of a device backend's Load after which it can fail, named so
// that a test can inject a failure at each (SetLoadFaultForTest) and check
// that the backend still serves what it served before: a device backend
// loads into a fresh backend of its own and takes that one's state only
// once all of it loaded (DeviceBackend::AdoptHostLogic), so a failed reload
// leaves the old layers, config and workspaces in place. A Load may run
// from any thread while another backend of the same device runs steps and
// captures graphs, so it waits only for the streams its own uploads used,
// never for the whole device (which CUDA forbids during a capture).
#pragma once

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moe {

enum class LoadPoint {
  kWeights,      // the layers' weights uploaded
  kHostParts,    // the host copies of the router part (LoadHostParts)
  kUploadsDone,  // the load's own stream waited for
  kWorkspaces,   // the routing's and shared expert's workspaces, the I/O
  kStepBuffers,  // the step's buffers and their calibration
};
inline constexpr LoadPoint kLoadPoints[] = {
    LoadPoint::kWeights, LoadPoint::kHostParts, LoadPoint::kUploadsDone,
    LoadPoint::kWorkspaces, LoadPoint::kStepBuffers};

inline absl::string_view LoadPointName(LoadPoint p) {
  switch (p) {
    case LoadPoint::kWeights:
      return "weights";
    case LoadPoint::kHostParts:
      return "host parts";
    case LoadPoint::kUploadsDone:
      return "uploads done";
    case LoadPoint::kWorkspaces:
      return "workspaces";
    case LoadPoint::kStepBuffers:
      return "step buffers";
  }
  return "?";
}

// Returns the status a Load fails with at a point (OK: it goes on).
using LoadFault = std::function<absl::Status(LoadPoint)>;

inline LoadFault& LoadFaultSlot() {
  static LoadFault fault;
  return fault;
}

// Tests only, while no Load runs on another thread: an empty fault clears.
inline void SetLoadFaultForTest(LoadFault fault) {
  LoadFaultSlot() = std::move(fault);
}

// What a Load calls after each point: the injected failure, if any.
inline absl::Status AtLoadPoint(LoadPoint p) {
  const LoadFault& f = LoadFaultSlot();
  return f ? f(p) : absl::OkStatus();
}

}  // namespace moe
