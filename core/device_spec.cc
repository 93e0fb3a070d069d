#include "core/device_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moe {

std::string DeviceSpec::ToString() const {
  return cuda ? absl::StrCat("cuda:", ordinal) : "cpu";
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  d.cuda = true;
  if (text == "cuda") return d;
  if (text.rfind("cuda:", 0) == 0 &&
      absl::SimpleAtoi(text.substr(5), &d.ordinal) && d.ordinal >= 0) {
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", text, ": expected cpu, cuda or cuda:N"));
}

}  // namespace moe
