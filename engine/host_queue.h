// The CPU's step queue (engine/step_queue.h): the calling thread, where each
// piece has finished when it returns. Marks read the steady clock, copies
// are memcpy, and there is nothing to wait for or drain.
#pragma once

#include <array>
#include <chrono>

#include "engine/step_queue.h"

namespace moe {

class HostQueue : public StepQueue {
 public:
  void* stream() override { return nullptr; }
  void Mark(EpMark mark) override;
  double ElapsedUs(EpMark from, EpMark to) const override;
  absl::Status CopyToHost(const void* src, void* dst, size_t bytes) override;
  absl::Status CopyFromHost(const void* src, void* dst, size_t bytes) override;
  absl::Status Finish(Communicator&,
                      std::chrono::steady_clock::time_point) override {
    return absl::OkStatus();  // every piece ran to completion on this thread
  }
  void Drain(Communicator&, std::chrono::steady_clock::time_point) override {}

 private:
  std::array<std::chrono::steady_clock::time_point, kNumEpMarks> marks_{};
};

}  // namespace moe
