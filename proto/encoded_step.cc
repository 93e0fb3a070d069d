#include "proto/encoded_step.h"

#include <utility>

#include "moe/v1/worker.pb.h"
#include "proto/step_codec.h"

namespace moe {

// The message's step is set once: later encodings overwrite it in place.
EncodedStep::EncodedStep()
    : message_(std::make_unique<moe::v1::RouterMessage>()) {}
EncodedStep::~EncodedStep() = default;
EncodedStep::EncodedStep(EncodedStep&&) noexcept = default;
EncodedStep& EncodedStep::operator=(EncodedStep&&) noexcept = default;

void EncodedStep::Encode(const StepContent& content) {
  EncodeStep(content, message_->mutable_step());
}

void EncodedStep::Address(uint64_t generation, uint64_t step_id,
                          std::chrono::milliseconds timeout) {
  moe::v1::Step* step = message_->mutable_step();
  step->set_generation(generation);
  step->set_step_id(step_id);
  step->set_timeout_ms(timeout.count());
}

std::vector<EncodedStep> EncodedStepPool::Take() {
  std::vector<EncodedStep> steps;
  absl::MutexLock lock(&mu_);
  if (!spare_.empty()) {
    steps.swap(spare_.back());
    spare_.pop_back();
  }
  return steps;
}

void EncodedStepPool::Give(std::vector<EncodedStep> steps) {
  absl::MutexLock lock(&mu_);
  spare_.push_back(std::move(steps));
}

}  // namespace moe
