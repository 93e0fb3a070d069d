// The --device flag of every binary: "cpu", "cuda" (device 0) or "cuda:N".
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moe {

struct DeviceSpec {
  bool cuda = false;
  int ordinal = 0;  // CUDA device, when cuda
  std::string ToString() const;
};

// INVALID_ARGUMENT naming the flag and the accepted spellings otherwise.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& text);

}  // namespace moe
