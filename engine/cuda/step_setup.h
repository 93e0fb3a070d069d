// Prepare's one-time setup of a device backend's step buffers (sized from
// the step bounds, allocated at the first step so that a router whose
// experts run on workers never holds them): built whole, every allocation
// and then the warm-up that uses them, before the backend keeps them. A
// failure at any point (out of device memory at the first step) leaves the
// backend as it was before the step, and the next step tries again, instead
// of running on buffers that were never allocated. Plain C++: tested on the
// CPU (tests/engine/step_setup_test.cc).
#pragma once

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe {

template <typename Buffers>
class StepSetup {
 public:
  using Make = absl::FunctionRef<absl::StatusOr<std::unique_ptr<Buffers>>()>;
  using Warm = absl::FunctionRef<absl::Status(Buffers&)>;

  // Nothing once set up; else make(), then warm() on what it made, and only
  // when both succeed are the buffers kept.
  absl::Status Ensure(Make make, Warm warm) {
    if (buffers_ != nullptr) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<Buffers>> b = make();
    if (!b.ok()) return b.status();
    if (absl::Status s = warm(**b); !s.ok()) return s;
    buffers_ = *std::move(b);
    return absl::OkStatus();
  }

  Buffers* get() const { return buffers_.get(); }
  void Reset() { buffers_.reset(); }

 private:
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace moe
