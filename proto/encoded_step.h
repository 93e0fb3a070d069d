// A router's Step encoded for the wire, opaque to the step channel that
// sends it (server/group/step_channel.h sees no wire type), and the sets of
// them that later steps reuse. Encoding over an earlier step's message
// overwrites its row strings instead of allocating anew (EncodeStep keeps
// their size), so a steady stream of steps of one shape allocates nothing;
// the channel encodes outside its locks, so concurrent steps encode in
// parallel, each in a set of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/step_views.h"

namespace moe::v1 {
class RouterMessage;
}

namespace moe {

class EncodedStep {
 public:
  EncodedStep();
  ~EncodedStep();
  EncodedStep(EncodedStep&&) noexcept;
  EncodedStep& operator=(EncodedStep&&) noexcept;

  // `content` as the Step (EncodeStep), over the last one encoded here.
  void Encode(const StepContent& content);
  // What only the sender knows: the group's generation, the step's id and
  // the time it has left.
  void Address(uint64_t generation, uint64_t step_id,
               std::chrono::milliseconds timeout);
  // The RouterMessage carrying the step, for the connection to write (the
  // RPC edge: server/api/worker_control_service.cc).
  const moe::v1::RouterMessage& message() const { return *message_; }

 private:
  std::unique_ptr<moe::v1::RouterMessage> message_;
};

// The encoded steps of finished sends, one set per step that was sent
// concurrently, handed to the next sends.
class EncodedStepPool {
 public:
  // A set of an earlier send (empty when none is spare).
  std::vector<EncodedStep> Take();
  void Give(std::vector<EncodedStep> steps);

 private:
  absl::Mutex mu_;
  std::vector<std::vector<EncodedStep>> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe
