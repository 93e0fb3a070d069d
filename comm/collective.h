// Which collective library a worker group uses (moe-worker --collective).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace moe {

// kAuto: NCCL for CUDA workers, Gloo for CPU workers. Gloo with CUDA
// workers stages rows through pinned host memory, so several workers can
// share one GPU (NCCL refuses two ranks on one device).
enum class Collective { kAuto, kGloo, kNccl };

inline absl::StatusOr<Collective> ParseCollective(const std::string& text) {
  if (text == "auto") return Collective::kAuto;
  if (text == "gloo") return Collective::kGloo;
  if (text == "nccl") return Collective::kNccl;
  return absl::InvalidArgumentError(absl::StrCat(
      "--collective must be auto, gloo or nccl, got '", text, "'"));
}

}  // namespace moe
